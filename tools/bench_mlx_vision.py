"""A vision SFT step, tokens per second: ours (`FastVisionModel` + `UnslothVisionDataCollator` + `SFTTrainer`, the
notebook's path) against mlx-vlm's own `Trainer` (task vlm, algorithm sft, what `python -m mlx_vlm.train` runs).

Both train the bench's tiny Qwen 2.5 VL (`tools/kits/tiny_vlm_model.py`) with LoRA of the same rank and alpha on
the same language-model linears (ours chooses them, mlx-vlm is handed their names), no dropout, AdamW without weight
decay at a constant rate, on the same rows: one question about a coloured square and one answer, each trainer
rendering and tokenizing them through the same processor. mlx-vlm pads each batch to a multiple of 1 (its default
is 32) so neither computes padding the other does not. Ours clips the gradient's global norm at 1.0, its default;
mlx-vlm does not clip. The clock runs from the end of the warm-up steps to the end of the last step, read from each
trainer's own per-step hook; runs alternate and the median of the repeats is reported. Throughput counts the
tokens of the timed rows (image placeholders included, padding left out) per second.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

from tools.bench_step_clock import StepClock

FAMILY = "qwen2_5_vl"
LEARNING_RATE = 1e-4
QUESTION = "Describe the colour of this square in a few words."
ANSWER = "It is a square of one flat colour."
COLOURS = ((220, 30, 30), (30, 200, 40), (30, 40, 220), (230, 220, 30))
OURS_NAME = "unsloth SFTTrainer + UnslothVisionDataCollator"
MLX_VLM_NAME = "mlx-vlm Trainer (vlm/sft)"


def vlm_available() -> bool:
    """Whether mlx-vlm's trainer and Pillow import here (`nox -s bench_mlx` installs both)."""
    try:
        import mlx_vlm.trainer  # noqa: F401
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def settle_vision_steps(options: Any) -> bool:
    """False, with the install command on stderr, when vision steps were asked for and mlx-vlm is missing."""
    if options.vision_steps > 0 and not vlm_available():
        print(f"--vision-steps {options.vision_steps} needs mlx-vlm: pip install mlx-vlm==0.7.10", file=sys.stderr)
        return False
    return True


def _square(index: int) -> Any:
    from PIL import Image

    from tools.kits.tiny_vlm_model import IMAGE_SIDES

    side = IMAGE_SIDES[FAMILY]
    return Image.new("RGB", (side, side), COLOURS[index % len(COLOURS)])


def our_rows(count: int, answer: str = ANSWER) -> List[Dict[str, Any]]:
    """Rows as the vision notebooks write them: image parts inside the messages."""
    return [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": QUESTION}, {"type": "image", "image": _square(i)}],
                },
                {"role": "assistant", "content": [{"type": "text", "text": answer}]},
            ]
        }
        for i in range(count)
    ]


def mlx_vlm_rows(count: int, answer: str = ANSWER) -> List[Dict[str, Any]]:
    """The same rows in mlx-vlm's dataset shape: plain-text messages and an `images` column."""
    return [
        {
            "messages": [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": answer}],
            "images": [_square(i)],
        }
        for i in range(count)
    ]


def _our_model(folder: Path, rank: int, seed: int, checkpointing: bool = False) -> tuple:
    # The MLX package itself, so the bench runs off a Mac without UNSLOTH_MLX=1.
    from unsloth.mlx import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(folder))
    model = FastVisionModel.get_peft_model(
        model,
        finetune_vision_layers=False,
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0,
        random_state=seed,
        use_gradient_checkpointing=checkpointing,
    )
    FastVisionModel.for_training(model)
    return model, processor


def adapted_linears(model: Any) -> List[str]:
    """Qualified names of the linears our LoRA adapted, for mlx-vlm to adapt the same ones."""
    return sorted(
        name.rsplit(".lora_a", 1)[0] for name, _ in _flat(model.trainable_parameters()) if name.endswith(".lora_a")
    )


def _flat(tree: Any) -> List[tuple]:
    from mlx.utils import tree_flatten

    return list(tree_flatten(tree))


def our_trainer(
    folder: Path,
    rows: list,
    options: Any,
    steps: int,
    output: Path,
    callbacks: list,
    max_length: int = 512,
    checkpointing: bool = False,
) -> tuple:
    from unsloth.mlx import SFTConfig, UnslothTrainer, UnslothVisionDataCollator

    model, processor = _our_model(folder, options.rank, options.seed, checkpointing)
    config = SFTConfig(
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=1,
        max_steps=steps,
        learning_rate=LEARNING_RATE,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        seed=options.seed,
        save_strategy="no",
        report_to="none",
        output_dir=str(output),
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=max_length,
    )
    collator = UnslothVisionDataCollator(model, processor)
    trainer = UnslothTrainer(
        model=model, tokenizer=processor, data_collator=collator, train_dataset=rows, args=config, callbacks=callbacks
    )
    return trainer, collator


