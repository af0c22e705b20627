"""A Whisper LoRA step, clips per second: ours (the notebook's `FastModel` + `Seq2SeqTrainer` with its speech
collator) against mlx-tune 0.6.0's `FastSTTModel` + `STTSFTTrainer`.

Both train the same Whisper folder (`build_mlx_whisper`: Whisper's 80 mel bins and 30 s window, so 1500 encoder
positions, with mlx-audio's random weights) with LoRA of the same rank and alpha on the query and value linears of
every attention, no dropout, on the same four clips and texts, batch size and constant learning rate. mlx-tune
computes each batch's log-mel frames inside its step loop and pads the decoder to its length buckets; ours reads
the frames the notebook's collator computed once. mlx-tune steps with Adam, ours with AdamW at weight decay 0 (the
same update) and clips the gradient's global norm at 1.0, its default. The clock runs from the end of the warm-up
steps to the end of the last step, read from each trainer's per-step hook (ours: a callback; mlx-tune: its progress
bar's update); runs alternate and the median of the repeats is reported.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List

from tools.bench_step_clock import StepClock

TEXTS = ("red kettle", "blue bees", "green river", "pale moon")
SAMPLE_RATE = 16000
LEARNING_RATE = 1e-4
OURS_NAME = "unsloth Seq2SeqTrainer (notebook's calls)"
TUNE_NAME = "mlx-tune STTSFTTrainer"
# mlx-audio's names for the linears transformers calls q_proj and v_proj.
MLX_TARGETS = ["query", "value"]


def stt_available() -> bool:
    """Whether mlx-tune's STT trainer and mlx-audio import here (`nox -s bench_mlx` installs both)."""
    try:
        import mlx_audio.stt  # noqa: F401
        import mlx_tune.stt  # noqa: F401
    except ImportError:
        return False
    return True


def settle_whisper_steps(options: Any) -> bool:
    """False, with the install command on stderr, when Whisper steps were asked for and mlx-tune is missing."""
    if options.whisper_steps > 0 and not stt_available():
        print(
            f"--whisper-steps {options.whisper_steps} needs mlx-tune and mlx-audio: "
            "pip install --no-deps mlx-tune==0.6.0 mlx-audio==0.6.2",
            file=sys.stderr,
        )
        return False
    return True


def clip(index: int) -> Any:
    import numpy as np

    times = np.arange(int((0.5 + 0.25 * index) * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * 180.0 * (index + 1) * times)).astype(np.float32)


class NotebookCollator:
    """The notebook's `DataCollatorSpeechSeq2SeqWithPadding`, in numpy (the bench has no torch)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def __call__(self, features: list) -> dict:
        import numpy as np

        batch = self.processor.feature_extractor.pad(
            [{"input_features": row["input_features"]} for row in features], return_tensors="np"
        )
        labels = self.processor.tokenizer.pad([{"input_ids": row["labels"]} for row in features], return_tensors="np")
        ids = np.where(labels["attention_mask"] == 1, labels["input_ids"], -100)
        if (ids[:, 0] == self.processor.tokenizer.bos_token_id).all():
            ids = ids[:, 1:]
        batch["labels"] = ids
        return batch


def time_ours(folder: Path, options: Any, output: Path) -> float:
    # What `import unsloth` does on a Mac: transformers' Seq2SeqTrainer (a placeholder without torch) given an MLX
    # model builds the MLX trainer.
    from unsloth.mlx.activation import install_shims

    install_shims()
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, WhisperForConditionalGeneration

    from unsloth.mlx import FastModel

    model, processor = FastModel.from_pretrained(
        str(folder),
        load_in_4bit=False,
        auto_model=WhisperForConditionalGeneration,
        whisper_language="English",
        whisper_task="transcribe",
    )
    model = FastModel.get_peft_model(
        model, r=options.rank, target_modules=["q_proj", "v_proj"], lora_alpha=2 * options.rank, task_type=None
    )
    rows = [
        {
            "input_features": processor.feature_extractor(clip(index), sampling_rate=SAMPLE_RATE).input_features[0],
            "labels": processor.tokenizer(text).input_ids,
        }
        for index, text in enumerate(TEXTS)
    ]
    clock = StepClock()
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(output),
        per_device_train_batch_size=options.whisper_batch,
        gradient_accumulation_steps=1,
        max_steps=options.warmup + options.whisper_steps,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="no",
        remove_unused_columns=False,
        report_to="none",
    )
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with _quiet_warnings():
            trainer = Seq2SeqTrainer(
                model=model,
                args=arguments,
                train_dataset=rows,
                data_collator=NotebookCollator(processor),
                tokenizer=processor.feature_extractor,
                callbacks=[clock],
            )
            trainer.train()
    return clock.seconds_after(options.warmup)


@contextlib.contextmanager
def _quiet_warnings() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _progress_stamps(clock: StepClock) -> Any:
    """mlx-tune's loop updates its tqdm bar once per optimizer step, after evaluating the step: stamp there."""
    import tqdm

    real = tqdm.tqdm.update

    def update(bar: Any, n: int = 1) -> Any:
        clock.tick()
        return real(bar, n)

    tqdm.tqdm.update = update  # type: ignore[method-assign]
    try:
        yield
    finally:
        tqdm.tqdm.update = real  # type: ignore[method-assign]


