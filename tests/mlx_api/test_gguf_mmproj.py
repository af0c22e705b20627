"""A vision model's GGUF export without llama.cpp: the projector's mmproj file as llama.cpp's converter writes it
(keys, names, per-tensor types, Gemma's norm offset), the language model's file beside it, the Modelfile CUDA Unsloth
writes, and the derived table of projector families that refuses every other family by name."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

from tools import gguf_mmproj_coverage

CONVERTER = """
@ModelBase.register("Gemma3ForConditionalGeneration")
class Gemma3VisionModel(MmprojModel):
    def set_gguf_parameters(self):
        self.gguf_writer.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)

@ModelBase.register("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")
class Qwen2VLVisionModel(MmprojModel):
    def set_gguf_parameters(self):
        if self.kind == "qwen2_vl":
            self.gguf_writer.add_clip_projector_type(gguf.VisionProjectorType.QWEN2VL)
        else:
            self.gguf_writer.add_clip_projector_type(gguf.VisionProjectorType.QWEN25VL)

@ModelBase.register("Sarashina2VisionForCausalLM")
class Sarashina(Qwen2VLVisionModel):
    pass

@ModelBase.register("Gemma3ForCausalLM")
class Gemma3Text(TextModel):
    model_arch = gguf.MODEL_ARCH.GEMMA3
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """A tiny Gemma 3 with LoRA, exported in q8_0: its paths, its merged weights and its GGUF readers."""
    import gguf

    from tools.kits.tiny_vlm_model import build_tiny_gemma3
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.merged import merged_weights

    root = tmp_path_factory.mktemp("gemma3-gguf")
    model, processor = FastVisionModel.from_pretrained(str(build_tiny_gemma3(root / "model")))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
    paths = model.save_pretrained_gguf(str(root / "gguf"), processor)
    weights = {name: np.array(value) for name, value in merged_weights(model).items()}
    readers = [gguf.GGUFReader(str(path)) for path in paths]
    return {"paths": paths, "weights": weights, "readers": readers, "folder": root / "gguf"}


def _value(reader: Any, key: str) -> Any:
    field = reader.fields[key]
    value = field.contents() if hasattr(field, "contents") else field.parts[field.data[0]]
    return value


def test_the_language_model_then_the_mmproj_as_cuda_unsloth_names_them(exported) -> None:
    assert [Path(path).name for path in exported["paths"]] == ["unsloth.Q8_0.gguf", "unsloth.F16-mmproj.gguf"]
    language, projector = exported["readers"]
    assert _value(language, "general.architecture") == "gemma3"
    assert _value(projector, "general.architecture") == "clip"
    assert _value(projector, "general.type") == "mmproj"
    assert not any(tensor.name.startswith(("v.", "mm.")) for tensor in language.tensors)
    assert all(tensor.name.startswith(("v.", "mm.")) for tensor in projector.tensors)


def test_the_projector_keys_are_llama_cpps_gemma3_keys(exported) -> None:
    projector = exported["readers"][1]
    assert _value(projector, "clip.projector_type") == "gemma3"
    assert _value(projector, "clip.has_vision_encoder") is True
    assert _value(projector, "clip.vision.projection_dim") == 64  # the language model's width
    assert _value(projector, "clip.vision.image_size") == 32
    assert _value(projector, "clip.vision.patch_size") == 8
    assert _value(projector, "clip.vision.block_count") == 2
    assert _value(projector, "clip.vision.image_mean") == pytest.approx([0.5, 0.5, 0.5])
    # 4 patches a side pooled to 2 tokens a side: written because it is not llama.cpp's default of 4.
    assert _value(projector, "clip.vision.projector.scale_factor") == 2


def test_each_projector_tensor_has_the_type_and_values_llama_cpps_converter_gives_it(exported) -> None:
    tensors = {tensor.name: tensor for tensor in exported["readers"][1].tensors}
    types = {name: tensor.tensor_type.name for name, tensor in tensors.items()}
    assert types["v.patch_embd.weight"] == "F32" and types["v.position_embd.weight"] == "F32"
    assert types["mm.input_projection.weight"] == "F16"
    assert types["v.blk.0.attn_q.weight"] == "F16" and types["v.blk.0.attn_q.bias"] == "F32"
    assert types["mm.soft_emb_norm.weight"] == "F32" and types["v.post_ln.weight"] == "F32"
    weights = exported["weights"]
    norm = weights["multi_modal_projector.mm_soft_emb_norm.weight"]
    np.testing.assert_allclose(np.array(tensors["mm.soft_emb_norm.weight"].data), norm + 1.0, rtol=1e-6)
    patch = weights["vision_tower.vision_model.embeddings.patch_embedding.weight"]  # MLX: (out, h, w, in)
    stored = np.array(tensors["v.patch_embd.weight"].data).reshape(patch.shape[0], patch.shape[3], *patch.shape[1:3])
    np.testing.assert_allclose(stored, patch.transpose(0, 3, 1, 2), rtol=1e-6)


def test_the_modelfile_names_the_folder_as_cuda_unsloth_does_for_a_vision_model(exported) -> None:
    assert (exported["folder"] / "Modelfile").read_text().splitlines()[0] == "FROM ."
    assert (exported["folder"] / "processor_config.json").is_file()  # the processor saved beside them