def time_ours(folder: Path, options: Any, output: Path) -> float:
    clock = StepClock()
    steps = options.warmup + options.vision_steps
    trainer, _ = our_trainer(folder, our_rows(options.batch * steps), options, steps, output, [clock])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.train()
    return clock.seconds_after(options.warmup)


def mlx_vlm_trainer(
    folder: Path,
    linears: List[str],
    rows: list,
    options: Any,
    steps: int,
    output: Path,
    callback: Any,
    max_length: int = 512,
    checkpointing: bool = False,
) -> Any:
    """mlx-vlm's own `Trainer` on `rows`, LoRA on `linears`, as `python -m mlx_vlm.train` would build it."""
    import mlx.core as mx
    import mlx.optimizers as optimizers
    from mlx_vlm.trainer import Trainer
    from mlx_vlm.trainer.peft.utils import get_peft_model
    from mlx_vlm.trainer.vlm.config import VLMTrainingArgs
    from mlx_vlm.utils import load

    model, processor = load(str(folder))
    mx.random.seed(options.seed)
    get_peft_model(model, linears, rank=options.rank, alpha=2 * options.rank, dropout=0.0, verbose=False)
    output.mkdir(parents=True, exist_ok=True)
    args = VLMTrainingArgs(
        batch_size=options.batch,
        iters=steps,
        steps_per_report=1,
        steps_per_eval=None,
        steps_per_save=10**9,
        adapter_file=str(output / "adapters.safetensors"),
        max_seq_length=max_length,
        pad_to_multiple=1,
        grad_checkpoint=checkpointing,
    )
    optimizer = optimizers.AdamW(learning_rate=LEARNING_RATE, weight_decay=0.0)
    return Trainer(
        model,
        args,
        train_dataset=rows,
        processing_class=processor,
        optimizer=optimizer,
        training_callback=callback,
        seed=options.seed,
    )


def time_mlx_vlm(folder: Path, linears: List[str], options: Any, output: Path) -> float:
    steps = options.warmup + options.vision_steps
    clock = StepClock()
    trainer = mlx_vlm_trainer(folder, linears, mlx_vlm_rows(options.batch * steps), options, steps, output, clock)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.train()
    return clock.seconds_after(options.warmup)


def row_tokens(folder: Path, options: Any, output: Path) -> Dict[str, Any]:
    """Tokens of one row as each trainer encodes it, and the linears ours adapts."""
    from mlx_vlm.trainer.vlm.sft.dataset import VisionDataset

    trainer, collator = our_trainer(folder, our_rows(1), options, 1, output, [])
    ours = len(collator.encode(our_rows(1)[0]).ids)
    theirs = int(VisionDataset(mlx_vlm_rows(1), trainer.model.config, collator.processor)[0]["input_ids"].shape[-1])
    return {OURS_NAME: ours, MLX_VLM_NAME: theirs, "linears": adapted_linears(trainer.model)}


def measure_vision(options: Any, workdir: Path) -> Dict[str, Any]:
    """Median tokens/s of a vision SFT step for both trainers, repeats interleaved."""
    from tools.kits.tiny_vlm_model import BUILDERS

    folder = BUILDERS[FAMILY](workdir / "tiny-vlm")
    counted = row_tokens(folder, options, workdir / "tokenize")
    linears = counted.pop("linears")
    runners = {
        MLX_VLM_NAME: lambda out: time_mlx_vlm(folder, linears, options, out),
        OURS_NAME: lambda out: time_ours(folder, options, out),
    }
    seconds: Dict[str, List[float]] = {name: [] for name in runners}
    for repeat in range(options.repeats):
        for index, (name, run) in enumerate(runners.items()):
            seconds[name].append(run(workdir / f"vision-{repeat}-{index}"))
    rates = {
        name: counted[name] * options.batch * options.vision_steps / statistics.median(values)
        for name, values in seconds.items()
    }
    return {
        "family": FAMILY,
        "batch": options.batch,
        "lora_rank": options.rank,
        "adapted_linears": len(linears),
        "steps": options.vision_steps,
        "warmup": options.warmup,
        "repeats": options.repeats,
        "tokens_per_row": counted,
        "seconds": seconds,
        "tokens_per_second": rates,
        "ratio_to_mlx_vlm": {name: rate / rates[MLX_VLM_NAME] for name, rate in rates.items()},
    }


def format_vision_table(result: Dict[str, Any]) -> str:
    lines = [
        f"| vision SFT step ({result['family']}, batch {result['batch']}, LoRA r{result['lora_rank']} on "
        f"{result['adapted_linears']} linears) | tokens/row | tokens/s (median) | vs mlx-vlm |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, rate in result["tokens_per_second"].items():
        lines.append(
            f"| {name} | {result['tokens_per_row'][name]} | {rate:,.0f} | {result['ratio_to_mlx_vlm'][name]:.2f}x |"
        )
    return "\n".join(lines)
