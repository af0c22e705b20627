"""A DPO step, tokens per second: our `DPOTrainer` (trl's name on MLX) against mlx-lm-lora's `train_dpo`.

Both train the same LoRA model (FastLanguageModel.get_peft_model on the bench's tiny llama, same rank and alpha)
on the same preference rows: ours tokenizes the text rows, and mlx-lm-lora gets exactly those token ids (prompt
lengths included), cut so that every prompt has `prompt_len` tokens and every answer `answer_len`. Same batch size,
beta, learning rate and AdamW without weight decay; ours clips the gradient's global norm at 1.0, its default, and
mlx-lm-lora does not clip. Each uses the reference it offers: ours the model with its adapters off
(`ref_model=None`, TRL's PEFT reference), mlx-lm-lora a frozen copy of the base model (its `reference_model_path`).
The clock runs from the end of the warm-up steps to the end of the last step, read from each trainer's own
per-step hook; runs alternate and the median of the repeats is reported. Throughput counts every token of the
chosen and rejected sequences (prompt + answer) per second.
"""

from __future__ import annotations

import contextlib
import io
import statistics
from pathlib import Path
from typing import Any, Dict, Iterator, List

from tools.bench_step_clock import StepClock

BETA = 0.1
LEARNING_RATE = 1e-6
LORA_NAME = "mlx-lm-lora train_dpo"
OURS_NAME = "unsloth DPOTrainer"
# Our step both ways: `mx_compile` is on by default on a GPU and off on the CPU.
OURS_NAMES = {False: f"{OURS_NAME} (uncompiled)", True: f"{OURS_NAME} (mx_compile)"}


def lora_available() -> bool:
    """Whether mlx-lm-lora's DPO trainer imports here (it is installed by `nox -s bench_mlx` only)."""
    try:
        import mlx_lm_lora.trainer.dpo_trainer  # noqa: F401
    except ImportError:
        return False
    return True


def preference_rows(tokenizer: Any, vocab: int, count: int, prompt_len: int, answer_len: int, seed: int) -> List[dict]:
    """Text rows decoded from seeded random ids, three times longer than kept so each side fills its cut."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def text(length: int) -> str:
        return tokenizer.decode(rng.integers(5, vocab, size=3 * length).tolist())

    return [
        {"prompt": text(prompt_len), "chosen": text(answer_len), "rejected": text(answer_len)} for _ in range(count)
    ]


def _lora_model(folder: Path, length: int, rank: int, seed: int) -> Any:
    import mlx.core as mx

    # The MLX package itself, so the bench runs off a Mac without UNSLOTH_MLX=1.
    from unsloth.mlx import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(folder), max_seq_length=length)
    mx.random.seed(seed)
    return FastLanguageModel.get_peft_model(model, r=rank, lora_alpha=2 * rank), tokenizer


def _ours_trainer(
    folder: Path, rows: List[dict], options: Any, steps: int, output: Path, callbacks: list, compiled: bool = False
) -> Any:
    from unsloth.mlx.rl.dpo import DPOTrainer
    from unsloth.mlx.rl.dpo_config import DPOConfig

    length = options.dpo_prompt_len + options.dpo_answer_len
    model, tokenizer = _lora_model(folder, length, options.rank, options.seed)
    config = DPOConfig(
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=1,
        max_steps=steps,
        learning_rate=LEARNING_RATE,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        beta=BETA,
        max_length=length,
        max_prompt_length=options.dpo_prompt_len,
        max_completion_length=options.dpo_answer_len,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        output_dir=str(output),
        mx_compile=compiled,
    )
    return DPOTrainer(
        model=model, ref_model=None, args=config, train_dataset=rows, processing_class=tokenizer, callbacks=callbacks
    )


def tokenized_pairs(folder: Path, rows: List[dict], options: Any, output: Path) -> List[dict]:
    """The rows as our trainer tokenized and cut them, in mlx-lm-lora's dataset shape; each must be full length."""
    trainer = _ours_trainer(folder, rows, options, 1, output, [])
    length = options.dpo_prompt_len + options.dpo_answer_len
    pairs = []
    for (chosen, chosen_start), (rejected, rejected_start) in trainer.train_rows.sequences:
        if {len(chosen), len(rejected)} != {length} or {chosen_start, rejected_start} != {options.dpo_prompt_len}:
            raise ValueError(f"a preference row tokenized short of {length} tokens: lower --dpo-prompt-len/answer-len")
        pairs.append(
            {
                "chosen": chosen,
                "rejected": rejected,
                "chosen_prompt_length": chosen_start,
                "rejected_prompt_length": rejected_start,
            }
        )
    return pairs


