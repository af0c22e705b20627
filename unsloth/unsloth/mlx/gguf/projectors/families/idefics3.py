# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Idefics 3's and SmolVLM's projector (llama.cpp's `idefics3`): a SigLIP tower over each tile of the image and its
global view, a pixel shuffle of `scale_factor` x `scale_factor` patches into one, and one linear projection; as
`SmolVLMModel` in llama.cpp's converter. The language model is a Llama under `language_model.`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..registry import ProjectorFamily, UnsupportedProjector, float32, register

_TOWER_PREFIXES = ("vision_model.", "connector.")
_LANGUAGE_PREFIX = "language_model."
_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# What mlx-vlm's Idefics 3 language model rotates by when its config names no base.
_MLX_VLM_ROPE_THETA = 1000000.0


def _mlx_vlm_vision(model_type: str, vision: Dict[str, Any]) -> Dict[str, Any]:
    """The tower's shape as mlx-vlm ran it: SmolVLM's configs may leave it to defaults its config class fills."""
    if all(key in vision for key in _SHAPE_KEYS):
        return dict(vision)
    import importlib

    settings = importlib.import_module(f"mlx_vlm.models.{model_type}.config").VisionConfig.from_dict(vision)
    return {**vision, **{key: getattr(settings, key) for key in _SHAPE_KEYS}}


@register("idefics3", "smolvlm")
class Idefics3Projector(ProjectorFamily):
    projector_type = "idefics3"
    # llama.cpp's converter keeps every embedding of the tower in F32 (`tensor_force_quant`).
    forced_types = {"v.patch_embd.weight": "F32", "v.position_embd.weight": "F32"}

    def refuse(self, config: Dict[str, Any]) -> None:
        """mlx-vlm's Idefics 3 language model rotates every head by a plain rope of `rope_theta`, whatever else its
        config says, and llama.cpp's llama would read the rest."""
        text, model_type = config.get("text_config") or {}, config.get("model_type")
        if text.get("rope_scaling"):
            raise UnsupportedProjector(
                f"{model_type} with rope_scaling {text['rope_scaling']}: mlx-vlm's language model ignores it, "
                "llama.cpp would scale"
            )
        if text.get("rope_traditional"):
            raise UnsupportedProjector(f"{model_type} with rope_traditional=True: llama.cpp's llama rotates halves")
        heads, width = text.get("num_attention_heads"), text.get("hidden_size")
        if text.get("head_dim") and heads and width and int(text["head_dim"]) != int(width) // int(heads):
            raise UnsupportedProjector(
                f"{model_type} with head_dim={text['head_dim']}: mlx-vlm's language model sizes its heads "
                "hidden_size / num_attention_heads"
            )

    def language(self, config: Dict[str, Any], weights: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        text = {"tie_word_embeddings": False, "rope_theta": _MLX_VLM_ROPE_THETA, **config["text_config"]}
        named = {}
        for name, value in weights.items():
            if name.startswith(_LANGUAGE_PREFIX):
                inner = name.removeprefix(_LANGUAGE_PREFIX)
                # mlx-vlm keeps the Llama's layers at the top of `language_model`; mlx-lm's under `model.`.
                named[inner if inner.startswith("lm_head.") else "model." + inner] = value
        return text, named

    def vision_settings(self, config: Dict[str, Any]) -> Dict[str, Any]:
        return _mlx_vlm_vision(str(config.get("model_type")), config["vision_config"])

    def tensors(self, config: Dict[str, Any], weights: Dict[str, Any], folder: Path) -> Dict[str, np.ndarray]:
        import gguf

        layers = int(self.vision_settings(config)["num_hidden_layers"])
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, layers)
        tensors = {}
        for name, value in weights.items():
            if not name.startswith(_TOWER_PREFIXES):
                continue
            data = float32(value)
            if name.endswith("patch_embedding.weight"):
                data = data.transpose(0, 3, 1, 2)  # MLX's (out, h, w, in) convolution to llama.cpp's (out, in, h, w)
            # Hugging Face's names, which llama.cpp's tensor map reads.
            target = names.get_name("model." + name, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise KeyError(f"no llama.cpp mmproj tensor for {config.get('model_type')}'s weight {name!r}")
            tensors[target] = data
        return tensors

    def write_keys(self, writer: Any, config: Dict[str, Any], preprocessor: Dict[str, Any]) -> None:
        vision = self.vision_settings(config)
        writer.add_vision_attention_layernorm_eps(float(vision.get("layer_norm_eps", 1e-5)))
        writer.add_vision_projector_scale_factor(int(config.get("scale_factor", 2)))
        writer.add_vision_use_gelu(True)
        # The size the processor resizes the longer side to before cutting tiles, as llama.cpp's slicing reads it.
        longest = (preprocessor.get("size") or {}).get("longest_edge", vision["image_size"])
        writer.add_vision_preproc_image_size(int(longest))
