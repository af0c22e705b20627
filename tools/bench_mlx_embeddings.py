"""An embedding LoRA step, tokens per second: ours (`FastSentenceTransformer` + sentence-transformers'
`SentenceTransformerTrainer` with `MultipleNegativesRankingLoss`, on MLX) against mlx-embeddings-lora's
`train_contrastive` with its "mnr" loss.

Both train a LoRA (same rank, scale and target modules, every layer) on the same tiny Qwen3-Embedding (the kit's
`qwen3` row resized by `--embedding-hidden` / `--embedding-layers`) over the same (anchor, positive) rows: ours
tokenizes the text rows, and mlx-embeddings-lora gets exactly those token ids, every row `--embedding-seq-len` tokens
long, so neither pads and both run batch x length tokens per column. Same batch size, AdamW at the same constant
learning rate. The losses differ, as the notes in docs/benchmarks.md say: sentence-transformers' MNRL scores each
anchor against every positive in the batch, scaled by 20; mlx-embeddings-lora's "mnr" against one rolled positive,
unscaled; ours clips the gradient's global norm at 1.0 (its default), mlx-embeddings-lora does not clip. Its step is
always `mx.compile`d; ours runs both ways (compiled is its default on a GPU, uncompiled on the CPU; compiled, it pads
to 32-token buckets, which the default 64-token rows fill). The clock runs from the end of the warm-up steps to the
end of the last step, read from each trainer's own per-step hook; runs alternate and the median of the repeats is
reported. Throughput counts every token of both columns per second.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

from tools.bench_step_clock import StepClock

LORA_NAME = "mlx-embeddings-lora train_contrastive (mnr)"
OURS_NAME = "unsloth SentenceTransformerTrainer (MNRL)"
# Our step both ways: `mx_compile` is on by default on a GPU and off on the CPU.
OURS_NAMES = {False: f"{OURS_NAME} (uncompiled)", True: f"{OURS_NAME} (mx_compile)"}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = 1e-4
RANK, ALPHA = 8, 16


def embeddings_available() -> str:
    """Why the embedding row cannot run here ('' when it can): it needs sentence-transformers and
    mlx-embeddings-lora, which `nox -s bench_mlx` installs."""
    for module, package in (
        ("sentence_transformers", "sentence-transformers"),
        ("mlx_embeddings_lora.trainer.contrastive_trainer", "mlx-embeddings-lora"),
    ):
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed"
    return ""


@contextlib.contextmanager
def _metal_answers() -> Iterator[None]:
    """mlx-embeddings-lora sets the wired limit from Metal's recommended working set; off a Mac Metal answers an
    empty dict, so it is given the answer of a device with no wired memory to set (a limit of 0)."""
    import mlx.core as mx

    if mx.metal.is_available():
        yield
        return
    original = mx.metal.device_info
    mx.metal.device_info = lambda: {"max_recommended_working_set_size": 0}
    try:
        yield
    finally:
        mx.metal.device_info = original


def text_rows(tokenizer: Any, count: int, length: int, seed: int) -> List[Dict[str, str]]:
    """(anchor, positive) texts decoded from seeded random ids, long enough that every one is cut to `length`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = len(tokenizer) - len(tokenizer.all_special_ids)

    def text() -> str:
        return tokenizer.decode(rng.integers(0, vocab, size=3 * length).tolist(), skip_special_tokens=True)

    return [{"anchor": text(), "positive": text()} for _ in range(count)]


def _ours(folder: Path, rows: List[Dict[str, str]], options: Any, output: Path, compiled: bool) -> float:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer import losses

    from unsloth.mlx import FastSentenceTransformer  # the MLX package itself: the bench runs off a Mac
    from unsloth.mlx.compat.sentence_transformers_trainer import route_sentence_transformers

    # Off a Mac without UNSLOTH_MLX=1 the import hooks are off, so ST's trainer is routed to the MLX one here.
    route_sentence_transformers(sys.modules[SentenceTransformerTrainer.__module__])

    model = FastSentenceTransformer.from_pretrained(str(folder), max_seq_length=options.embedding_seq_len)
    model = FastSentenceTransformer.get_peft_model(
        model, r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, random_state=options.seed
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output),
        per_device_train_batch_size=options.batch,
        max_steps=options.warmup + options.embedding_steps,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=options.seed,
    )
    clock = StepClock()
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        loss=losses.MultipleNegativesRankingLoss(model),
        callbacks=[clock],
    )
    trainer.args.mx_compile = compiled  # not a SentenceTransformerTrainingArguments field
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.train()
    return clock.seconds_after(options.warmup)


