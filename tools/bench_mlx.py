"""Tokens per second: unsloth_zoo's MLXTrainer against mlx_lm's own LoRA trainer, same model, batch and length;
and generation, `model.generate` against `mlx_lm.stream_generate` (tools/bench_mlx_generate.py). The LoRA step
at real model shapes, with peak memory and checkpointing, is tools/bench_mlx_shapes.py (`--shapes`).

Both train a fresh copy of the same tiny random-weight llama on the same fixed-length token rows, with the
same LoRA layers, batch size and optimizer, reporting after every step. The clock runs from the end of the
warm-up steps (tracing and first-call costs excluded for both) to the end of the last step, read from each
trainer's own per-step hook. Runs alternate between the trainers; the median of the repeats is reported.
Throughput counts the positions the model is trained on, batch x (length - 1), per second.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tools.bench_mlx_depth import add_depth_arguments  # noqa: E402  (after the path that finds `tools`)
from tools.bench_mlx_embeddings import add_embedding_arguments  # noqa: E402
from tools.bench_mlx_inputs import fresh_lora_model, token_rows  # noqa: E402
from tools.bench_mlx_shapes import add_shape_arguments  # noqa: E402
from tools.bench_step_clock import StepClock  # noqa: E402


def time_ours(folder: Path, rows: list, options: argparse.Namespace, compile_steps: bool, output: Path) -> float:
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig

    model, tokenizer = fresh_lora_model(folder, options.rank, options.seed)
    config = MLXTrainingConfig(
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=1,
        max_steps=options.warmup + options.steps,
        warmup_steps=0,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        output_dir=str(output),
        max_seq_length=options.seq_len,
        dataset_order="sequential",
        mx_compile=compile_steps,
        grad_clip_mode=options.clip,
    )
    clock = StepClock()
    trainer = MLXTrainer(model, tokenizer, [{"input_ids": row} for row in rows], args=config, callbacks=[clock])
    trainer.train()
    return clock.seconds_after(options.warmup)


def time_mlx_lm(folder: Path, rows: list, options: argparse.Namespace, output: Path) -> float:
    import mlx.optimizers as optimizers
    from mlx_lm.tuner.trainer import TrainingArgs, train

    model, _ = fresh_lora_model(folder, options.rank, options.seed)
    args = TrainingArgs(
        batch_size=options.batch,
        iters=options.warmup + options.steps,
        steps_per_report=1,
        steps_per_eval=10**9,
        steps_per_save=10**9,
        max_seq_length=options.seq_len,
        adapter_file=str(output / "adapters.safetensors"),
    )
    output.mkdir(parents=True, exist_ok=True)
    clock = StepClock()
    # mlx_lm's batcher takes (tokens, prompt offset) pairs.
    dataset = [(row, 0) for row in rows]
    model.train()
    with contextlib.redirect_stdout(io.StringIO()):
        train(
            model,
            optimizers.AdamW(learning_rate=1e-4, bias_correction=True),
            dataset,
            args=args,
            training_callback=clock,
        )
    return clock.seconds_after(options.warmup)


def measure(options: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-mlx-") as scratch:
        return measure_in(Path(scratch), options)


def measure_in(workdir: Path, options: argparse.Namespace) -> dict:
    from tools.kits.tiny_mlx_model import TinyLlamaShape, build_tiny_mlx_model

    shape = TinyLlamaShape(
        vocab_size=options.vocab,
        hidden_size=options.hidden,
        num_hidden_layers=options.layers,
        intermediate_size=2 * options.hidden,
        max_position_embeddings=max(512, options.seq_len),
    )
    folder = build_tiny_mlx_model(workdir / "model", shape, tokenizer_cache_dir=workdir / "tokenizers")
    distributed = None
    if getattr(options, "distributed_ranks", "") and options.steps > 0:
        from tools.bench_mlx_distributed import measure_distributed

        counts = [int(count) for count in options.distributed_ranks.split(",")]
        (workdir / "distributed").mkdir()
        distributed = measure_distributed(folder, counts, options, workdir / "distributed")
    rows = token_rows(options.batch * (options.steps + options.warmup), options.seq_len, options.vocab, options.seed)
    generation = None
    if options.generate_tokens > 0:
        from tools.bench_mlx_generate import measure_generation

        prompt = token_rows(1, options.prompt_len, options.vocab, options.seed + 1)[0]
        generation = measure_generation(folder, prompt, options.generate_tokens, options.repeats)
    packing = None
    if getattr(options, "packing_rows", 0) > 0:
        from tools.bench_mlx_packing import measure_packing

        (workdir / "packing").mkdir()
        packing = measure_packing(folder, options, workdir / "packing")
    grpo = None
    if getattr(options, "grpo_prompts", 0) > 0:
        from tools.bench_mlx_grpo import measure_grpo_sampling

        prompts = token_rows(options.grpo_prompts, options.prompt_len, options.vocab, options.seed + 2)
        completions = [prompt for prompt in prompts for _ in range(options.grpo_generations)]
        grpo = measure_grpo_sampling(folder, completions, options.grpo_tokens, options.repeats)
    dpo = None
    if getattr(options, "dpo_steps", 0) > 0:
        from tools.bench_mlx_dpo import measure_dpo

        (workdir / "dpo").mkdir()
        dpo = measure_dpo(folder, options, workdir / "dpo")
    vision = None
    if getattr(options, "vision_steps", 0) > 0:
        from tools.bench_mlx_vision import measure_vision

        (workdir / "vision").mkdir()
        vision = measure_vision(options, workdir / "vision")
    embeddings = None
    if getattr(options, "embedding_steps", 0) > 0:
        from tools.bench_mlx_embeddings import measure_embeddings

        (workdir / "embeddings").mkdir()
        embeddings = measure_embeddings(workdir / "embeddings", options)
    whisper = None
    if getattr(options, "whisper_steps", 0) > 0:
        from tools.bench_mlx_whisper import measure_whisper

        (workdir / "whisper").mkdir()
        whisper = measure_whisper(options, workdir / "whisper")
    shapes = None
    if options.shapes:
        from tools.bench_mlx_shapes import measure_shapes

        (workdir / "shapes").mkdir()
        shapes = measure_shapes(workdir / "shapes", options)
    if options.steps <= 0:
        return {
            "generation": generation,
            "packing": packing,
            "grpo": grpo,
            "dpo": dpo,
            "vision": vision,
            "embeddings": embeddings,
            "whisper": whisper,
            "shapes": shapes,
        }
    positions = options.batch * (options.seq_len - 1) * options.steps
    runners = {"mlx_lm": lambda out: time_mlx_lm(folder, rows, options, out)}
    for compile_steps in options.compile:
        name = f"unsloth_zoo (mx.compile {'on' if compile_steps else 'off'})"
        runners[name] = lambda out, flag=compile_steps: time_ours(folder, rows, options, flag, out)
    seconds: dict = {name: [] for name in runners}
    for repeat in range(options.repeats):
        for index, (name, run) in enumerate(runners.items()):
            seconds[name].append(run(workdir / f"run-{repeat}-{index}"))
    rates = {name: positions / statistics.median(values) for name, values in seconds.items()}
    return {
        "shape": {**shape.__dict__},
        "batch": options.batch,
        "seq_len": options.seq_len,
        "steps": options.steps,
        "lora_rank": options.rank,
        "clip": options.clip,
        "repeats": options.repeats,
        "seconds": seconds,
        "tokens_per_second": rates,
        "ratio_to_mlx_lm": {name: rate / rates["mlx_lm"] for name, rate in rates.items()},
        "generation": generation,
        "distributed": distributed,
        "packing": packing,
        "grpo": grpo,
        "dpo": dpo,
        "vision": vision,
        "embeddings": embeddings,
        "whisper": whisper,
        "shapes": shapes,
    }


def format_table(result: dict) -> str:
    lines = []
    if "tokens_per_second" in result:
        lines = ["| trainer | tokens/s (median) | vs mlx_lm |", "| --- | ---: | ---: |"]
        for name, rate in result["tokens_per_second"].items():
            lines.append(f"| {name} | {rate:,.0f} | {result['ratio_to_mlx_lm'][name]:.2f}x |")
    if result.get("generation"):
        from tools.bench_mlx_generate import format_generation_table

        lines += (
            ["", format_generation_table(result["generation"])]
            if lines
            else [format_generation_table(result["generation"])]
        )
    if result.get("distributed"):
        from tools.bench_mlx_distributed import format_distributed_table

        lines += ["", format_distributed_table(result["distributed"])]
    if result.get("packing"):
        from tools.bench_mlx_packing import format_packing_table

        lines += ["", format_packing_table(result["packing"])] if lines else [format_packing_table(result["packing"])]
    if result.get("grpo"):
        from tools.bench_mlx_grpo import format_grpo_table

        lines += ["", format_grpo_table(result["grpo"])] if lines else [format_grpo_table(result["grpo"])]
    if result.get("dpo"):
        from tools.bench_mlx_dpo import format_dpo_table

        lines += ["", format_dpo_table(result["dpo"])] if lines else [format_dpo_table(result["dpo"])]
    if result.get("vision"):
        from tools.bench_mlx_vision import format_vision_table

        lines += ["", format_vision_table(result["vision"])] if lines else [format_vision_table(result["vision"])]
    if result.get("embeddings"):
        from tools.bench_mlx_embeddings import format_embeddings_table

        table = format_embeddings_table(result["embeddings"])
        lines += ["", table] if lines else [table]
    if result.get("whisper"):
        from tools.bench_mlx_whisper import format_whisper_table

        lines += ["", format_whisper_table(result["whisper"])] if lines else [format_whisper_table(result["whisper"])]
    if result.get("shapes"):
        from tools.bench_mlx_shapes import format_shapes_table

        lines += ["", format_shapes_table(result["shapes"])] if lines else [format_shapes_table(result["shapes"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=129, help="tokens per row; both trainers see length-1 positions")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank (0 trains all weights)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clip", default="global_norm", help="our grad_clip_mode (mlx_lm's trainer does not clip)")
    parser.add_argument("--compile", choices=("off", "on", "both"), default="both")
    parser.add_argument("--steps-only", action="store_true", help="skip generation, GRPO, DPO and shapes")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens for the generation comparison")
    parser.add_argument("--generate-tokens", type=int, default=256, help="new tokens per generation run (0: skip)")
    parser.add_argument("--json", type=Path, help="also write the full result here")
    parser.add_argument(
        "--distributed-ranks", default="", help="also time data-parallel steps at these rank counts, e.g. 1,2"
    )
    parser.add_argument("--distributed-timeout", type=float, default=600.0, help="seconds allowed per rank count")
    parser.add_argument(
        "--packing-rows", type=int, default=64, help="varied-length rows for the packing on/off row (0: skip)"
    )
    parser.add_argument("--grpo-prompts", type=int, default=8, help="prompts for the GRPO sampling row (0: skip)")
    parser.add_argument("--grpo-generations", type=int, default=4, help="completions per prompt in the GRPO row")
    parser.add_argument("--grpo-tokens", type=int, default=128, help="new tokens per completion in the GRPO row")
    parser.add_argument(
        "--dpo-steps", type=int, help="timed DPO steps against mlx-lm-lora (0: skip; default 10 if it is installed)"
    )
    parser.add_argument("--dpo-prompt-len", type=int, default=32, help="prompt tokens of each DPO row")
    parser.add_argument("--dpo-answer-len", type=int, default=32, help="chosen and rejected tokens of each DPO row")
    parser.add_argument(
        "--vision-steps", type=int, default=0, help="timed vision SFT steps against mlx-vlm's trainer (0: skip)"
    )
    add_embedding_arguments(parser)
    parser.add_argument(
        "--whisper-steps", type=int, default=0, help="timed Whisper LoRA steps against mlx-tune's STT trainer (0: skip)"
    )
    parser.add_argument("--whisper-batch", type=int, default=2, help="clips per Whisper step")
    parser.add_argument("--whisper-width", type=int, default=64, help="the benchmark Whisper's d_model")
    parser.add_argument("--whisper-layers", type=int, default=1, help="encoder and decoder layers of that Whisper")
    add_shape_arguments(parser)
    add_depth_arguments(parser)
    options = parser.parse_args(argv)
    if options.shapes == "none":
        options.shapes = ""
    options.compile = {"off": [False], "on": [True], "both": [False, True]}[options.compile]
    if options.steps_only:
        options.generate_tokens = 0
        options.grpo_prompts = 0
        options.dpo_steps = 0
        options.vision_steps = 0
        options.embedding_steps = 0
        options.whisper_steps = 0
        options.shapes = ""
        options.depth_shapes = ""
    from tools.bench_mlx_dpo import lora_available

    if options.dpo_steps is None:
        options.dpo_steps = 10 if lora_available() else 0
        if not lora_available():
            print(
                "mlx-lm-lora is not installed: the DPO row is skipped (`nox -s bench_mlx` installs it)", file=sys.stderr
            )
    elif options.dpo_steps > 0 and not lora_available():
        print(f"--dpo-steps {options.dpo_steps} needs mlx-lm-lora: pip install mlx-lm-lora", file=sys.stderr)
        return 2
    from tools.bench_mlx_embeddings import embeddings_available

    missing = embeddings_available()
    if options.embedding_steps is None:
        options.embedding_steps = 0 if missing else 10
        if missing:
            print(f"{missing}: the embedding row is skipped (`nox -s bench_mlx` installs it)", file=sys.stderr)
    elif options.embedding_steps > 0 and missing:
        print(f"--embedding-steps {options.embedding_steps} needs {missing.split(' is ')[0]}", file=sys.stderr)
        return 2
    from tools.bench_mlx_vision import settle_vision_steps

    if not settle_vision_steps(options):
        return 2
    from tools.bench_mlx_whisper import settle_whisper_steps

    if not settle_whisper_steps(options):
        return 2
    result = measure(options)
    print(format_table(result))
    if options.depth_shapes:
        from tools.bench_mlx_depth import format_depth_table, measure_depth

        with tempfile.TemporaryDirectory() as scratch:
            result["depth"] = measure_depth(Path(scratch), options)
        print("\n" + format_depth_table(result["depth"]))
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
