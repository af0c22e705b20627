"""A LoRA step at real model shapes: tokens/s, peak memory and share of measured matmul throughput, ours
(`FastLanguageModel` + `SFTTrainer`) against mlx-lm's own trainer, gradient checkpointing off and on for both.

Each shape is a real model's config (below) with random weights, optionally cut to fewer layers and narrowed by a
width divisor (hidden, MLP, vocabulary and head counts divided, head size kept) so a slow CPU finishes; the table
says what was run. The base is bfloat16, or 4-bit as `nn.quantize` makes it (group 64) on both sides. Rows are
`length` random ids, so both trainers train on `length - 1` positions a row. Runs alternate between the trainers
under the same load; each reports the median of its timed steps, after the warm-up steps, read from the trainer's
own per-step hook. Peak memory is `mx.get_peak_memory()` from just before `train()` to its end, weights included.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from tools.bench_step_clock import StepClock

QWEN2_5_0_5B = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
LLAMA_3_2_1B = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 16,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": True,
}
REAL_SHAPES = {"Qwen2.5-0.5B": QWEN2_5_0_5B, "Llama-3.2-1B": LLAMA_3_2_1B}
ATTENTION_KEYS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_KEYS = ("gate_proj", "up_proj", "down_proj")
LORA_KEYS = ATTENTION_KEYS + MLP_KEYS
# mlx_lm names LoRA targets by their path inside a block.
LORA_PATHS = tuple(f"self_attn.{key}" for key in ATTENTION_KEYS) + tuple(f"mlp.{key}" for key in MLP_KEYS)
OURS = "unsloth SFTTrainer"
MLX_LM = "mlx_lm train"
GROUP_SIZE = 64
LEARNING_RATE = 1e-4


def head_dim(config: Dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def reduced_config(config: Dict[str, Any], layers: int, width_divisor: int) -> Dict[str, Any]:
    """`config` with `layers` blocks (0 keeps all) and its widths divided, keeping each head's size."""
    heads = config["num_attention_heads"]
    if heads % width_divisor:
        raise ValueError(f"a width divisor of {width_divisor} does not divide this shape's {heads} attention heads")
    size = head_dim(config)
    reduced_heads = heads // width_divisor
    # The MLP width stays a multiple of the quantization group, so every linear is quantized as at full size.
    intermediate = -(-config["intermediate_size"] // width_divisor // GROUP_SIZE) * GROUP_SIZE
    return {
        **config,
        "num_hidden_layers": layers or config["num_hidden_layers"],
        "hidden_size": reduced_heads * size,
        "head_dim": size,
        "num_attention_heads": reduced_heads,
        "num_key_value_heads": max(1, config["num_key_value_heads"] // width_divisor),
        "intermediate_size": intermediate,
        "vocab_size": config["vocab_size"] // width_divisor,
    }


def describe_shape(name: str, config: Dict[str, Any], full: Dict[str, Any]) -> str:
    layers = f"{config['num_hidden_layers']} of {full['num_hidden_layers']} layers"
    if config["hidden_size"] == full["hidden_size"]:
        return f"{name}, {layers}"
    return (
        f"{name}, {layers}, widths / {full['hidden_size'] // config['hidden_size']} (hidden {config['hidden_size']}, "
        f"MLP {config['intermediate_size']}, vocab {config['vocab_size']:,}, heads {config['num_attention_heads']}/"
        f"{config['num_key_value_heads']} of {head_dim(config)})"
    )


def build_shape_folder(folder: Path, config: Dict[str, Any], seed: int, tokenizer_cache: Path) -> Path:
    """A bfloat16 random-weight model folder for `config`, with the test kit's small tokenizer (rows are ids)."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    from tools.kits.tiny_mlx_model import write_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    # The kit's tokenizer knows ids 0 (pad) and 1 (EOS); the model's larger vocabulary is reached by the rows.
    full = {**config, "eos_token_id": 1, "pad_token_id": 0, "bos_token_id": None, "torch_dtype": "bfloat16"}
    write_tokenizer(folder, 512, tokenizer_cache)
    (folder / "config.json").write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(full))
    model.set_dtype(mx.bfloat16)
    weights = dict(tree_flatten(model.parameters()))
    weights.pop("lm_head.weight", None)  # both shapes tie the output matrix to the embedding
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder


def step_flops(config: Dict[str, Any], batch: int, length: int, rank: int) -> float:
    """Useful matmul FLOPs of one LoRA step, recomputation not counted: the frozen base's forward and input
    gradients (no weight gradients), LoRA's forward and both gradients, and attention's two products with their
    gradients over the causal half of the context."""
    hidden, size = config["hidden_size"], head_dim(config)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    linears = [
        (hidden, heads * size),
        (hidden, kv_heads * size),
        (hidden, kv_heads * size),
        (heads * size, hidden),
        (hidden, config["intermediate_size"]),
        (hidden, config["intermediate_size"]),
        (config["intermediate_size"], hidden),
    ]
    positions = batch * (length - 1)
    per_layer = sum(2 * 2 * fan_in * fan_out + 3 * 2 * rank * (fan_in + fan_out) for fan_in, fan_out in linears)
    attention = 3 * 2 * 2 * heads * size * (length / 2)
    head = 2 * 2 * hidden * config["vocab_size"]
    return positions * (config["num_hidden_layers"] * (per_layer + attention) + head)


def peak_matmul_flops(products: List[tuple], repeats: int = 3) -> Dict[str, float]:
    """Best measured FLOP/s of `mx.matmul` for each (rows, inner, columns) product, in float32 and bfloat16."""
    import mlx.core as mx

    measured = {}
    for rows, inner, columns in products:
        for dtype in (mx.float32, mx.bfloat16):
            left = mx.random.normal((rows, inner)).astype(dtype)
            right = mx.random.normal((inner, columns)).astype(dtype)
            mx.eval(left, right, left @ right)
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                mx.eval(left @ right)
                best = min(best, time.perf_counter() - start)
            name = str(dtype).rsplit(".", 1)[-1]
            measured[f"{name} {rows}x{inner}x{columns}"] = 2 * rows * inner * columns / best
    return measured


def _measured(run: Any, clock: StepClock, warmup: int) -> Dict[str, Any]:
    """Run `run()` with the peak counter reset and the previous run's buffers released first."""
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
    mx.reset_peak_memory()
    start = mx.get_active_memory()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        run()
    return {"step_seconds": clock.step_seconds(warmup), "peak_bytes": mx.get_peak_memory(), "start_bytes": start}


def time_ours(
    folder: Path, rows: List[List[int]], bits: Optional[int], checkpointing: bool, options: Any, output: Path
) -> Dict[str, Any]:
    import mlx.core as mx

    from unsloth.mlx import FastLanguageModel, SFTConfig, UnslothTrainer

    # The keywords a CUDA notebook passes; "unsloth" is its checkpointing value, False turns it off.
    flag = "unsloth" if checkpointing else False
    length = len(rows[0])
    model, tokenizer = FastLanguageModel.from_pretrained(
        str(folder), max_seq_length=length, load_in_4bit=bits == 4, use_gradient_checkpointing=flag
    )
    mx.random.seed(options.seed)
    model = FastLanguageModel.get_peft_model(
        model,
        r=options.rank,
        lora_alpha=2 * options.rank,
        target_modules=list(LORA_KEYS),
        use_gradient_checkpointing=flag,
    )
    config = SFTConfig(
        per_device_train_batch_size=options.batch,
        gradient_accumulation_steps=1,
        max_steps=options.shape_warmup + options.shape_steps,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        max_seq_length=length,
        output_dir=str(output),
        gradient_checkpointing=checkpointing,
    )
    clock = StepClock()
    trainer = UnslothTrainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=[{"input_ids": row} for row in rows],
        args=config,
        callbacks=[clock],
    )
    return _measured(trainer.train, clock, options.shape_warmup)


def time_mlx_lm(
    folder: Path, rows: List[List[int]], bits: Optional[int], checkpointing: bool, options: Any, output: Path
) -> Dict[str, Any]:
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optimizers
    from mlx_lm.tuner.trainer import TrainingArgs, train
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import load

    model, _ = load(str(folder))
    if bits is not None:
        nn.quantize(model, group_size=GROUP_SIZE, bits=bits)
    model.freeze()
    mx.random.seed(options.seed)
    lora = {"rank": options.rank, "scale": 2.0, "dropout": 0.0, "keys": list(LORA_PATHS)}
    linear_to_lora_layers(model, len(model.layers), lora)
    output.mkdir(parents=True, exist_ok=True)
    args = TrainingArgs(
        batch_size=options.batch,
        iters=options.shape_warmup + options.shape_steps,
        steps_per_report=1,
        steps_per_eval=10**9,
        steps_per_save=10**9,
        max_seq_length=len(rows[0]),
        adapter_file=str(output / "adapters.safetensors"),
        grad_checkpoint=checkpointing,
    )
    optimizer = optimizers.AdamW(learning_rate=LEARNING_RATE, bias_correction=True)
    # State made before the step is compiled, as our trainer makes it, so mlx_lm traces its step once, not twice.
    optimizer.init(model.trainable_parameters())
    clock = StepClock()
    block = type(model.layers[0])
    plain_call = block.__call__
    model.train()
    try:
        # mlx_lm's checkpointing replaces the block class's __call__ for every model; it is put back after.
        return _measured(
            lambda: train(
                model,
                optimizer,
                [(row, 0) for row in rows],
                args=args,
                training_callback=clock,
            ),
            clock,
            options.shape_warmup,
        )
    finally:
        block.__call__ = plain_call


RUNNERS = {MLX_LM: time_mlx_lm, OURS: time_ours}


def measure_shapes(workdir: Path, options: Any) -> Dict[str, Any]:
    """Every shape x base x length x checkpointing cell, both trainers, alternating which goes first."""
    import os

    import numpy as np

    names = [name.strip() for name in options.shapes.split(",") if name.strip()]
    unknown = sorted(set(names) - set(REAL_SHAPES))
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(REAL_SHAPES)}")
    divisors = [int(divisor) for divisor in str(options.shape_width_divisor).split(",")]
    if len(divisors) == 1:
        divisors *= len(names)
    if len(divisors) != len(names):
        raise ValueError(f"--shape-width-divisor gives {len(divisors)} divisors for {len(names)} shapes")
    lengths = [int(length) for length in options.shape_lengths.split(",")]
    bases = [None if base == "16" else int(base) for base in options.shape_bits.split(",")]
    load_before = os.getloadavg()
    cells = []
    first = 0
    for name, divisor in zip(names, divisors):
        config = reduced_config(REAL_SHAPES[name], options.shape_layers, divisor)
        folder = build_shape_folder(workdir / name, config, options.seed, workdir / "tokenizers")
        for bits in bases:
            for length in lengths:
                rng = np.random.default_rng(options.seed)
                count = options.batch * (options.shape_warmup + options.shape_steps)
                rows = rng.integers(5, config["vocab_size"], size=(count, length)).tolist()
                flops = step_flops(config, options.batch, length, options.rank)
                for checkpointing in (False, True):
                    order = list(RUNNERS.items())[first:] + list(RUNNERS.items())[:first]
                    first = 1 - first
                    runs = {}
                    for trainer, runner in order:
                        out = workdir / f"run-{len(cells)}-{trainer.split()[0]}"
                        started = time.perf_counter()
                        runs[trainer] = runner(folder, rows, bits, checkpointing, options, out)
                        runs[trainer]["wall_seconds"] = time.perf_counter() - started
                    cells.append(
                        {
                            "shape": name,
                            "described": describe_shape(name, config, REAL_SHAPES[name]),
                            "bits": bits or 16,
                            "length": length,
                            "checkpointing": checkpointing,
                            "positions_per_step": options.batch * (length - 1),
                            "step_flops": flops,
                            "runs": runs,
                        }
                    )
    # The products that dominate a step: the MLP's and the output matrix's, at the last shape's widths.
    rows = options.shape_peak_rows
    peak = peak_matmul_flops(
        [
            (rows, config["hidden_size"], config["intermediate_size"]),
            (rows, config["hidden_size"], config["vocab_size"]),
        ]
    )
    return {
        "batch": options.batch,
        "lora_rank": options.rank,
        "warmup": options.shape_warmup,
        "steps": options.shape_steps,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "peak_matmul_flops": peak,
        "cells": cells,
    }


