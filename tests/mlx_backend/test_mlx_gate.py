"""The backend gate's rules, and the whole MLX path importing and training with `torch` blocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from unsloth_zoo.mlx.gate import decide_backend

REPO_ROOT = Path(__file__).resolve().parents[2]


def never_called() -> bool:
    raise AssertionError("mlx must not be probed when the platform or environment already rules it out")


@pytest.mark.parametrize(
    ("environ", "system", "machine", "importable", "expected"),
    [
        ({}, "darwin", "arm64", lambda: True, True),
        ({}, "darwin", "arm64", lambda: False, False),
        ({}, "linux", "x86_64", never_called, False),
        ({}, "darwin", "x86_64", never_called, False),
        ({"UNSLOTH_MLX": "1"}, "linux", "x86_64", lambda: True, True),
        ({"UNSLOTH_MLX": "1"}, "linux", "x86_64", lambda: False, False),
        ({"UNSLOTH_MLX": "0"}, "darwin", "arm64", never_called, False),
        ({"UNSLOTH_FORCE_GPU_PATH": "1"}, "darwin", "arm64", never_called, False),
        ({"UNSLOTH_FORCE_GPU_PATH": "1", "UNSLOTH_MLX": "1"}, "linux", "x86_64", never_called, False),
        ({"UNSLOTH_FORCE_GPU_PATH": "0"}, "darwin", "arm64", lambda: True, True),
    ],
    ids=[
        "apple-silicon",
        "apple-silicon-without-mlx",
        "linux",
        "intel-mac",
        "linux-opt-in",
        "opt-in-without-mlx",
        "opt-out-on-apple",
        "force-gpu-on-apple",
        "force-gpu-beats-opt-in",
        "force-gpu-off",
    ],
)
def test_gate_rules(environ, system, machine, importable, expected):
    decision = decide_backend(environ, system, machine, importable)
    assert decision.use_mlx is expected
    assert bool(decision) is expected
    assert decision.reason


def test_gate_reason_names_the_forcing_variable():
    assert (
        "UNSLOTH_FORCE_GPU_PATH"
        in decide_backend({"UNSLOTH_FORCE_GPU_PATH": "1"}, "darwin", "arm64", never_called).reason
    )


def test_gate_on_this_host_follows_the_opt_in(monkeypatch):
    from unsloth_zoo.mlx import use_mlx_backend

    monkeypatch.delenv("UNSLOTH_FORCE_GPU_PATH", raising=False)
    monkeypatch.setenv("UNSLOTH_MLX", "1")
    assert use_mlx_backend() is True  # mlx[cpu] is installed in this session
    monkeypatch.setenv("UNSLOTH_FORCE_GPU_PATH", "1")
    assert use_mlx_backend() is False


BLOCKED_TORCH_SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys

    attempts, probes = [], []

    class BlockTorch(importlib.abc.MetaPathFinder):
        # Any `import torch` fails and is recorded; availability probes (importlib.util.find_spec) hear it is absent.

        def find_spec(self, name, path=None, target=None):
            if name != "torch" and not name.startswith("torch."):
                return None
            # The machinery's `_find_spec` is called either by an import or by importlib.util.find_spec (a probe).
            caller = sys._getframe(1)
            while caller.f_code.co_name == "_find_spec":
                caller = caller.f_back
            if caller.f_code.co_name == "find_spec":
                probes.append(name)
                return None
            attempts.append(name)
            raise ModuleNotFoundError(f"torch is blocked in this test: {name}", name=name)

    sys.meta_path.insert(0, BlockTorch())
    sys.path.insert(0, sys.argv[1])
    try:
        import torch.nn
    except ModuleNotFoundError:
        pass
    assert attempts == ["torch"], attempts  # the blocker itself works
    attempts.clear()

    from unsloth_zoo.mlx.gate import use_mlx_backend
    assert use_mlx_backend(), "UNSLOTH_MLX=1 with mlx installed must choose the MLX backend"
    import unsloth_zoo.mlx
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig, apply_lora, load_model
    from unsloth_zoo.mlx import callbacks, checkpoint, config, data, loading, lora, optim, trainer
    from transformers.trainer_callback import EarlyStoppingCallback, PrinterCallback, ProgressCallback, TrainerCallback

    from tools.kits.tiny_mlx_model import build_tiny_mlx_model
    folder = build_tiny_mlx_model(sys.argv[2] + "/model", tokenizer_cache_dir=sys.argv[2] + "/tokenizers")
    model, tokenizer = load_model(folder)
    apply_lora(model, rank=4)
    args = MLXTrainingConfig(max_steps=2, gradient_accumulation_steps=1, warmup_steps=0, output_dir=sys.argv[2] + "/out")
    output = MLXTrainer(model, tokenizer, [{"text": "blocked torch still trains"}] * 4, args=args, callbacks=[TrainerCallback()]).train()
    assert output.global_step == 2
    assert "torch" not in sys.modules, "torch got imported"
    assert attempts == [], f"something tried to import {attempts}"
    print("OK", len(probes))
    """
)


def test_mlx_path_imports_and_trains_with_torch_blocked(tmp_path):
    environment = {**os.environ, "UNSLOTH_MLX": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    environment.pop("UNSLOTH_FORCE_GPU_PATH", None)
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_TORCH_SCRIPT, str(REPO_ROOT), str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("OK")


def test_importing_the_package_loads_neither_mlx_nor_torch():
    script = "import sys, unsloth_zoo.mlx; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'torch', 'transformers')))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
