"""YaRN written to GGUF is applied by llama.cpp as mlx_lm applies it, for each family it is written for.

Untrained tiny models (f16 only, so fast): llama.cpp's first-position logits must sit within 2e-3 of the MLX model's
with YaRN, and the same model without YaRN must sit farther from them than that, so the comparison can fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from tools.kits.tiny_gguf_families import YARN, qwen3_config

from .agreement import llama_cpp_continuations, mlx_greedy, prompt_text

CLOSE = 2e-3


def _config(model_type: str, with_yarn: bool) -> dict:
    config = {**qwen3_config(), "model_type": model_type}
    if model_type in ("llama", "qwen2"):
        config.pop("head_dim")
    return {**config, "rope_scaling": YARN} if with_yarn else config


def _first_logits(folder) -> tuple:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    prompt = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
    first, _ = mlx_greedy(model, prompt, 1)
    return model, tokenizer, prompt, first


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3"])
def test_llama_cpp_applies_yarn_as_mlx_does(tmp_path, model_type):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

    scaled = build_tiny_hybrid_model(tmp_path / "yarn", model_type, config=_config(model_type, True))
    plain = build_tiny_hybrid_model(tmp_path / "plain", model_type, config=_config(model_type, False))
    model, tokenizer, prompt, first = _first_logits(scaled)
    assert len(prompt) > YARN["original_max_position_embeddings"]  # the prompt runs past YaRN's original context
    _, _, _, unscaled = _first_logits(plain)
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f16")
    reloaded = llama_cpp_continuations([path], prompt_text(), count=1)[path.name]
    assert reloaded["prompt"] == prompt
    scale = np.abs(first).max()
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max() / scale)
    without = float(np.abs(unscaled - first).max() / scale)
    print(f"{model_type} YaRN f16: gap {gap:.2e}, without YaRN {without:.2e}")
    assert without > CLOSE  # YaRN changes these logits more than the bound allows
    assert gap < CLOSE