def _base(cell: Dict[str, Any]) -> str:
    return "bf16" if cell["bits"] == 16 else f"{cell['bits']}-bit"


def _rate(cell: Dict[str, Any], trainer: str) -> float:
    return cell["positions_per_step"] / statistics.median(cell["runs"][trainer]["step_seconds"])


def _note(cells: List[Dict[str, Any]], cell: Dict[str, Any]) -> str:
    """Our checkpointing row is flagged when it saves under a tenth of what training adds to the weights' memory in
    our own run without it."""
    if not cell["checkpointing"]:
        return ""
    twin = _cell(cells, cell["shape"], cell["bits"], cell["length"], False)
    if twin is None:
        return ""
    on, off = cell["runs"][OURS], twin["runs"][OURS]
    added_on, added_off = on["peak_bytes"] - on["start_bytes"], off["peak_bytes"] - off["start_bytes"]
    return " (saved under 10%)" if added_on >= 0.9 * added_off else ""


def format_shapes_table(result: Dict[str, Any]) -> str:
    peak = max(result["peak_matmul_flops"].values())
    before, after = result["load_average"]["before"][0], result["load_average"]["after"][0]
    lines = [
        f"LoRA r{result['lora_rank']} on all linears, batch {result['batch']}, median of {result['steps']} steps after "
        f"{result['warmup']}; load average {before:.1f} before, {after:.1f} after; mx.matmul measured at "
        + ", ".join(f"{product} {rate / 1e9:.2f}" for product, rate in result["peak_matmul_flops"].items())
        + f" GFLOP/s: the best, {peak / 1e9:.2f}, is the last column's 100%",
        "",
        "| shape | base | tokens | checkpointing | trainer | tokens/s | vs mlx_lm | peak memory (MB) | vs mlx_lm | of peak matmul |",
        "| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    cells = result["cells"]
    for cell in cells:
        base_rate = _rate(cell, MLX_LM)
        base_peak = cell["runs"][MLX_LM]["peak_bytes"]
        for trainer in (MLX_LM, OURS):
            rate = _rate(cell, trainer)
            memory = cell["runs"][trainer]["peak_bytes"]
            fraction = cell["step_flops"] * rate / cell["positions_per_step"] / peak
            switch = ("on" if cell["checkpointing"] else "off") + (_note(cells, cell) if trainer == OURS else "")
            lines.append(
                f"| {cell['described']} | {_base(cell)} | {cell['length']:,} | "
                f"{switch} | {trainer} | {rate:,.1f} | {rate / base_rate:.2f}x | {memory / 2**20:,.0f} | "
                f"{memory / base_peak:.2f}x | {fraction:.0%} |"
            )
    if len({cell["length"] for cell in cells}) > 1:
        lines += ["", format_growth_table(result)]
    return "\n".join([*lines, "", format_goals(result)])


def add_shape_arguments(parser: Any) -> None:
    parser.add_argument(
        "--shapes",
        default=",".join(REAL_SHAPES),
        help=f"real shapes for the LoRA step table, of {', '.join(REAL_SHAPES)} (none: skip)",
    )
    parser.add_argument("--shape-lengths", default="512,2048", help="tokens per row in the shape table")
    parser.add_argument("--shape-bits", default="16,4", help="bases in the shape table: 16 (bfloat16) and/or 4")
    parser.add_argument("--shape-layers", type=int, default=2, help="blocks kept of each shape (0: all)")
    parser.add_argument(
        "--shape-width-divisor", default="14,32", help="per shape: divides hidden, MLP, vocabulary and heads (1: real)"
    )
    parser.add_argument("--shape-warmup", type=int, default=1, help="untimed steps before the timed ones")
    parser.add_argument("--shape-steps", type=int, default=1, help="timed steps of each shape-table run")
    parser.add_argument("--shape-peak-rows", type=int, default=512, help="rows of the matmuls that measure the peak")


def _cell(cells: List[Dict[str, Any]], shape: str, bits: int, length: int, checkpointing: bool) -> Any:
    """The cell measured with these settings, or None."""
    wanted = (shape, bits, length, checkpointing)
    return next(
        (cell for cell in cells if (cell["shape"], cell["bits"], cell["length"], cell["checkpointing"]) == wanted), None
    )


def format_growth_table(result: Dict[str, Any]) -> str:
    """How peak memory and tokens/s change from the shortest rows to the longest, per trainer and checkpointing."""
    cells = result["cells"]
    short, long = min(cell["length"] for cell in cells), max(cell["length"] for cell in cells)
    lines = [
        f"| shape | base | checkpointing | trainer | peak MB at {short:,} | at {long:,} | added | tokens/s at {long:,} "
        f"/ at {short:,} |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    seen = []
    for cell in cells:
        key = (cell["shape"], cell["bits"], cell["checkpointing"])
        low, high = _cell(cells, *key[:2], short, key[2]), _cell(cells, *key[:2], long, key[2])
        if key in seen or low is None or high is None or short == long:
            continue
        seen.append(key)
        for trainer in (MLX_LM, OURS):
            before, after = low["runs"][trainer]["peak_bytes"] / 2**20, high["runs"][trainer]["peak_bytes"] / 2**20
            lines.append(
                f"| {cell['shape']} | {_base(cell)} | {'on' if key[2] else 'off'} | {trainer} | {before:,.0f} | "
                f"{after:,.0f} | {after - before:,.0f} | {_rate(high, trainer) / _rate(low, trainer):.2f}x |"
            )
    return "\n".join(lines)


def format_goals(result: Dict[str, Any]) -> str:
    """The three goals, each with the cells that meet it out of those measured."""
    cells = result["cells"]
    lines = []
    for switch in (False, True):
        same = [cell for cell in cells if cell["checkpointing"] == switch]
        faster = sum(_rate(cell, OURS) >= _rate(cell, MLX_LM) for cell in same)
        leaner = sum(cell["runs"][OURS]["peak_bytes"] <= cell["runs"][MLX_LM]["peak_bytes"] for cell in same)
        state = "on" if switch else "off"
        lines.append(f"- checkpointing {state}: tokens/s at least mlx_lm's in {faster} of {len(same)} cells")
        lines.append(f"- checkpointing {state}: peak memory at most mlx_lm's in {leaner} of {len(same)} cells")
    short, long = min(cell["length"] for cell in cells), max(cell["length"] for cell in cells)
    for trainer in (OURS, MLX_LM) if short < long else ():
        for cell in cells:
            pairs = {
                switch: [_cell(cells, cell["shape"], cell["bits"], n, switch) for n in (short, long)]
                for switch in (False, True)
            }
            if cell["length"] != short or cell["checkpointing"] or None in pairs[False] + pairs[True]:
                continue
            added = {
                switch: high["runs"][trainer]["peak_bytes"] - low["runs"][trainer]["peak_bytes"]
                for switch, (low, high) in pairs.items()
            }
            lines.append(
                f"- {trainer}, {cell['shape']} {_base(cell)}: {short:,} to {long:,} tokens adds "
                f"{added[True] / 2**20:,.0f} MB with checkpointing, {added[False] / 2**20:,.0f} MB without"
            )
    return "\n".join(lines)