def test_a_bfloat16_model_gets_a_bf16_projector() -> None:
    import mlx.core as mx

    from unsloth.mlx.gguf.projectors.multimodal import mmproj_file_type

    assert mmproj_file_type({"a": mx.zeros((2,), dtype=mx.bfloat16)}) == "bf16"
    assert mmproj_file_type({"a": mx.zeros((2,), dtype=mx.float32)}) == "f16"


def test_a_family_without_a_projector_converter_is_refused_by_name() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    with pytest.raises(NotImplementedError, match="model_type .hunyuan_vl.*writes its projector as hunyuanvl"):
        projector_for({"model_type": "hunyuan_vl"})
    with pytest.raises(NotImplementedError, match="model_type 'mllama'.*has no mmproj converter for it"):
        projector_for({"model_type": "mllama"})


def test_the_projector_facts_are_read_from_the_mmproj_classes_with_their_bases() -> None:
    assert gguf_mmproj_coverage.parse_projector_classes([CONVERTER]) == {
        "Gemma3ForConditionalGeneration": ("GEMMA3",),
        "Qwen2VLForConditionalGeneration": ("QWEN2VL", "QWEN25VL"),
        "Qwen2_5_VLForConditionalGeneration": ("QWEN2VL", "QWEN25VL"),
        "Sarashina2VisionForCausalLM": ("QWEN2VL", "QWEN25VL"),
    }


def test_every_registered_family_is_exported_in_the_table_and_every_other_refused() -> None:
    from unsloth.mlx.gguf.projectors import PROJECTORS
    from unsloth.mlx.gguf.projectors.coverage import projector_verdict

    families = gguf_mmproj_coverage.installed_vision_families()
    assert set(PROJECTORS) <= set(families)
    for family in families:
        verdict = projector_verdict(family)
        assert verdict.exported == (family in PROJECTORS and not PROJECTORS[family].llama_cpp_differs)
        assert bool(verdict.reason) != verdict.exported


def test_the_table_in_the_docs_is_in_sync_and_check_mode_writes_nothing(tmp_path) -> None:
    docs = tmp_path / "gguf.md"
    committed = gguf_mmproj_coverage.DOCS.read_text(encoding="utf-8")
    docs.write_text(committed, encoding="utf-8")
    out = io.StringIO()
    assert gguf_mmproj_coverage.main(["--check", "--docs", str(docs)], stdout=out) == 0, out.getvalue()
    stale = committed.replace("| `gemma3` | `gemma3` | yes | exported |", "| `gemma3` | `gemma3` | yes | refused |")
    assert stale != committed
    docs.write_text(stale, encoding="utf-8")
    assert gguf_mmproj_coverage.main(["--check", "--docs", str(docs)], stdout=out) == 1
    assert docs.read_text(encoding="utf-8") == stale
    assert "python -m tools.gguf_mmproj_coverage" in out.getvalue()


def test_mistral_3_gets_llama_cpps_pixtral_projector_with_its_image_break_embedding(tmp_path) -> None:
    import gguf

    from tools.kits.tiny_vlm_model import build_tiny_mistral3
    from unsloth import FastVisionModel
    from unsloth.mlx.gguf.convert import interleave_rotary_rows
    from unsloth.mlx.vision.merged import merged_weights

    model, processor = FastVisionModel.from_pretrained(str(build_tiny_mistral3(tmp_path / "model")))
    paths = model.save_pretrained_gguf(str(tmp_path / "gguf"), processor, quantization_method="f16")
    assert [Path(path).name for path in paths] == ["unsloth.F16.gguf", "unsloth.F16-mmproj.gguf"]
    language, projector = (gguf.GGUFReader(str(path)) for path in paths)
    assert _value(language, "general.architecture") == "llama"
    assert _value(projector, "clip.projector_type") == "pixtral"
    assert _value(projector, "clip.vision.spatial_merge_size") == 2
    assert _value(projector, "clip.use_silu") is True and "clip.use_gelu" not in projector.fields
    tensors = {tensor.name: np.array(tensor.data, dtype=np.float32) for tensor in projector.tensors}
    weights = {name: np.array(value) for name, value in merged_weights(model).items()}
    break_id = processor.tokenizer.convert_tokens_to_ids("[IMG_BREAK]")
    np.testing.assert_array_equal(tensors["v.token_embd.img_break"], weights[_EMBEDDINGS][break_id])
    query = weights["vision_tower.vision_model.transformer.layers.0.attention.q_proj.weight"]
    np.testing.assert_allclose(tensors["v.blk.0.attn_q.weight"], interleave_rotary_rows(query, 2), atol=1e-3)
    assert {"mm.1.weight", "mm.2.weight", "mm.input_norm.weight", "mm.patch_merger.weight"} <= set(tensors)


_EMBEDDINGS = "language_model.model.embed_tokens.weight"


def test_a_pixtral_tower_rotating_by_another_base_is_refused_by_name() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    config = {"model_type": "mistral3", "vision_config": {"rope_theta": 1e6, "num_attention_heads": 2}}
    with pytest.raises(NotImplementedError, match="vision rope_theta of 1000000.0: llama.cpp's Pixtral rotates by"):
        projector_for(config)


