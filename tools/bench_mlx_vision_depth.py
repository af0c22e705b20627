"""Peak memory of vision SFT at depth: ours (`FastVisionModel`, `use_gradient_checkpointing=True`, `SFTTrainer`)
against mlx-vlm's own `Trainer` with `grad_checkpoint=True`, checkpointing off and on, each run in a process of its
own.

Both train a tiny Qwen 2.5 VL (`tools/kits/tiny_vlm_model.py`) whose language model keeps many blocks, with LoRA of
the same rank on the same language-model linears, on the same rows: a coloured square, a question and a long answer,
so the blocks' activations are most of the peak. Each figure is `mx.get_peak_memory()` over `train()`, weights
included, in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from tools.bench_mlx_vision import adapted_linears, mlx_vlm_rows, mlx_vlm_trainer, our_rows, our_trainer
from tools.bench_step_clock import StepClock

ROOT = Path(__file__).resolve().parents[1]
OURS, MLX_VLM = "ours", "mlx_vlm"
# A run's figures come back on its last stdout line, after this marker.
_MARKER = "vision-depth "
# Words of the answer: long enough that each block's attention scores outweigh the weights.
ANSWER_WORDS = "the square is one flat colour with no pattern on it at all".split()


def long_answer(words: int) -> str:
    return " ".join(ANSWER_WORDS[i % len(ANSWER_WORDS)] for i in range(words))


def _options(seed: int) -> argparse.Namespace:
    return argparse.Namespace(seed=seed, rank=8, batch=1)


def run_peak(trainer: str, folder: Path, words: int, checkpointing: bool, steps: int, linears: List[str]) -> Dict:
    """Peak and starting memory of `steps` LoRA r8 steps of `trainer` here, rows of a `words`-word answer."""
    import contextlib
    import io

    import mlx.core as mx

    options, answer, clock = _options(0), long_answer(words), StepClock()
    with tempfile.TemporaryDirectory() as output:
        if trainer == OURS:
            built, _ = our_trainer(
                folder, our_rows(steps, answer), options, steps, Path(output), [clock], 4096, checkpointing
            )
        else:
            rows = mlx_vlm_rows(steps, answer)
            built = mlx_vlm_trainer(folder, linears, rows, options, steps, Path(output), clock, 4096, checkpointing)
        gc.collect()
        mx.clear_cache()
        mx.reset_peak_memory()
        start = mx.get_active_memory()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            built.train()
    return {"peak_bytes": mx.get_peak_memory(), "start_bytes": start, "steps_seen": len(clock.stamps)}


def _worker(arguments: List[str], timeout: float) -> Any:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tools.bench_mlx_vision_depth", "--worker", *arguments]
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=timeout
    )
    found = [line for line in done.stdout.splitlines() if line.startswith(_MARKER)]
    if done.returncode or not found:
        raise RuntimeError(
            f"{arguments[0]} run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return json.loads(found[-1][len(_MARKER) :])


def linears_in_subprocess(folder: Path, timeout: float = 900) -> List[str]:
    """The linears our LoRA adapts, read in a process of its own so no run's peak holds our model."""
    return _worker(["linears", str(folder), "0", "off", "1", "[]"], timeout)


def peak_in_subprocess(
    trainer: str,
    folder: Path,
    words: int,
    checkpointing: bool,
    linears: List[str],
    steps: int = 2,
    timeout: float = 1800,
) -> Dict[str, Any]:
    """`run_peak` in a fresh interpreter, so its peak is its own."""
    switch = "on" if checkpointing else "off"
    return _worker([trainer, str(folder), str(words), switch, str(steps), json.dumps(linears)], timeout)


def build_deep_vlm(folder: Path, layers: int) -> Path:
    from tools.kits.tiny_vlm_model import build_tiny_qwen25_vl

    return build_tiny_qwen25_vl(folder, layers=layers)


def measure(workdir: Path, layers: int, words: int, steps: int) -> List[Dict[str, Any]]:
    folder = build_deep_vlm(workdir / f"qwen2_5_vl-{layers}", layers)
    linears = linears_in_subprocess(folder)
    cells = []
    for checkpointing in (False, True):
        runs = {
            name: peak_in_subprocess(name, folder, words, checkpointing, linears, steps) for name in (MLX_VLM, OURS)
        }
        cells.append({"layers": layers, "words": words, "checkpointing": checkpointing, "runs": runs})
    return cells


def format_table(cells: List[Dict[str, Any]]) -> str:
    lines = [
        "| language blocks | answer words | checkpointing | mlx-vlm peak (MiB) | ours (MiB) | ours / mlx-vlm |",
        "| ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for cell in cells:
        theirs, ours = (cell["runs"][name]["peak_bytes"] / 2**20 for name in (MLX_VLM, OURS))
        switch = "on" if cell["checkpointing"] else "off"
        lines.append(
            f"| {cell['layers']} | {cell['words']} | {switch} | {theirs:,.1f} | {ours:,.1f} | {ours / theirs:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--worker", nargs=6, metavar=("TRAINER", "FOLDER", "WORDS", "CHECKPOINTING", "STEPS", "LINEARS")
    )
    parser.add_argument("--layers", type=int, default=12, help="language blocks of the tiny Qwen 2.5 VL")
    parser.add_argument("--words", type=int, default=600, help="words of each row's answer")
    parser.add_argument("--steps", type=int, default=2)
    options = parser.parse_args(argv)
    if options.worker:
        trainer, folder, words, switch, steps, linears = options.worker
        if trainer == "linears":
            with tempfile.TemporaryDirectory() as output:
                built, _ = our_trainer(Path(folder), our_rows(1), _options(0), 1, Path(output), [])
                measured: Any = adapted_linears(built.model)
        else:
            measured = run_peak(trainer, Path(folder), int(words), switch == "on", int(steps), json.loads(linears))
        print(_MARKER + json.dumps(measured), flush=True)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        print(format_table(measure(Path(scratch), options.layers, options.words, options.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
