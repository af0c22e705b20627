"""Gemma 3n's mmproj without llama.cpp, in seconds: a handful of weights of each kind under mlx-vlm's names and
layouts (MobileNet-V5 blocks, stem, multi-scale fusion, the embedder, and an audio tower), written as the gemma3nv
projector. The expected keys, names, types and shapes are those llama-cpp-python 0.3.36's own converter
(`convert_hf_to_gguf.py --mmproj`) wrote for the tiny kit model (tools/kits/tiny_vlm_gemma3n.py) in f16, whose 552
vision tensors ours matched byte for byte, but for the 81 layer scales' shape (see EXPECTED); llama.cpp's file adds
the audio half this exporter leaves out by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

# mlx-vlm name -> its shape (MLX's convolutions are (out, h, w, in)); one of each kind the tower holds.
WEIGHTS = {
    "vision_tower.timm_model.conv_stem.conv.weight": (8, 3, 3, 3),
    "vision_tower.timm_model.conv_stem.conv.bias": (8,),
    "vision_tower.timm_model.conv_stem.bn.weight": (8,),
    "vision_tower.timm_model.blocks.0.0.conv_exp.weight": (16, 3, 3, 8),
    "vision_tower.timm_model.blocks.0.0.bn1.weight": (16,),
    "vision_tower.timm_model.blocks.1.0.dw_start.conv.weight": (8, 3, 3, 1),
    "vision_tower.timm_model.blocks.1.0.pw_exp.conv.weight": (24, 1, 1, 8),
    "vision_tower.timm_model.blocks.1.0.layer_scale.gamma": (8,),
    "vision_tower.timm_model.blocks.3.1.attn.query.proj.weight": (12, 1, 1, 8),
    "vision_tower.timm_model.blocks.3.1.attn.key.down_conv.weight": (8, 3, 3, 1),
    "vision_tower.timm_model.blocks.3.1.attn.key.norm.weight": (8,),
    "vision_tower.timm_model.blocks.3.1.norm.weight": (8,),
    "vision_tower.timm_model.msfa.ffn.pw_exp.conv.weight": (24, 1, 1, 8),
    "vision_tower.timm_model.msfa.norm.weight": (16,),
    "embed_vision.embedding.weight": (4, 16),
    "embed_vision.embedding_projection.weight": (64, 16),
    "embed_vision.hard_embedding_norm.weight": (16,),
    "embed_vision.soft_embedding_norm.weight": (16,),
    "audio_tower.conformer.0.attention.attn.q_proj.weight": (32, 32),
    "audio_tower.subsample_conv_projection.conv_0.norm.weight": (8,),
    "embed_audio.embedding_projection.weight": (64, 32),
    "language_model.model.norm.weight": (64,),
}
# What llama.cpp's converter wrote for each (name, type, shape as gguf lists it, innermost first).
EXPECTED = {
    "vision_tower.timm_model.conv_stem.conv.weight": ("v.conv_stem.conv.weight", "F32", [3, 3, 3, 8]),
    "vision_tower.timm_model.conv_stem.conv.bias": ("v.conv_stem.conv.bias", "F32", [1, 1, 8, 1]),
    "vision_tower.timm_model.conv_stem.bn.weight": ("v.conv_stem.bn.weight", "F32", [8]),
    "vision_tower.timm_model.blocks.0.0.conv_exp.weight": ("v.blk.0.0.conv_exp.weight", "F16", [3, 3, 8, 16]),
    "vision_tower.timm_model.blocks.0.0.bn1.weight": ("v.blk.0.0.bn1.weight", "F32", [16]),
    "vision_tower.timm_model.blocks.1.0.dw_start.conv.weight": ("v.blk.1.0.dw_start.conv.weight", "F16", [3, 3, 1, 8]),
    "vision_tower.timm_model.blocks.1.0.pw_exp.conv.weight": ("v.blk.1.0.pw_exp.conv.weight", "F16", [1, 1, 8, 24]),
    # Its converter leaves the blocks' layer scales vectors, which libmtmd's graph cannot broadcast: (1, C, 1, 1) here.
    "vision_tower.timm_model.blocks.1.0.layer_scale.gamma": ("v.blk.1.0.layer_scale.gamma", "F32", [1, 1, 8, 1]),
    "vision_tower.timm_model.blocks.3.1.attn.query.proj.weight": (
        "v.blk.3.1.attn.query.proj.weight",
        "F16",
        [1, 1, 8, 12],
    ),
    "vision_tower.timm_model.blocks.3.1.attn.key.down_conv.weight": (
        "v.blk.3.1.attn.key.down_conv.weight",
        "F16",
        [3, 3, 1, 8],
    ),
    "vision_tower.timm_model.blocks.3.1.attn.key.norm.weight": ("v.blk.3.1.attn.key.norm.weight", "F32", [8]),
    "vision_tower.timm_model.blocks.3.1.norm.weight": ("v.blk.3.1.norm.weight", "F32", [8]),
    "vision_tower.timm_model.msfa.ffn.pw_exp.conv.weight": ("v.msfa.ffn.pw_exp.conv.weight", "F16", [1, 1, 8, 24]),
    "vision_tower.timm_model.msfa.norm.weight": ("v.msfa.norm.weight", "F32", [16]),
    "embed_vision.embedding.weight": ("mm.embedding.weight", "F16", [16, 4]),
    "embed_vision.embedding_projection.weight": ("mm.input_projection.weight", "F16", [16, 64]),
    "embed_vision.hard_embedding_norm.weight": ("mm.hard_emb_norm.weight", "F32", [16]),
    "embed_vision.soft_embedding_norm.weight": ("mm.soft_emb_norm.weight", "F32", [16]),
}
# The vision keys llama.cpp's converter wrote for the kit's config and processor.
KEYS = {
    "clip.has_vision_encoder": True,
    "clip.vision.projector_type": "gemma3nv",
    "clip.vision.projection_dim": 2048,  # the language model's width (64 in the kit model the converter read)
    "clip.vision.image_size": 768,
    "clip.vision.patch_size": 3,
    "clip.vision.embedding_length": 2048,
    "clip.vision.feed_forward_length": 8192,
    "clip.vision.block_count": 128,
    "clip.vision.attention.head_count": 8,
    "clip.vision.image_mean": [0.0, 0.0, 0.0],
    "clip.vision.image_std": [1.0, 1.0, 1.0],
}
CONFIG = {
    "model_type": "gemma3n",
    "hidden_size": 2048,
    "text_config": {"model_type": "gemma3n_text", "hidden_size": 2048},
    "vision_config": {"model_type": "gemma3n_vision", "hidden_size": 2048, "vocab_size": 4, "vocab_offset": 516},
    "audio_config": {"hidden_size": 32, "conf_num_hidden_layers": 1, "input_feat_size": 128},
}
# The kit's processor settings: a 768-pixel side, and a normalisation llama.cpp's converter replaces by none.
PREPROCESSOR = {"size": {"height": 768, "width": 768}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    import gguf
    import mlx.core as mx

    from unsloth.mlx.gguf.projectors import projector_for
    from unsloth.mlx.gguf.projectors.mmproj import write_mmproj

    rng = np.random.default_rng(0)
    weights = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in WEIGHTS.items()}
    path = tmp_path_factory.mktemp("gemma3n-mmproj") / "unsloth.F16-mmproj.gguf"
    with pytest.warns(UserWarning, match=r"audio projector \(gemma3na\) is not written"):
        write_mmproj(path, projector_for(CONFIG), CONFIG, {k: mx.array(v) for k, v in weights.items()}, PREPROCESSOR)
    reader = gguf.GGUFReader(str(path))
    return {"reader": reader, "weights": weights, "tensors": {tensor.name: tensor for tensor in reader.tensors}}


def test_the_vision_keys_are_those_llama_cpps_converter_writes_and_no_audio_key(written) -> None:
    fields = written["reader"].fields
    assert {key: fields[key].contents() for key in KEYS} == KEYS
    assert fields["clip.vision.attention.layer_norm_epsilon"].contents() == pytest.approx(1e-6)
    assert not [key for key in fields if key.startswith(("clip.audio", "clip.has_audio", "clip.projector_type"))]


def test_each_tensor_has_llama_cpps_name_type_and_shape(written) -> None:
    found = {
        name: (tensor.tensor_type.name, [int(size) for size in tensor.shape])
        for name, tensor in written["tensors"].items()
    }
    assert found == {name: (kind, shape) for name, kind, shape in EXPECTED.values()}


def test_convolutions_are_stored_out_in_h_w_and_the_stem_bias_broadcast(written) -> None:
    weights, tensors = written["weights"], written["tensors"]
    stem = weights["vision_tower.timm_model.conv_stem.conv.weight"]  # MLX (out, h, w, in)
    stored = np.array(tensors["v.conv_stem.conv.weight"].data).reshape(8, 3, 3, 3)
    np.testing.assert_array_equal(stored, stem.transpose(0, 3, 1, 2))
    conv = weights["vision_tower.timm_model.blocks.0.0.conv_exp.weight"]
    stored = np.array(tensors["v.blk.0.0.conv_exp.weight"].data, dtype=np.float32).reshape(16, 8, 3, 3)
    np.testing.assert_array_equal(stored, conv.transpose(0, 3, 1, 2).astype(np.float16).astype(np.float32))
    bias = np.array(tensors["v.conv_stem.conv.bias"].data).reshape(-1)
    np.testing.assert_array_equal(bias, weights["vision_tower.timm_model.conv_stem.conv.bias"])


def test_the_language_model_is_the_gemma3n_text_model_without_the_towers() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    text, named = projector_for(CONFIG).language(CONFIG, {name: None for name in WEIGHTS})
    assert text["model_type"] == "gemma3n_text"
    assert list(named) == ["model.norm.weight"]


def test_an_unknown_mobilenet_block_weight_is_refused_by_name(tmp_path: Path) -> None:
    import mlx.core as mx

    from unsloth.mlx.gguf.projectors import projector_for

    weights = {"vision_tower.timm_model.blocks.0.0.se.fc.weight": mx.zeros((2, 2))}
    with pytest.raises(KeyError, match="no llama.cpp mmproj tensor for Gemma 3n's weight"):
        projector_for(CONFIG).tensors({**CONFIG, "audio_config": None}, weights, tmp_path)


def test_a_language_model_narrower_than_the_tower_is_refused_by_name() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    config = {**CONFIG, "text_config": {"model_type": "gemma3n_text", "hidden_size": 64}}
    with pytest.raises(NotImplementedError, match="language model 64 wide beside a vision tower 2048 wide.*libmtmd"):
        projector_for(config)