@pytest.mark.parametrize("act", [None, "gelu"])
def test_a_pixtral_tower_whose_config_names_another_activation_than_mlx_vlms_silu_is_refused(act) -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    vision = {"rope_theta": 10000.0} if act is None else {"rope_theta": 10000.0, "hidden_act": act}
    with pytest.raises(NotImplementedError, match="hidden_act='gelu': mlx-vlm's Pixtral tower gates its feed-forward"):
        projector_for({"model_type": "mistral3", "vision_config": vision})


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"vision_config": {"model_type": "clip_vision_model"}}, "llava with a 'clip_vision_model' vision tower"),
        ({"spatial_merge_size": 2}, "llava with spatial_merge_size=2: Pixtral's tower has no patch merger"),
        ({"vision_feature_layer": -2}, "llava with vision_feature_layer=-2: llama.cpp's Pixtral reads the last"),
        ({"projector_hidden_act": "silu"}, "llava with projector_hidden_act='silu': llama.cpp's Pixtral runs gelu"),
    ],
)
def test_a_llava_config_llama_cpp_would_run_differently_is_refused_by_name(config, reason) -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    tower = {"model_type": "pixtral", "rope_theta": 10000.0, "hidden_act": "silu"}
    with pytest.raises(NotImplementedError, match=reason):
        projector_for({"model_type": "llava", "vision_config": tower, **config})


def test_the_hubs_pixtral_as_llava_gets_the_pixtral_projector_without_a_patch_merger(tmp_path) -> None:
    import gguf

    from tools.kits.tiny_vlm_model import build_tiny_pixtral_as_hub
    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(build_tiny_pixtral_as_hub(tmp_path / "model")))
    paths = model.save_pretrained_gguf(str(tmp_path / "gguf"), processor, quantization_method="f16")
    language, projector = (gguf.GGUFReader(str(path)) for path in paths)
    assert _value(language, "general.architecture") == "llama"
    assert "output.weight" in {tensor.name for tensor in language.tensors}  # the llava language model's own head
    assert _value(projector, "clip.projector_type") == "pixtral"
    assert "clip.vision.spatial_merge_size" not in projector.fields  # llama.cpp's Pixtral then merges nothing
    blocks = {f"v.blk.{block}.{part}.weight" for block in range(2) for part in _PIXTRAL_BLOCK}
    expected = blocks | {"v.patch_embd.weight", "v.pre_ln.weight", "v.token_embd.img_break"}
    assert {tensor.name for tensor in projector.tensors} == expected | {
        f"mm.{n}.{k}" for n in (1, 2) for k in ("weight", "bias")
    }


# A Pixtral block's tensors as llama.cpp's converter names them.
_PIXTRAL_BLOCK = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down", "ln1", "ln2")


def test_lfm2_vl_gets_llama_cpps_lfm2_projector_with_its_linear_patch_embedding(tmp_path) -> None:
    import gguf

    from tools.kits.tiny_vlm_model import build_tiny_lfm2_vl
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.merged import merged_weights

    model, processor = FastVisionModel.from_pretrained(str(build_tiny_lfm2_vl(tmp_path / "model")))
    paths = model.save_pretrained_gguf(str(tmp_path / "gguf"), processor, quantization_method="f16")
    language, projector = (gguf.GGUFReader(str(path)) for path in paths)
    assert _value(language, "general.architecture") == "lfm2"
    assert _value(projector, "clip.projector_type") == "lfm2"
    assert _value(projector, "clip.vision.projector.scale_factor") == 2
    assert _value(projector, "clip.vision.image_size") == 256  # what llama.cpp's converter writes for NaFlex
    assert _value(projector, "clip.vision.block_count") == 2
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    patch = np.array(merged_weights(model)["vision_tower.embeddings.patch_embedding.weight"])  # (out, 16 * 16 * 3)
    stored = np.array(tensors["v.patch_embd.weight"].data, dtype=np.float32).reshape(patch.shape[0], 3, 16, 16)
    np.testing.assert_allclose(stored, patch.reshape(-1, 16, 16, 3).transpose(0, 3, 1, 2), atol=1e-3)
    assert {"mm.input_norm.weight", "mm.1.weight", "mm.2.bias"} <= set(tensors)


def test_gemma_4_with_an_audio_tower_is_refused_by_name() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    with pytest.raises(NotImplementedError, match="gemma4 with an audio tower: its audio projector .gemma4a."):
        projector_for({"model_type": "gemma4", "vision_config": {}, "audio_config": {"hidden_size": 8}})


def _qwen_exported(folder: Path) -> tuple:
    """A tiny Qwen VL folder exported in f16: its language and projector readers, and its merged weights."""
    import gguf

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.merged import merged_weights

    model, processor = FastVisionModel.from_pretrained(str(folder))
    paths = model.save_pretrained_gguf(str(folder.parent / "gguf"), processor, quantization_method="f16")
    assert [Path(path).name for path in paths] == ["unsloth.F16.gguf", "unsloth.F16-mmproj.gguf"]
    language, projector = (gguf.GGUFReader(str(path)) for path in paths)
    return language, projector, {name: np.array(value) for name, value in merged_weights(model).items()}