def time_ours(folder: Path, rows: List[dict], options: Any, output: Path, compiled: bool) -> float:
    clock = StepClock()
    steps = options.warmup + options.dpo_steps
    trainer = _ours_trainer(folder, rows, options, steps, output, [clock], compiled)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.train()
    return clock.seconds_after(options.warmup)


@contextlib.contextmanager
def _metal_working_set() -> Iterator[None]:
    """mlx-lm-lora wires Metal's recommended working set, a key only a Mac's `device_info()` holds: zero elsewhere."""
    import mlx.core as mx

    real = mx.device_info
    if "max_recommended_working_set_size" in real():
        yield
        return
    mx.device_info = lambda: {**real(), "max_recommended_working_set_size": 0}
    try:
        yield
    finally:
        mx.device_info = real


def time_mlx_lm_lora(folder: Path, pairs: List[dict], options: Any, output: Path) -> float:
    import mlx.optimizers as optimizers
    import numpy as np
    from mlx_lm_lora.trainer.dpo_trainer import DPOTrainingArgs, train_dpo

    from unsloth_zoo.mlx import load_model

    length = options.dpo_prompt_len + options.dpo_answer_len
    model, _ = _lora_model(folder, length, options.rank, options.seed)
    reference, _ = load_model(folder)
    reference.freeze()
    output.mkdir(parents=True, exist_ok=True)
    args = DPOTrainingArgs(
        batch_size=options.batch,
        iters=options.warmup + options.dpo_steps,
        steps_per_report=1,
        steps_per_eval=10**9,
        steps_per_save=10**9,
        max_seq_length=length,
        adapter_file=str(output / "adapters.safetensors"),
        beta=BETA,
    )
    clock = StepClock()
    # mlx-lm-lora draws each step's batch with numpy's global generator.
    np.random.seed(options.seed)
    with _metal_working_set(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train_dpo(
            model,
            reference,
            optimizers.AdamW(learning_rate=LEARNING_RATE, weight_decay=0.0, bias_correction=True),
            pairs,
            args=args,
            training_callback=clock,
        )
    return clock.seconds_after(options.warmup)


def measure_dpo(folder: Path, options: Any, workdir: Path) -> Dict[str, Any]:
    """Median tokens/s of a DPO step for both trainers, repeats interleaved."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    tokenizer = load_tokenizer(folder)
    count = options.batch * 4
    rows = preference_rows(
        tokenizer, options.vocab, count, options.dpo_prompt_len, options.dpo_answer_len, options.seed + 3
    )
    pairs = tokenized_pairs(folder, rows, options, workdir / "tokenize")
    tokens = options.batch * 2 * (options.dpo_prompt_len + options.dpo_answer_len) * options.dpo_steps
    runners = {
        LORA_NAME: lambda out: time_mlx_lm_lora(folder, pairs, options, out),
        OURS_NAMES[False]: lambda out: time_ours(folder, rows, options, out, False),
        OURS_NAMES[True]: lambda out: time_ours(folder, rows, options, out, True),
    }
    seconds: Dict[str, List[float]] = {name: [] for name in runners}
    for repeat in range(options.repeats):
        for index, (name, run) in enumerate(runners.items()):
            seconds[name].append(run(workdir / f"dpo-{repeat}-{index}"))
    rates = {name: tokens / statistics.median(values) for name, values in seconds.items()}
    return {
        "rows": count,
        "batch": options.batch,
        "prompt_len": options.dpo_prompt_len,
        "answer_len": options.dpo_answer_len,
        "lora_rank": options.rank,
        "steps": options.dpo_steps,
        "warmup": options.warmup,
        "repeats": options.repeats,
        "reference": {LORA_NAME: "frozen base copy", **dict.fromkeys(OURS_NAMES.values(), "adapters off")},
        "seconds": seconds,
        "tokens_per_second": rates,
        "ratio_to_mlx_lm_lora": {name: rate / rates[LORA_NAME] for name, rate in rates.items()},
    }


def format_dpo_table(result: Dict[str, Any]) -> str:
    lines = [
        f"| DPO step (batch {result['batch']}, {result['prompt_len']} + {result['answer_len']} tokens, LoRA r"
        f"{result['lora_rank']}) | reference | tokens/s (median) | vs mlx-lm-lora |",
        "| --- | --- | ---: | ---: |",
    ]
    for name, rate in result["tokens_per_second"].items():
        lines.append(
            f"| {name} | {result['reference'][name]} | {rate:,.0f} | {result['ratio_to_mlx_lm_lora'][name]:.2f}x |"
        )
    return "\n".join(lines)
