"""Gemma 3n's GGUF export read by libmtmd: a tiny untrained Gemma 3n (mlx-vlm's full-size MobileNet-V5 tower, the
only one it builds, beside a text model in the settings llama.cpp's gemma3n fixes) exported in f16, language model
plus gemma3nv mmproj, must read a 768-pixel image prompt with MLX's first logits and greedy tokens.

Not yet seen passing end to end, and not cheap: on the 2 loaded CPUs here the bf16 mmproj of the full tower took
over 5 minutes to write (gguf's BF16 rounding) and libmtmd 93 s to encode the image; a hand run of its llama.cpp half
(f16 mmproj of this model, its f16 language model) loaded both files, read the prompt as the processor's 282 ids and
generated. The cheap checks of the file's keys and tensors are in tests/mlx_api/test_gguf_mmproj_gemma3n.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

import numpy as np
import pytest

from ..conftest import NEUTRAL_CWD
from .agreement import runner_failure
from .test_gguf_mmproj_llama_cpp import QUESTION, RUNNER, _square
from .test_gguf_mmproj_untrained_llama_cpp import CLEAR_MARGIN, LARGEST_GAP

NEW_TOKENS = 4
SIDE = 768
# The text settings llama.cpp's gemma3n holds fixed (tools/kits/tiny_gguf_gemma3n.py), on two layers, as wide as the
# vision tower.
TEXT = {
    "hidden_size": 2048,  # libmtmd takes gemma3nv's output width from the tower's, 2048
    "laurel_rank": 64,
    "hidden_size_per_layer_input": 256,
    "activation_sparsity_pattern": [0.95, 0.95],
    "altup_active_idx": 0,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
}
# Gemma 3n's processor writes "\n\n" around <start_of_image>...<end_of_image>; libmtmd writes those two markers.
IMAGE_TEXT, MTMD_TEXT = "<image_soft_token>", "\n\n<__media__>\n\n"


def _prompt(processor: Any, colour: str) -> tuple:
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(images=[[_square(SIDE, colour)]], text=[text], add_special_tokens=False)
    ids = [int(token) for token in np.asarray(inputs["input_ids"])[0]]
    return text, ids, np.asarray(inputs["pixel_values"])


def _mlx_rows(model: Any, sequence: list, pixels: Any, start: int) -> np.ndarray:
    """MLX's logits at each position from `start - 1` on, from one causal pass over `sequence` (the prompt and
    llama.cpp's tokens: one pass, as each pass runs the full tower again)."""
    import mlx.core as mx

    from unsloth.mlx.vision.backend import causal_logits

    logits = causal_logits(model, mx.array([sequence]), mx.array(pixels), {})[0].astype(mx.float32)
    return np.array(logits, dtype=np.float64)[start - 1 : len(sequence) - 1]


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    import time

    from tools.kits.tiny_vlm_gemma3n import build_tiny_gemma3n
    from unsloth import FastVisionModel

    root = tmp_path_factory.mktemp("gemma3n-mmproj")
    model, processor = FastVisionModel.from_pretrained(str(build_tiny_gemma3n(root / "model", seed=1, text=TEXT)))
    FastVisionModel.for_inference(model)
    text, ids, pixels = _prompt(processor, "blue")
    with pytest.warns(UserWarning, match=r"audio projector \(gemma3na\) is not written"):
        paths = model.save_pretrained_gguf(str(root / "gguf"), processor, quantization_method="f16")
    (root / "square.rgb").write_bytes(_square(SIDE, "blue").tobytes())
    assert IMAGE_TEXT in text
    image_token = int(model.config.image_token_id)
    command = [sys.executable, str(RUNNER), str(paths[-1]), str(root / "square.rgb"), str(SIDE), str(SIDE)]
    command += [str(image_token), text.replace(IMAGE_TEXT, MTMD_TEXT), str(NEW_TOKENS), *map(str, paths[:-1])]
    started = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=NEUTRAL_CWD, env={**os.environ, "UNSLOTH_MLX": "1"}
    )
    print(f"libmtmd: {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, runner_failure(result.returncode, result.stderr)
    (reloaded,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    started = time.monotonic()
    rows = _mlx_rows(model, ids + reloaded["tokens"], pixels, len(ids))
    print(f"MLX: {time.monotonic() - started:.1f} s")
    return {"ids": ids, "reloaded": reloaded, "rows": rows}


def test_libmtmd_reads_gemma3ns_image_prompt_with_mlxs_logits_and_greedy_tokens(compared) -> None:
    reloaded, rows = compared["reloaded"], compared["rows"]
    gap = float(np.abs(np.array(reloaded["first_logits"]) - rows[0]).max() / np.abs(rows[0]).max())
    ordered = np.sort(rows, axis=1)
    margins = (ordered[:, -1] - ordered[:, -2]) / np.abs(rows).max(axis=1)
    clear = 0
    while clear < NEW_TOKENS and margins[clear] > CLEAR_MARGIN * gap:
        clear += 1
    print(f"gemma3n: first-logits gap {gap:.2e}, {clear} clear greedy steps, margins {np.round(margins, 3).tolist()}")
    assert reloaded["prompt"] == compared["ids"]
    assert gap < LARGEST_GAP
    assert clear >= 1, "no greedy step of this seed's untrained model is clear of the gap: pick another seed"
    # MLX's argmax after llama.cpp's own tokens: its greedy tokens while the two agree.
    assert reloaded["tokens"][:clear] == [int(token) for token in rows.argmax(axis=1)[:clear]]