def _theirs(folder: Path, token_rows: List[tuple], options: Any, output: Path) -> float:
    import mlx.core as mx
    import mlx.optimizers as optimizers
    from mlx_embeddings.utils import load
    from mlx_embeddings_lora.trainer.contrastive_trainer import ContrastiveTrainingArgs, train_contrastive
    from mlx_embeddings_lora.trainer.lora import linear_to_lora_layers

    model, _ = load(str(folder))
    model.freeze()
    keys = [
        f"{'self_attn' if name.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}.{name}"
        for name in TARGETS
    ]
    layers = len(model.model.layers)
    mx.random.seed(options.seed)
    linear_to_lora_layers(model, layers, {"rank": RANK, "scale": ALPHA / RANK, "dropout": 0.0, "keys": keys})
    output.mkdir(parents=True, exist_ok=True)
    args = ContrastiveTrainingArgs(
        batch_size=options.batch,
        iters=options.warmup + options.embedding_steps,
        steps_per_report=1,
        steps_per_eval=None,
        steps_per_save=10**9,
        max_seq_length=options.embedding_seq_len,
        adapter_file=str(output / "adapters.safetensors"),
    )
    clock = StepClock()
    with _metal_answers(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train_contrastive(
            model,
            optimizers.AdamW(learning_rate=LEARNING_RATE),
            token_rows,
            None,
            args=args,
            loss_fn="mnr",
            training_callback=clock,
        )
    return clock.seconds_after(options.warmup)


def measure_embeddings(workdir: Path, options: Any) -> Dict[str, Any]:
    """Median tokens/s of both trainers on the same model shape and token rows."""
    from tools.kits.tiny_embedding_model import build_tiny_embedding_model
    from unsloth.mlx import FastSentenceTransformer

    hidden, layers, length = options.embedding_hidden, options.embedding_layers, options.embedding_seq_len
    shape = {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": max(1, hidden // 32),
        "num_key_value_heads": max(1, hidden // 64),
        "head_dim": 32,
        "intermediate_size": 3 * hidden,
        "max_position_embeddings": max(128, length),
    }
    folder = build_tiny_embedding_model(workdir / "model", "qwen3", max_seq_length=length, config_overrides=shape)
    tokenizer = FastSentenceTransformer.from_pretrained(str(folder), max_seq_length=length).tokenizer
    rows = text_rows(tokenizer, options.batch * (options.warmup + options.embedding_steps), length, options.seed)
    # What ours feeds the model, row by row; every one is `length` tokens, so no batch pads.
    token_rows = []
    for row in rows:
        anchor, positive = (tokenizer(row[column], truncation=True, max_length=length)["input_ids"] for column in row)
        if len(anchor) != length or len(positive) != length:
            raise RuntimeError(f"a benchmark row tokenized to {len(anchor)} / {len(positive)} tokens, not {length}")
        token_rows.append((anchor, positive, None))
    runners = {
        LORA_NAME: lambda out: _theirs(folder, token_rows, options, out),
        OURS_NAMES[False]: lambda out: _ours(folder, rows, options, out, False),
        OURS_NAMES[True]: lambda out: _ours(folder, rows, options, out, True),
    }
    seconds: Dict[str, List[float]] = {name: [] for name in runners}
    for repeat in range(options.repeats):
        for index, (name, run) in enumerate(runners.items()):
            seconds[name].append(run(workdir / f"embeddings-{repeat}-{index}"))
    tokens = 2 * options.batch * length * options.embedding_steps
    rates = {name: tokens / statistics.median(values) for name, values in seconds.items()}
    return {
        "model": {"family": "qwen3", **shape},
        "batch": options.batch,
        "seq_len": length,
        "steps": options.embedding_steps,
        "lora_rank": RANK,
        "seconds": seconds,
        "tokens_per_second": rates,
        "ratio_to_mlx_embeddings_lora": {name: rate / rates[LORA_NAME] for name, rate in rates.items()},
    }


def format_embeddings_table(result: Dict[str, Any]) -> str:
    model = result["model"]
    lines = [
        f"| embedding LoRA step (Qwen3-Embedding shape, hidden {model['hidden_size']}, {model['num_hidden_layers']} "
        f"layers; batch {result['batch']} x 2 columns x {result['seq_len']} tokens, LoRA r{result['lora_rank']}) "
        "| loss | tokens/s (median) | vs mlx-embeddings-lora |",
        "| --- | --- | ---: | ---: |",
    ]
    losses = {LORA_NAME: "one rolled negative, unscaled"}
    losses.update(dict.fromkeys(OURS_NAMES.values(), "every in-batch negative, scale 20"))
    for name, rate in result["tokens_per_second"].items():
        ratio = result["ratio_to_mlx_embeddings_lora"][name]
        lines.append(f"| {name} | {losses[name]} | {rate:,.0f} | {ratio:.2f}x |")
    return "\n".join(lines)


def add_embedding_arguments(parser: Any) -> None:
    parser.add_argument(
        "--embedding-steps", type=int, help="timed embedding LoRA steps (0: skip; default 10 if installed)"
    )
    parser.add_argument("--embedding-hidden", type=int, default=256, help="hidden size of the embedding row's model")
    parser.add_argument("--embedding-layers", type=int, default=4, help="layers of the embedding row's model")
    parser.add_argument("--embedding-seq-len", type=int, default=64, help="tokens of every anchor and positive")
