"""Peak memory at real depth: a real shape's layer count kept, its widths cut, gradient checkpointing off and on,
ours (`FastLanguageModel` + `SFTTrainer`) against mlx-lm's own trainer, each run in a process of its own.

With 2 layers (the shape table's default) the blocks' activations are a small part of the peak; at a real depth
they are most of it, which is where checkpointing shows. Each run's figure is `mx.get_peak_memory()` over
`train()`, weights included, in a fresh interpreter, so no run inherits another's buffers or peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from tools.bench_mlx_shapes import MLX_LM, OURS, REAL_SHAPES, RUNNERS, build_shape_folder, reduced_config

ROOT = Path(__file__).resolve().parents[1]
# A run's figures come back on its last stdout line, after this marker.
_MARKER = "depth-peak "


def small_llama(layers: int, hidden: int) -> Dict[str, Any]:
    """A llama of `layers` blocks, `hidden` wide (MLP 3x, 4 heads, vocabulary 512): the tests' shape."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": 3 * hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": layers,
        "vocab_size": 512,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
    }


def run_peak(trainer: str, folder: Path, length: int, checkpointing: bool, steps: int, seed: int = 0) -> Dict[str, Any]:
    """Peak and starting memory of `steps` LoRA r8 steps of `trainer` on rows of `length` random ids, here."""
    import numpy as np

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    rows = np.random.default_rng(seed).integers(5, config["vocab_size"], size=(steps, length)).tolist()
    options = argparse.Namespace(seed=seed, rank=8, batch=1, shape_warmup=0, shape_steps=steps)
    with tempfile.TemporaryDirectory() as output:
        measured = RUNNERS[trainer](folder, rows, None, checkpointing, options, Path(output))
    return {"peak_bytes": measured["peak_bytes"], "start_bytes": measured["start_bytes"]}


def peak_in_subprocess(
    trainer: str, folder: Path, length: int, checkpointing: bool, steps: int = 2, timeout: float = 1800
) -> Dict[str, Any]:
    """`run_peak` in a fresh interpreter, so its peak is its own."""
    command = [sys.executable, "-m", "tools.bench_mlx_depth", "--worker", trainer, str(folder), str(length)]
    command += ["on" if checkpointing else "off", str(steps)]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=timeout
    )
    found = [line for line in done.stdout.splitlines() if line.startswith(_MARKER)]
    if done.returncode or not found:
        raise RuntimeError(f"{trainer} run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(found[-1][len(_MARKER) :])


def measure_depth(workdir: Path, options: Any) -> Dict[str, Any]:
    """Every shape x depth x length x checkpointing cell, both trainers."""
    names = [name.strip() for name in options.depth_shapes.split(",") if name.strip()]
    unknown = sorted(set(names) - set(REAL_SHAPES))
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(REAL_SHAPES)}")
    divisors = [int(divisor) for divisor in str(options.depth_width_divisor).split(",")]
    divisors = divisors * len(names) if len(divisors) == 1 else divisors
    depths = [int(layers) for layers in options.depth_layers.split(",") if layers.strip()] or [0]
    lengths = [int(length) for length in options.depth_lengths.split(",")]
    load_before, cells = os.getloadavg(), []
    for name, divisor in zip(names, divisors):
        for layers in depths:
            config = reduced_config(REAL_SHAPES[name], layers, divisor)
            folder = build_shape_folder(workdir / f"{name}-{layers}", config, options.seed, workdir / "tokenizers")
            for length in lengths:
                for checkpointing in (False, True):
                    runs = {}
                    for trainer in (MLX_LM, OURS):
                        started = time.perf_counter()
                        runs[trainer] = peak_in_subprocess(trainer, folder, length, checkpointing, options.depth_steps)
                        runs[trainer]["wall_seconds"] = time.perf_counter() - started
                    cells.append(
                        {
                            "shape": name,
                            "layers": config["num_hidden_layers"],
                            "hidden": config["hidden_size"],
                            "mlp": config["intermediate_size"],
                            "vocab": config["vocab_size"],
                            "length": length,
                            "checkpointing": checkpointing,
                            "runs": runs,
                        }
                    )
    return {
        "steps": options.depth_steps,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "cells": cells,
    }


def format_depth_table(result: Dict[str, Any]) -> str:
    before, after = result["load_average"]["before"][0], result["load_average"]["after"][0]
    lines = [
        f"LoRA r8 on all linears, batch 1, {result['steps']} steps, bfloat16 base, each run in its own process; "
        f"load average {before:.1f} before, {after:.1f} after",
        "",
        "| shape | layers | widths (hidden / MLP / vocab) | tokens | checkpointing | mlx_lm peak (MiB) | ours (MiB) "
        "| ours / mlx_lm |",
        "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for cell in result["cells"]:
        theirs, ours = (cell["runs"][trainer]["peak_bytes"] / 2**20 for trainer in (MLX_LM, OURS))
        lines.append(
            f"| {cell['shape']} | {cell['layers']} | {cell['hidden']} / {cell['mlp']} / {cell['vocab']:,} | "
            f"{cell['length']:,} | {'on' if cell['checkpointing'] else 'off'} | {theirs:,.0f} | {ours:,.0f} | "
            f"{ours / theirs:.2f}x |"
        )
    return "\n".join(lines)


def add_depth_arguments(parser: Any) -> None:
    parser.add_argument(
        "--depth-shapes", default="", help=f"real shapes for the depth table, of {', '.join(REAL_SHAPES)}"
    )
    parser.add_argument("--depth-layers", default="", help="blocks of each depth-table shape (empty: its real count)")
    parser.add_argument("--depth-width-divisor", default="14,32", help="per shape: divides hidden, MLP, vocab, heads")
    parser.add_argument("--depth-lengths", default="512,2048", help="tokens per row in the depth table")
    parser.add_argument("--depth-steps", type=int, default=2, help="steps of each depth-table run")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=5, metavar=("TRAINER", "FOLDER", "LENGTH", "CHECKPOINTING", "STEPS"))
    parser.add_argument("--workdir", type=Path, help="where model folders go (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    add_depth_arguments(parser)
    options = parser.parse_args(argv)
    if options.worker:
        trainer, folder, length, switch, steps = options.worker
        measured = run_peak(trainer, Path(folder), int(length), switch == "on", int(steps), options.seed)
        print(_MARKER + json.dumps(measured), flush=True)
        return 0
    if not options.depth_shapes:
        parser.error("--depth-shapes names no shape")
    with tempfile.TemporaryDirectory() as scratch:
        result = measure_depth(options.workdir or Path(scratch), options)
    print(format_depth_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
