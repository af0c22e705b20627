"""The EmbeddingGemma (300M) notebook's calls, in its order, on a tiny EmbeddingGemma folder under its Hub id.

Cell titles give the notebook's code-cell number. The miriad rows come from a local file in their columns (the
notebook streams 10,000 and 2,000 of them); training is cut to a few steps. `bf16` stays off: a Linux CPU torch
refuses it (a Mac's MPS accepts it).
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import prepare_embeddings  # noqa: E402

DATA = prepare_embeddings({"unsloth/embeddinggemma-300m": "gemma3_text"})

# %% [6] load by Hub id
from unsloth import FastSentenceTransformer  # noqa: E402

model = FastSentenceTransformer.from_pretrained(
    model_name="unsloth/embeddinggemma-300m",
    max_seq_length=1024,
    full_finetuning=False,
)

# %% [8] LoRA adapters
model = FastSentenceTransformer.get_peft_model(
    model,
    r=32,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=64,
    lora_dropout=0,
    bias="none",
    use_gradient_checkpointing="unsloth",
    random_state=3407,
    use_rslora=False,
    loftq_config=None,
    task_type="FEATURE_EXTRACTION",
)

# %% [10] the datasets, as the notebook builds them from streamed rows
from datasets import Dataset, load_dataset  # noqa: E402

rows = list(load_dataset("json", data_files=DATA["tomaarsen/miriad-4.4M-split"], split="train"))
stream_train, stream_eval = rows[:48], rows[48:]
train_dataset = Dataset.from_generator(lambda: (yield from stream_train))
eval_dataset = Dataset.from_generator(lambda: (yield from stream_eval))

# %% [12] show
print(train_dataset[0])

# %% [14] the evaluator, before training
import torch  # noqa: E402
from sentence_transformers.evaluation import InformationRetrievalEvaluator  # noqa: E402

queries = dict(enumerate(eval_dataset["question"]))
corpus = dict(enumerate(list(eval_dataset["passage_text"]) + train_dataset["passage_text"][:16]))
relevant_docs = {idx: [idx] for idx in queries}
evaluator = InformationRetrievalEvaluator(
    queries=queries,
    corpus=corpus,
    relevant_docs=relevant_docs,
    show_progress_bar=False,
    batch_size=64,
)
with torch.autocast(device_type="cuda", dtype=model.dtype, enabled=model.dtype != torch.float16):
    print(evaluator(model))

# %% [16] the trainer
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments  # noqa: E402
from sentence_transformers.sentence_transformer import losses  # noqa: E402
from sentence_transformers.sentence_transformer.training_args import BatchSamplers  # noqa: E402

loss = losses.MultipleNegativesRankingLoss(model)
trainer = SentenceTransformerTrainer(
    model=model,
    train_dataset=train_dataset,
    eval_dataset=eval_dataset,
    loss=loss,
    args=SentenceTransformerTrainingArguments(
        max_steps=4,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=2e-5,
        logging_steps=1,
        warmup_ratio=0.03,
        prompts={"question": model.prompts["query"], "passage_text": model.prompts["document"]},
        report_to="none",
        eval_strategy="steps",
        eval_steps=2,
        output_dir="output",
        lr_scheduler_type="linear",
        batch_sampler=BatchSamplers.NO_DUPLICATES,
    ),
    evaluator=evaluator,
)

# %% [17] memory before
gpu_stats = torch.cuda.get_device_properties(0)
start_gpu_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
max_memory = round(gpu_stats.total_memory / 1024 / 1024 / 1024, 3)
print(f"GPU = {gpu_stats.name}. Max memory = {max_memory} GB.")
print(f"{start_gpu_memory} GB of memory reserved.")

# %% [19] train
trainer_stats = trainer.train()

# %% [20] memory and time after
used_memory = round(torch.cuda.max_memory_reserved() / 1024 / 1024 / 1024, 3)
used_memory_for_lora = round(used_memory - start_gpu_memory, 3)
print(f"{trainer_stats.metrics['train_runtime']} seconds used for training.")
print(f"{round(trainer_stats.metrics['train_runtime'] / 60, 2)} minutes used for training.")
print(f"Peak reserved memory = {used_memory} GB, {round(used_memory / max_memory * 100, 3)} % of max memory.")
print(f"Peak reserved memory for training = {used_memory_for_lora} GB.")

# %% [22] the evaluator after training
with torch.autocast(device_type="cuda", dtype=model.dtype, enabled=model.dtype != torch.float16):
    print(evaluator(model))

# %% [25] ranking with model.similarity
query = "Patient presents with sharp chest pain that improves when leaning forward."
candidates = [
    "Acute Pericarditis often involves pleuritic chest pain relieved by sitting up and leaning forward.",
    "Myocardial Infarction typically presents with crushing substernal pressure and radiation to the left arm.",
]
query_emb = model.encode(query, convert_to_tensor=True)
candidate_embs = model.encode(candidates, convert_to_tensor=True)
similarities = model.similarity(query_emb, candidate_embs)
ranking = similarities.argsort(descending=True)[0]
for idx in ranking.tolist():
    print(f"{similarities[0][idx].item():.4f} | {candidates[idx]}")

# %% [27] save the adapters and tokenizer
model.save_pretrained("embeddinggemma_lora")
model.tokenizer.save_pretrained("embeddinggemma_lora")

# %% [29] reload the adapters (the notebook's `if False:` branch, run)
model = FastSentenceTransformer.from_pretrained("embeddinggemma_lora")

# %% [31] merged save (the notebook's `if False:` branch, run)
model.save_pretrained_merged("embeddinggemma_finetune_16bit", tokenizer=model.tokenizer, save_method="merged_16bit")

# %% [33] GGUF, Q8_0 and f16 (the notebook's `if False:` branches, run; its q4_k_m is refused by name)
model.save_pretrained_gguf("embeddinggemma_finetune")
model.save_pretrained_gguf("embeddinggemma_finetune", quantization_method="f16")
print(sorted(path.name for path in Path("embeddinggemma_finetune").glob("*.gguf")))