def _assert_qwen_patch_embedding_split_in_time(tensors: Dict[str, Any], weights: Dict[str, np.ndarray]) -> None:
    patch = weights["vision_tower.patch_embed.proj.weight"]  # MLX's Conv3d: (out, time, h, w, in)
    for step, name in enumerate(("v.patch_embd.weight", "v.patch_embd.weight.1")):
        assert tensors[name].tensor_type.name == "F16"  # as llama.cpp's converter forces both halves
        stored = np.array(tensors[name].data, dtype=np.float32).reshape(patch.shape[0], 3, 14, 14)
        np.testing.assert_allclose(stored, patch[:, step].transpose(0, 3, 1, 2), atol=1e-3)


def _assert_qwen_attention_split(tensors: Dict[str, Any], weights: Dict[str, np.ndarray]) -> None:
    fused = weights["vision_tower.blocks.0.attn.qkv.weight"]
    width = fused.shape[0] // 3
    for index, part in enumerate("qkv"):
        stored = np.array(tensors[f"v.blk.0.attn_{part}.weight"].data, dtype=np.float32)
        np.testing.assert_allclose(stored, fused[index * width : (index + 1) * width], atol=1e-3)
        bias = weights["vision_tower.blocks.0.attn.qkv.bias"][index * width : (index + 1) * width]
        np.testing.assert_array_equal(np.array(tensors[f"v.blk.0.attn_{part}.bias"].data), bias)


def test_qwen25_vl_gets_a_qwen2vl_language_model_with_rope_sections_and_the_qwen25vl_projector(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import build_tiny_qwen25_vl

    language, projector, weights = _qwen_exported(build_tiny_qwen25_vl(tmp_path / "model"))
    assert _value(language, "general.architecture") == "qwen2vl"
    assert list(_value(language, "qwen2vl.rope.dimension_sections")) == [2, 3, 3, 0]  # the kit's mrope_section
    assert _value(language, "qwen2vl.rope.dimension_count") == 16  # the whole head rotates
    assert not any(tensor.name.startswith(("v.", "mm.")) for tensor in language.tensors)
    assert "blk.0.attn_q.bias" in {tensor.name for tensor in language.tensors}
    assert _value(projector, "clip.projector_type") == "qwen2.5vl_merger"
    assert _value(projector, "clip.use_silu") is True
    assert _value(projector, "clip.vision.n_wa_pattern") == 2  # full attention in block 1 of 2
    assert _value(projector, "clip.vision.image_size") == 560  # llama.cpp's converter's default
    assert _value(projector, "clip.vision.embedding_length") == 32
    assert _value(projector, "clip.vision.feed_forward_length") == 64
    assert _value(projector, "clip.vision.attention.head_count") == 2
    assert _value(projector, "clip.vision.projection_dim") == 64
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    _assert_qwen_patch_embedding_split_in_time(tensors, weights)
    _assert_qwen_attention_split(tensors, weights)
    assert {"v.blk.1.ffn_gate.weight", "v.blk.1.ln2.weight", "v.post_ln.weight", "mm.0.bias", "mm.2.weight"} <= set(
        tensors
    )
    assert "v.blk.0.ln1.bias" not in tensors  # Qwen 2.5's RMS norms have no bias


def test_qwen2_vl_gets_the_qwen2vl_projector_with_layer_norms_and_quick_gelu(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import build_tiny_qwen2_vl

    language, projector, weights = _qwen_exported(build_tiny_qwen2_vl(tmp_path / "model"))
    assert _value(language, "general.architecture") == "qwen2vl"
    assert list(_value(language, "qwen2vl.rope.dimension_sections")) == [2, 3, 3, 0]
    assert _value(projector, "clip.projector_type") == "qwen2vl_merger"
    assert "clip.use_silu" not in projector.fields and "clip.use_gelu" not in projector.fields  # quick GELU
    assert "clip.vision.n_wa_pattern" not in projector.fields
    # llama.cpp's converter reads Qwen 2 VL's embed_dim as the width and its hidden_size as the feed-forward length.
    assert _value(projector, "clip.vision.embedding_length") == 32
    assert _value(projector, "clip.vision.feed_forward_length") == 64
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    _assert_qwen_patch_embedding_split_in_time(tensors, weights)
    _assert_qwen_attention_split(tensors, weights)
    assert {"v.blk.0.ffn_up.weight", "v.blk.0.ffn_down.bias", "v.blk.0.ln1.bias", "v.post_ln.bias"} <= set(tensors)
    assert "v.blk.0.ffn_gate.weight" not in tensors


@pytest.mark.parametrize(
    ("vision", "reason"),
    [
        ({"window_size": 224}, "window_size=224: llama.cpp's qwen25vl graph windows by 112 pixels"),
        ({"fullatt_block_indexes": [1, 2]}, r"fullatt_block_indexes=\[1, 2\]: llama.cpp's qwen25vl graph"),
        ({"temporal_patch_size": 3}, "temporal_patch_size=3: llama.cpp splits the patch embedding in 2"),
        ({"spatial_merge_size": 3}, "spatial_merge_size=3: llama.cpp's qwen2vl graph merges 2x2 patches"),
    ],
)
def test_a_qwen25_vl_tower_llama_cpp_would_run_differently_is_refused_by_name(vision, reason) -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    tower = {"window_size": 112, "fullatt_block_indexes": [1], "temporal_patch_size": 2, "spatial_merge_size": 2}
    config = {"model_type": "qwen2_5_vl", "vision_config": {**tower, **vision}}
    with pytest.raises(NotImplementedError, match=reason):
        projector_for(config)


def test_a_qwen_vl_language_model_whose_rope_sections_miss_part_of_the_head_is_refused_by_name(tmp_path) -> None:
    from unsloth.mlx.gguf.export import check_request

    config = {
        "model_type": "qwen2_5_vl",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 2]},
    }
    with pytest.raises(NotImplementedError, match=r"mrope_section \[2, 2, 2\] covers 12 of its 16 rotary"):
        check_request(config, tmp_path, ["f16"])


