"""The all-MiniLM-L6-v2 notebook's calls, in its order, on a tiny BERT sentence-transformers folder under its Hub id.

Cell titles give the notebook's code-cell number. The all-nli pairs come from a local file in their columns;
training is cut to a few steps. `bf16` stays off: a Linux CPU torch refuses it (a Mac's MPS accepts it).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_embeddings  # noqa: E402

DATA = prepare_embeddings({"unsloth/all-MiniLM-L6-v2": "bert"})

# %% [6] load by Hub id
from unsloth import FastSentenceTransformer  # noqa: E402

model = FastSentenceTransformer.from_pretrained(
    model_name="unsloth/all-MiniLM-L6-v2",
    max_seq_length=512,
    full_finetuning=False,
)

# %% [8] LoRA adapters
model = FastSentenceTransformer.get_peft_model(
    model,
    r=64,
    target_modules=["value", "key", "dense", "query"],
    lora_alpha=128,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing=False,
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
    task_type="FEATURE_EXTRACTION",
)

# %% [10] the dataset
from datasets import load_dataset  # noqa: E402

dataset = load_dataset("json", data_files=DATA["sentence-transformers/all-nli"], split="train")

# %% [12] show
print("Dataset examples:")
for i in range(6):
    print(dataset[i])

# %% [14] inference before training
from sentence_transformers import util  # noqa: E402


def test_inference(model, run_name="Run"):
    query = "A soccer player in a blue jersey is running across the field."
    candidates = [
        "An athlete is practicing a sport outdoors.",
        "The player is about to score a goal for his team.",
        "A person is sitting quietly on the grass.",
        "Jersey is a knit fabric used predominantly for clothing manufacture.",
    ]
    query_emb = model.encode(query, convert_to_tensor=True)
    candidate_embs = model.encode(candidates, convert_to_tensor=True)
    scores = util.cos_sim(query_emb, candidate_embs)[0]
    results = sorted(
        ((candidates[i], score.item()) for i, score in enumerate(scores)), key=lambda x: x[1], reverse=True
    )
    print(f"\n--- {run_name} Results for query: '{query}' ---")
    for text, score in results:
        print(f"{score:.4f} | {text}")


test_inference(model, run_name="Pre-Training")

# %% [16] the trainer
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments  # noqa: E402
from sentence_transformers.sentence_transformer import losses  # noqa: E402
from sentence_transformers.sentence_transformer.training_args import BatchSamplers  # noqa: E402
from unsloth import is_bf16_supported  # noqa: E402

loss = losses.MultipleNegativesRankingLoss(model)
trainer = SentenceTransformerTrainer(
    model=model,
    train_dataset=dataset,
    loss=loss,
    args=SentenceTransformerTrainingArguments(
        output_dir="output",
        max_steps=4,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=1,
        learning_rate=2e-4,
        fp16=not is_bf16_supported(),
        logging_steps=1,
        warmup_ratio=0.03,
        report_to="none",
        lr_scheduler_type="linear",
        batch_sampler=BatchSamplers.NO_DUPLICATES,
    ),
)

# %% [17] memory before
import torch  # noqa: E402

gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")

# %% [19] train
trainer_stats = trainer.train()

# %% [20] memory and time after
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"Peak reserved memory = {used_memory} GB.")

# %% [22] inference after training
test_inference(model, run_name="Post-Training")

# %% [24] save the adapters and tokenizer
model.save_pretrained("all_minilm_l6_v2_lora")
model.tokenizer.save_pretrained("all_minilm_l6_v2_lora")

# %% [26] reload the adapters (the notebook's `if False:` branch, run)
model = FastSentenceTransformer.from_pretrained("all_minilm_l6_v2_lora")

# %% [28] merged save (the notebook's `if False:` branch, run)
model.save_pretrained_merged("all_minilm_l6_v2_finetune_16bit", tokenizer=model.tokenizer, save_method="merged_16bit")

# %% [30] GGUF, Q8_0 and f16 (the notebook's `if False:` branches, run; its q4_k_m is refused by name)
model.save_pretrained_gguf("all_minilm_l6_v2_finetune")
model.save_pretrained_gguf("all_minilm_l6_v2_finetune", quantization_method="f16")
print(sorted(path.name for path in Path("all_minilm_l6_v2_finetune").glob("*.gguf")))
