"""The bert_classification notebook's calls, in its order, on a tiny ModernBERT under its Hub id.

Cell titles give the notebook's code-cell number. The emotion rows come from a local file in the dataset's columns
(`text`, `label`); training is cut to a few steps. The notebook loads with `full_finetuning=True`, so its
`get_peft_model` cell has no effect (as on CUDA) and `save_pretrained` writes the whole classifier.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_embeddings  # noqa: E402

DATA = prepare_embeddings({"unsloth/ModernBERT-large": "modernbert"})

# %% [1] load by Hub id, as a classifier
import os  # noqa: E402

from transformers import AutoModelForSequenceClassification  # noqa: E402

from unsloth import FastModel  # noqa: E402

os.environ["UNSLOTH_DISABLE_FAST_GENERATION"] = "1"  # the notebook's %env line
max_seq_length = 2048
dtype = None
load_in_4bit = False
id2label = {0: "sadness", 1: "joy", 2: "love", 3: "anger", 4: "fear", 5: "surprise"}
label2id = {"sadness": 0, "joy": 1, "love": 2, "anger": 3, "fear": 4, "surprise": 5}
model, tokenizer = FastModel.from_pretrained(
    model_name="unsloth/ModernBERT-large",
    auto_model=AutoModelForSequenceClassification,
    max_seq_length=max_seq_length,
    dtype=dtype,
    num_labels=6,
    full_finetuning=True,
    id2label=id2label,
    label2id=label2id,
    load_in_4bit=load_in_4bit,
)

# %% [2] LoRA adapters (no effect: full fine-tuning)
model = FastModel.get_peft_model(
    model,
    r=16,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=16,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
    task_type="SEQ_CLS",
)

# %% [3] the dataset, split and tokenized
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["dair-ai/emotion"], split="train[:48]")
dataset = dataset.train_test_split(test_size=0.2)


def tokenize_function(examples):
    return tokenizer(examples["text"])


train_dataset = dataset["train"].map(tokenize_function, batched=True)
val_dataset = dataset["test"].map(tokenize_function, batched=True)

# %% [4] class weights
from sklearn.utils.class_weight import compute_class_weight  # noqa: E402
import numpy as np  # noqa: E402

labels = train_dataset["label"]
class_weights = compute_class_weight("balanced", classes=np.unique(labels), y=labels)

# %% [5] rename the label column
train_dataset = train_dataset.rename_column("label", "labels")
val_dataset = val_dataset.rename_column("label", "labels")

# %% [6] show
print(class_weights)

# %% [7] compute_metrics
from sklearn.metrics import accuracy_score  # noqa: E402


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    preds = logits.argmax(axis=-1)
    return {"accuracy": accuracy_score(labels, preds)}


# %% [8] the trainer
from transformers import TrainingArguments, Trainer  # noqa: E402
from unsloth import is_bfloat16_supported  # noqa: E402, F401  (its value sets fp16/bf16 below on CUDA)

trainer = Trainer(
    model=model,
    processing_class=tokenizer,
    eval_dataset=val_dataset,
    train_dataset=train_dataset,
    args=TrainingArguments(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        warmup_steps=1,
        num_train_epochs=1,
        learning_rate=5e-5,
        fp16=False,  # the notebook's `not is_bfloat16_supported()`: a Linux CPU torch refuses fp16 here
        bf16=False,  # the notebook's `is_bfloat16_supported()`: a Linux CPU torch refuses bf16 here
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.001,
        eval_strategy="steps",
        eval_steps=0.50,
        lr_scheduler_type="linear",
        seed=3407,
        output_dir="outputs",
        report_to="none",
    ),
    compute_metrics=compute_metrics,
)

# %% [9] train
trainer_stats = trainer.train()

# %% [45] inference through transformers' pipeline
from transformers import pipeline  # noqa: E402

sentence1 = "We just finished training ModernBERT with Unsloth and it's amazing!"
classifier = pipeline("sentiment-analysis", model=model, tokenizer=tokenizer)
print(classifier(sentence1))

# %% [15] save
model.save_pretrained("bert_classification_lora")
tokenizer.save_pretrained("bert_classification_lora")