def test_qwen3_vl_gets_a_qwen3vl_language_model_with_its_deepstack_count_and_the_qwen3vl_projector(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import build_tiny_qwen3_vl

    language, projector, weights = _qwen_exported(build_tiny_qwen3_vl(tmp_path / "model"))
    assert _value(language, "general.architecture") == "qwen3vl"
    assert list(_value(language, "qwen3vl.rope.dimension_sections")) == [2, 3, 3, 0]
    assert _value(language, "qwen3vl.n_deepstack_layers") == 1  # the kit's one deepstack index
    assert "blk.0.attn_q_norm.weight" in {tensor.name for tensor in language.tensors}
    assert not any(tensor.name.startswith(("v.", "mm.")) for tensor in language.tensors)
    assert _value(projector, "clip.projector_type") == "qwen3vl_merger"
    assert _value(projector, "clip.use_gelu") is True
    assert _value(projector, "clip.vision.spatial_merge_size") == 2
    assert list(_value(projector, "clip.vision.is_deepstack_layers")) == [True, False]
    assert _value(projector, "clip.vision.image_size") == 64  # 4 x 4 learned positions of 16 pixels
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    patch = weights["vision_tower.patch_embed.proj.weight"]  # (out, time, h, w, in)
    for step, name in enumerate(("v.patch_embd.weight", "v.patch_embd.weight.1")):
        stored = np.array(tensors[name].data, dtype=np.float32).reshape(patch.shape[0], 3, 16, 16)
        np.testing.assert_allclose(stored, patch[:, step].transpose(0, 3, 1, 2), atol=1e-3)
    assert tensors["v.position_embd.weight"].tensor_type.name == "F32"
    np.testing.assert_array_equal(
        np.array(tensors["v.blk.0.attn_qkv.weight"].data, dtype=np.float32).shape,
        weights["vision_tower.blocks.0.attn.qkv.weight"].shape,  # llama.cpp's qwen3vl keeps the fused projection
    )
    deepstack = weights["vision_tower.deepstack_merger_list.0.linear_fc2.bias"]
    np.testing.assert_array_equal(np.array(tensors["v.deepstack.0.fc2.bias"].data), deepstack)
    expected = {"v.patch_embd.bias", "v.deepstack.0.norm.weight", "v.deepstack.0.fc1.weight", "v.post_ln.bias"}
    assert expected | {"mm.0.weight", "mm.2.bias", "v.blk.1.ffn_up.weight"} <= set(tensors)


def test_a_qwen3_vl_language_model_with_sections_not_interleaved_is_refused_by_name(tmp_path) -> None:
    from unsloth.mlx.gguf.export import check_request

    text = {"model_type": "qwen3_vl_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1}
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": False}
    config = {"model_type": "qwen3_vl", "text_config": {**text, "head_dim": 16, "rope_scaling": rope}}
    with pytest.raises(NotImplementedError, match="mrope_interleaved=False: llama.cpp's qwen3vl interleaves"):
        check_request(config, tmp_path, ["f16"])


# The Qwen 3 VL projector's tensors as llama.cpp's converter names them for a two-block tower (`Qwen3VLVisionModel`).
_QWEN3VL_TOWER = {
    f"v.blk.{block}.{part}.{kind}"
    for block in range(2)
    for part in ("attn_qkv", "attn_out", "ffn_up", "ffn_down", "ln1", "ln2")
    for kind in ("weight", "bias")
} | {"v.patch_embd.weight", "v.patch_embd.weight.1", "v.patch_embd.bias", "v.position_embd.weight"}
_QWEN3VL_MERGER = {"v.post_ln.weight", "v.post_ln.bias", "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"}
_DEEPSTACK_0 = {f"v.deepstack.0.{part}.{kind}" for part in ("norm", "fc1", "fc2") for kind in ("weight", "bias")}


@pytest.mark.parametrize(
    ("builder", "architecture", "deepstack", "language_tensors"),
    [
        (
            "build_tiny_qwen3_vl_moe",
            "qwen3vlmoe",
            [True, False],
            {"blk.1.ffn_gate_exps.weight", "blk.1.ffn_gate_inp.weight"},
        ),
        ("build_tiny_qwen3_5", "qwen35", [False, False], {"blk.0.ssm_conv1d.weight", "blk.1.attn_q.weight"}),
        (
            "build_tiny_qwen3_5_moe",
            "qwen35moe",
            [False, False],
            {"blk.0.ffn_up_exps.weight", "blk.0.ffn_gate_inp_shexp.weight"},
        ),
    ],
)
def test_qwen3_vl_moe_and_qwen3_5_get_the_qwen3vl_projector_beside_their_language_model(
    tmp_path, builder, architecture, deepstack, language_tensors
) -> None:
    from tools.kits import tiny_vlm_model

    language, projector, weights = _qwen_exported(getattr(tiny_vlm_model, builder)(tmp_path / "model"))
    assert _value(language, "general.architecture") == architecture
    assert language_tensors <= {tensor.name for tensor in language.tensors}
    assert not any(tensor.name.startswith(("v.", "mm.")) for tensor in language.tensors)
    assert _value(projector, "clip.projector_type") == "qwen3vl_merger"
    assert _value(projector, "clip.use_gelu") is True
    assert _value(projector, "clip.vision.spatial_merge_size") == 2
    assert _value(projector, "clip.vision.image_size") == 64
    # llama.cpp's converter writes the flags for every block, all false where the tower has no deepstack mergers.
    assert list(_value(projector, "clip.vision.is_deepstack_layers")) == deepstack
    names = {tensor.name for tensor in projector.tensors}
    assert names == _QWEN3VL_TOWER | _QWEN3VL_MERGER | (_DEEPSTACK_0 if any(deepstack) else set())
    fused = weights["vision_tower.blocks.1.attn.qkv.weight"]
    stored = {tensor.name: tensor for tensor in projector.tensors}["v.blk.1.attn_qkv.weight"]
    np.testing.assert_allclose(np.array(stored.data, dtype=np.float32), fused, atol=1e-3)


def test_a_qwen3_vl_moe_language_model_with_dense_layers_is_refused_by_name(tmp_path) -> None:
    from unsloth.mlx.gguf.export import check_request

    text = {"model_type": "qwen3_vl_moe_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    text = {**text, "head_dim": 16, "rope_scaling": rope, "num_experts": 4, "mlp_only_layers": [1]}
    with pytest.raises(NotImplementedError, match="qwen3_vl_moe_text with dense layers.*qwen3vlmoe gives every layer"):
        check_request({"model_type": "qwen3_vl_moe", "text_config": text}, tmp_path, ["f16"])


# An Idefics 3 tower block's tensors as llama.cpp's converter names them (SigLIP's, with biases).
_SIGLIP_BLOCK = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down", "ln1", "ln2")


@pytest.mark.parametrize("builder", ["build_tiny_idefics3", "build_tiny_smolvlm"])
def test_idefics3_and_smolvlm_get_the_idefics3_projector_beside_a_llama(tmp_path, builder) -> None:
    import gguf

    from tools.kits import tiny_vlm_model
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.merged import merged_weights

    model, processor = FastVisionModel.from_pretrained(str(getattr(tiny_vlm_model, builder)(tmp_path / "model")))
    paths = model.save_pretrained_gguf(str(tmp_path / "gguf"), processor, quantization_method="f16")
    language, projector = (gguf.GGUFReader(str(path)) for path in paths)
    assert _value(language, "general.architecture") == "llama"
    assert {"blk.1.attn_q.weight", "output.weight", "token_embd.weight"} <= {tensor.name for tensor in language.tensors}
    assert _value(projector, "clip.projector_type") == "idefics3"
    assert _value(projector, "clip.vision.projector.scale_factor") == 2
    assert _value(projector, "clip.use_gelu") is True
    assert _value(projector, "clip.vision.image_size") == 32  # one tile
    assert _value(projector, "clip.vision.preproc_image_size") == 64  # the processor's longest edge, cut in tiles
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    blocks = {
        f"v.blk.{block}.{part}.{kind}" for block in range(2) for part in _SIGLIP_BLOCK for kind in ("weight", "bias")
    }
    embeddings = {"v.patch_embd.weight", "v.patch_embd.bias", "v.position_embd.weight"}
    assert set(tensors) == blocks | embeddings | {"v.post_ln.weight", "v.post_ln.bias", "mm.model.fc.weight"}
    # llama.cpp's converter keeps the tower's embeddings in F32, the other matrices in the file's type.
    assert {tensors[name].tensor_type.name for name in embeddings} == {"F32"}
    assert tensors["mm.model.fc.weight"].tensor_type.name == "F16"
    patch = np.array(merged_weights(model)["vision_model.embeddings.patch_embedding.weight"])  # (out, h, w, in)
    stored = np.array(tensors["v.patch_embd.weight"].data).reshape(patch.shape[0], 3, 8, 8)
    np.testing.assert_array_equal(stored, patch.transpose(0, 3, 1, 2))


def test_a_smolvlm_tower_shaped_by_defaults_is_written_as_mlx_vlm_ran_it() -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    config = {"model_type": "smolvlm", "vision_config": {"model_type": "smolvlm_vision", "hidden_size": 768}}
    vision = projector_for(config).vision_settings(config)
    # mlx-vlm's SmolVLM defaults: 12 blocks for a 768-wide tower, a head per 64 dimensions, four times as wide FFN.
    assert (vision["num_hidden_layers"], vision["num_attention_heads"], vision["intermediate_size"]) == (12, 12, 3072)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling .* mlx-vlm's language model ignores"),
        ({"rope_traditional": True}, "rope_traditional=True: llama.cpp's llama rotates halves"),
        ({"head_dim": 32}, "head_dim=32: mlx-vlm's language model sizes its heads"),
    ],
)
def test_an_idefics3_language_model_llama_cpp_would_rotate_differently_is_refused_by_name(text, reason) -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    base = {"hidden_size": 64, "num_attention_heads": 4}
    with pytest.raises(NotImplementedError, match=reason):
        projector_for({"model_type": "idefics3", "vision_config": {}, "text_config": {**base, **text}})


# What llama.cpp's converter (`convert_hf_to_gguf.py --mmproj --outtype f16`, llama-cpp-python 0.3.36) wrote for the
# tiny GLM-4.1V's Hugging Face copy: each tensor's type; its keys and bytes equalled this exporter's file.
_GLM4V_TYPES = {
    **{f"v.blk.{block}.{part}.weight": "F16" for block in (0, 1) for part in ("attn_out", "attn_qkv", "ffn_down")},
    **{f"v.blk.{block}.{part}.weight": "F16" for block in (0, 1) for part in ("ffn_gate", "ffn_up")},
    **{f"v.blk.{block}.{part}.weight": "F32" for block in (0, 1) for part in ("ln1", "ln2")},
    **dict.fromkeys(["mm.patch_merger.weight", "mm.down.weight", "mm.gate.weight", "mm.up.weight"], "F16"),
    **dict.fromkeys(["mm.model.fc.weight", "v.patch_embd.weight", "v.patch_embd.weight.1"], "F16"),
    **dict.fromkeys(["mm.patch_merger.bias", "v.position_embd.weight", "mm.post_norm.bias"], "F32"),
    **dict.fromkeys(["mm.post_norm.weight", "v.patch_embd.bias", "v.norm_embd.weight", "v.post_ln.weight"], "F32"),
}


# GLM-OCR's tower: no learned positions or norm after the patch embedding; biases and per-head query and key norms.
_GLM_OCR_TYPES = {
    **{
        name: kind
        for name, kind in _GLM4V_TYPES.items()
        if name not in ("v.position_embd.weight", "v.norm_embd.weight")
    },
    **{f"v.blk.{block}.{part}.bias": "F32" for block in (0, 1) for part in ("attn_out", "attn_qkv", "ffn_down")},
    **{f"v.blk.{block}.{part}.bias": "F32" for block in (0, 1) for part in ("ffn_gate", "ffn_up")},
    **{f"v.blk.{block}.{part}.weight": "F32" for block in (0, 1) for part in ("attn_q_norm", "attn_k_norm")},
}


@pytest.mark.parametrize(
    ("builder", "architecture", "rotated", "types", "epsilon"),
    [
        ("build_tiny_glm4v", "glm4", 8, _GLM4V_TYPES, 1e-6),
        ("build_tiny_glm4v_moe", "glm4moe", 8, _GLM4V_TYPES, 1e-6),
        ("build_tiny_glm_ocr", "glm4", 16, _GLM_OCR_TYPES, 1e-5),
    ],
)
def test_the_glm_vision_families_get_their_language_model_with_rope_sections_and_llama_cpps_glm4v_projector(
    tmp_path, builder, architecture, rotated, types, epsilon
) -> None:
    from tools.kits import tiny_vlm_glm4v

    language, projector, weights = _qwen_exported(getattr(tiny_vlm_glm4v, builder)(tmp_path / "model"))
    assert _value(language, "general.architecture") == architecture
    sections = list(_value(language, f"{architecture}.rope.dimension_sections"))
    assert 2 * sum(sections) == rotated and sections[3] == 0
    assert _value(language, f"{architecture}.rope.dimension_count") == rotated  # of each 16-wide head
    assert {tensor.name: tensor.tensor_type.name for tensor in projector.tensors} == types
    assert _value(projector, "clip.projector_type") == "glm4v"
    assert _value(projector, "clip.use_silu") is True
    assert _value(projector, "clip.vision.attention.layer_norm_epsilon") == pytest.approx(epsilon)
    assert _value(projector, "clip.vision.image_size") == 48
    merger = {tensor.name: tensor for tensor in projector.tensors}["mm.patch_merger.weight"]
    downsample = weights["vision_tower.downsample.weight"]  # MLX's Conv2d: (out, h, w, in)
    stored = np.array(merger.data, dtype=np.float32).reshape(64, 32, 2, 2)
    np.testing.assert_allclose(stored, downsample.transpose(0, 3, 1, 2), atol=1e-3)


def test_glms_rotated_rows_are_reordered_from_adjacent_pairs_to_halves_and_the_rest_kept() -> None:
    from unsloth.mlx.gguf.converters.qwen_vl import pairs_as_halves

    rows = np.arange(12, dtype=np.float32).reshape(12, 1)  # two heads of six rows, four of them rotated
    assert pairs_as_halves(rows, 2, 6, 4).ravel().tolist() == [0, 2, 1, 3, 4, 5, 6, 8, 7, 9, 10, 11]


def test_llama_4_is_refused_by_name_as_llama_cpp_reads_its_image_tokens_transposed() -> None:
    from unsloth.mlx.gguf.projectors import projector_for
    from unsloth.mlx.gguf.projectors.coverage import exported_projectors, projector_verdict

    with pytest.raises(NotImplementedError, match="llama4 projector without the pixel shuffle's last transpose"):
        projector_for({"model_type": "llama4", "vision_config": {}, "text_config": {}})
    assert not projector_verdict("llama4").exported
    assert "llama4" not in exported_projectors() and "gemma3" in exported_projectors()


def test_the_llama4_projector_is_written_as_llama_cpps_converter_writes_it_with_the_norm_libmtmd_reads(
    tmp_path,
) -> None:
    """Kept ready for a llama.cpp that reads the file as MLX runs it: llama.cpp's converter's names, types and keys,
    but each block's norm before the feed-forward as `ln2` (that converter misnames it `attn_post_norm`)."""
    import json

    import gguf
    import mlx.core as mx

    from tools.kits.tiny_vlm_llama4 import build_tiny_llama4
    from unsloth.mlx.gguf.projectors import PROJECTORS
    from unsloth.mlx.gguf.projectors.mmproj import write_mmproj

    folder = build_tiny_llama4(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    weights = mx.load(str(folder / "model.safetensors"))
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text())
    write_mmproj(tmp_path / "mmproj.gguf", PROJECTORS["llama4"], config, weights, preprocessor, "f16")
    projector = gguf.GGUFReader(str(tmp_path / "mmproj.gguf"))
    assert _value(projector, "clip.projector_type") == "llama4"
    assert _value(projector, "clip.vision.projector.scale_factor") == 2
    assert _value(projector, "clip.use_gelu") is True
    assert _value(projector, "clip.vision.image_size") == 56 and _value(projector, "clip.vision.patch_size") == 14
    tensors = {tensor.name: tensor for tensor in projector.tensors}
    blocks = {
        f"v.blk.{block}.{part}.{kind}"
        for block in range(2)
        for part in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down", "ln1", "ln2")
        for kind in ("weight", "bias")
    }
    tower = {"v.patch_embd.weight", "v.class_embd", "v.position_embd.weight", "v.pre_ln.weight", "v.pre_ln.bias"}
    adapter = {"v.post_ln.weight", "v.post_ln.bias", "mm.model.mlp.1.weight", "mm.model.mlp.2.weight"}
    assert set(tensors) == blocks | tower | adapter | {"mm.model.fc.weight"}
    types = {name: tensor.tensor_type.name for name, tensor in tensors.items()}
    assert types["v.patch_embd.weight"] == "F16" and types["v.position_embd.weight"] == "F32"
    assert types["mm.model.fc.weight"] == "F16" and types["v.blk.1.ln2.bias"] == "F32"
    norm = np.array(weights["vision_model.model.layers.1.post_attention_layernorm.weight"])
    np.testing.assert_array_equal(np.array(tensors["v.blk.1.ln2.weight"].data), norm)


@pytest.mark.parametrize(
    ("vision", "reason"),
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu': mlx-vlm's tower runs SiLU"),
        ({"spatial_merge_size": 4}, "spatial_merge_size=4: llama.cpp's glm4v graph merges 2x2"),
        ({"temporal_patch_size": 1}, "temporal_patch_size=1: llama.cpp splits the patch embedding in 2 frames"),
    ],
)
def test_a_glm4v_tower_llama_cpp_would_run_differently_is_refused_by_name(vision, reason) -> None:
    from unsloth.mlx.gguf.projectors import projector_for

    with pytest.raises(NotImplementedError, match=reason):
        projector_for({"model_type": "glm4v", "vision_config": vision})


