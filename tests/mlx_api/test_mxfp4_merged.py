"""`save_pretrained_merged(..., save_method="mxfp4")`: gpt-oss written in MLX's mxfp4 format, refused elsewhere."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def gpt_oss_dir(tmp_path_factory):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

    return build_tiny_hybrid_model(tmp_path_factory.mktemp("gpt-oss") / "model", "gpt_oss")


def _logits(model, ids) -> np.ndarray:
    import mlx.core as mx

    return np.array(model(mx.array([ids])).astype(mx.float32))


def test_mxfp4_writes_what_mlx_lm_convert_writes_and_mlx_lm_loads(gpt_oss_dir, tmp_path):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.utils import quantize_model

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(gpt_oss_dir), load_in_4bit=False)
    folder = model.save_pretrained_merged(str(tmp_path / "mxfp4"), tokenizer, save_method="mxfp4")
    config = json.loads((folder / "config.json").read_text())
    quantization = config["quantization"]
    assert (quantization["group_size"], quantization["bits"], quantization["mode"]) == (32, 4, "mxfp4")
    # gpt-oss's own rule in mlx_lm keeps each router at 8-bit affine, as mlx_lm.convert writes it.
    assert quantization["model.layers.0.mlp.router"] == {"group_size": 64, "bits": 8}
    loaded, _ = load(str(folder))
    # The same weights quantized by mlx_lm's own call in mxfp4 mode give the same logits.
    by_hand, _ = load(str(gpt_oss_dir))
    by_hand, _ = quantize_model(by_hand, {}, group_size=None, bits=None, mode="mxfp4")
    ids = tokenizer("The kettle is red.")["input_ids"]
    np.testing.assert_allclose(_logits(loaded, ids), _logits(by_hand, ids), atol=1e-5)
    saved = mx.load(str(folder / "model.safetensors"))
    # mxfp4 blocks carry a shared exponent per 32 values and no bias, unlike the affine router beside them.
    attention = "model.layers.0.self_attn.q_proj"
    assert saved[f"{attention}.weight"].dtype == mx.uint32 and f"{attention}.scales" in saved
    assert f"{attention}.biases" not in saved and "model.layers.0.mlp.router.biases" in saved


def test_mxfp4_on_another_family_is_refused_by_name(load_public, tmp_path):
    model, tokenizer = load_public()
    with pytest.raises(NotImplementedError, match=r"save_method='mxfp4' is for gpt-oss models .* not 'llama'"):
        model.save_pretrained_merged(str(tmp_path / "mxfp4"), tokenizer, save_method="mxfp4")
    assert not (tmp_path / "mxfp4").exists()