def time_mlx_tune(folder: Path, options: Any, output: Path) -> float:
    from mlx_tune import FastSTTModel, STTDataCollator, STTSFTConfig, STTSFTTrainer

    rows = [
        {"audio": {"array": clip(index), "sampling_rate": SAMPLE_RATE}, "text": text}
        for index, text in enumerate(TEXTS)
    ]
    clock = StepClock()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), _quiet_warnings():
        model, processor = FastSTTModel.from_pretrained(str(folder), dtype="float32")
        model = FastSTTModel.get_peft_model(
            model, r=options.rank, lora_alpha=2 * options.rank, target_modules=MLX_TARGETS
        )
        config = STTSFTConfig(
            per_device_train_batch_size=options.whisper_batch,
            gradient_accumulation_steps=1,
            max_steps=options.warmup + options.whisper_steps,
            learning_rate=LEARNING_RATE,
            warmup_steps=0,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            output_dir=str(output),
        )
        collator = STTDataCollator(model=model, processor=processor, language="en", task="transcribe")
        trainer = STTSFTTrainer(
            model=model, processor=processor, data_collator=collator, train_dataset=rows, args=config
        )
        with _progress_stamps(clock):
            trainer.train()
    return clock.seconds_after(options.warmup)


def measure_whisper(options: Any, workdir: Path) -> Dict[str, Any]:
    """Median clips/s of a Whisper LoRA step for both trainers, repeats interleaved."""
    from tools.kits.tiny_whisper import WhisperShape, build_mlx_whisper

    shape = WhisperShape(mel_bins=80, width=options.whisper_width, layers=options.whisper_layers, heads=2)
    folder = build_mlx_whisper(workdir / "whisper", shape, tokenizer_cache_dir=workdir / "tokenizers")
    runners = {
        TUNE_NAME: lambda out: time_mlx_tune(folder, options, out),
        OURS_NAME: lambda out: time_ours(folder, options, out),
    }
    seconds: Dict[str, List[float]] = {name: [] for name in runners}
    for repeat in range(options.repeats):
        for index, (name, run) in enumerate(runners.items()):
            seconds[name].append(run(workdir / f"whisper-{repeat}-{index}"))
    clips = options.whisper_batch * options.whisper_steps
    rates = {name: clips / statistics.median(values) for name, values in seconds.items()}
    return {
        "shape": shape._asdict(),
        "batch": options.whisper_batch,
        "steps": options.whisper_steps,
        "lora_rank": options.rank,
        "seconds": seconds,
        "clips_per_second": rates,
        "ratio_to_mlx_tune": {name: rate / rates[TUNE_NAME] for name, rate in rates.items()},
    }


def format_whisper_table(result: Dict[str, Any]) -> str:
    shape = result["shape"]
    lines = [
        f"| Whisper LoRA step ({shape['layers']}+{shape['layers']} layers, {shape['width']} wide, 1500 positions, "
        f"batch {result['batch']}, r{result['lora_rank']} on q/v) | clips/s (median) | s/step | vs mlx-tune |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, rate in result["clips_per_second"].items():
        step = result["batch"] / rate
        lines.append(f"| {name} | {rate:.3f} | {step:.2f} | {result['ratio_to_mlx_tune'][name]:.2f}x |")
    return "\n".join(lines)