def test_a_glm4v_language_model_whose_sections_miss_part_of_its_rotated_dimensions_is_refused_by_name(tmp_path) -> None:
    from unsloth.mlx.gguf.export import check_request

    rope = {"rope_type": "default", "mrope_section": [2, 2, 2]}
    text = {"model_type": "glm4v_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1}
    with pytest.raises(NotImplementedError, match=r"mrope_section \[2, 2, 2\] covers 12 of its 8 rotary dimensions"):
        check_request({**text, "rope_scaling": rope, "partial_rotary_factor": 0.5}, tmp_path, ["f16"])


@pytest.mark.parametrize(
    ("vision", "reason"),
    [
        ({"rope_theta": 500000.0}, "vision rope_theta of 500000.0: llama.cpp's llama4 rotates by 10000.0"),
        ({"norm_eps": 1e-6}, "vision norm_eps of 1e-06: mlx-vlm's tower norms with 1e-05"),
        ({"hidden_act": "silu"}, "vision hidden_act='silu': llama.cpp's llama4 runs gelu"),
        ({"pixel_shuffle_ratio": 0.25}, "pixel_shuffle_ratio=0.25: mlx-vlm's processor writes the image tokens"),
    ],
)
def test_a_llama4_tower_llama_cpp_or_mlx_vlm_would_run_differently_is_refused_by_name(vision, reason) -> None:
    from unsloth.mlx.gguf.projectors import PROJECTORS

    with pytest.raises(NotImplementedError, match=reason):
        PROJECTORS["llama4"].refuse({"model_type": "llama4", "vision_config": vision})
