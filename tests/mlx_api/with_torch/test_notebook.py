"""The notebook-style script end to end: a Hub id in 4 bits (offline, from a cache built here), llama-3.1 chat
template, standardize_sharegpt, TRL's SFTConfig / SFTTrainer with gradient accumulation, train_on_responses_only,
`.to("cuda")`, torch.cuda and get_gpu_memory_stats(), and a GGUF export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import NEUTRAL_CWD, REPO_ROOT
from ..test_hub_and_quantized import build_hub_cache

SCRIPT = REPO_ROOT / "examples" / "mlx_notebook.py"


def _run_notebook(model_dir: Path, output_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    hf_home = output_dir.parent / f"hf-home-{output_dir.name}"
    build_hub_cache(hf_home, "tiny-org/tiny-llama", model_dir)
    environment = {**os.environ, "UNSLOTH_MLX": "1", "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        str(SCRIPT),
        "--model-name",
        "tiny-org/tiny-llama",
        "--output-dir",
        str(output_dir),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, cwd=NEUTRAL_CWD)


def test_notebook_trains_the_tiny_model_end_to_end(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = _run_notebook(tiny_model_dir, tmp_path / "run")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["global_step"] == 30
    assert summary["last_loss"] < summary["first_loss"] - 1.0
    assert summary["total_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < summary["free_bytes"] <= summary["total_bytes"]
    assert (tmp_path / "run" / "lora_model" / "adapters.safetensors").is_file()
    assert Path(summary["gguf"]).is_file() and summary["gguf"].endswith("unsloth.F16.gguf")
    assert summary["quantized_base"] == "QuantizedLinear"  # load_in_4bit=True: QLoRA on a 4-bit base
    assert 0.05 < summary["trained_token_share"] < 0.5  # only the assistant turns of the llama-3.1 texts count
    assert summary["memory_total_gb"] > 0
    # One warning, naming only bf16 (is_bfloat16_supported() is True here); the RoPE extension is a message.
    assert result.stderr.count("RuntimeWarning") == 1 and "SFTConfig: bf16 has no effect on MLX" in result.stderr
    assert (
        "the model has 512 positions; RoPE scaling (linear, factor 4) extends it to max_seq_length=2048"
        in result.stderr
    )


def test_notebook_with_peft_config_stops_at_construction(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = _run_notebook(tiny_model_dir, tmp_path / "peft", "--peft-config")
    assert result.returncode != 0
    assert "NotImplementedError: UnslothTrainer on MLX does not support peft_config" in result.stderr
    assert "FastLanguageModel.get_peft_model" in result.stderr
    assert "seconds used for training" not in result.stdout and not (tmp_path / "peft").exists()
