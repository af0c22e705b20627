"""What every tiny vision-language kit writes into its folder: the corpus tokenizer with the family's special tokens,
the family's mlx-vlm model with seeded random weights as safetensors, and its JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional


def _write_tokenizer(folder: Path, vocab_size: int, special: List[str], template: str, **named: str) -> Dict[str, int]:
    """The corpus BPE with `special` added as special tokens; returns each special token's id."""
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(vocab_size), pad_token="<|pad|>", eos_token="<|eos|>", **named
    )
    fast.add_special_tokens({"additional_special_tokens": special})
    fast.chat_template = template
    fast.save_pretrained(str(folder))
    return {token: int(fast.convert_tokens_to_ids(token)) for token in [*special, "<|pad|>", "<|eos|>"]} | {
        "__size__": len(fast)
    }


def _save_weights(folder: Path, model: object) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    weights = dict(tree_flatten(model.parameters()))  # type: ignore[attr-defined]
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})


def _model(family: Any, config: dict, seed: int) -> Any:
    """The family's mlx-vlm model with seeded random weights, its sub-configs made objects as mlx-vlm's loader does."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from mlx_vlm.utils import update_module_configs

    # The loader's own steps, so the weights written here have the shapes `mlx_vlm.load` expects.
    values = json.loads(json.dumps(config))
    for name in ("text_config", "vision_config", "audio_config"):
        values.setdefault(name, {})
    settings = family.ModelConfig.from_dict(values)
    settings = update_module_configs(settings, family, values, ["text", "vision", "perceiver", "projector", "audio"])
    mx.random.seed(seed)
    model = family.Model(settings)
    # Gemma 3's projector starts as all ones (a checkpoint fills it); left so, every image would look the same.
    flat = [(path, value) for path, value in tree_flatten(model.parameters()) if value.ndim == 2]
    constant = [(path, value) for path, value in flat if (value == value.reshape(-1)[0]).all().item()]
    model.update(
        tree_unflatten([(path, mx.random.normal(value.shape) / value.shape[0] ** 0.5) for path, value in constant])
    )
    return model


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def open_folder(folder: str | Path) -> Path:
    """`folder` as a path, created if missing: the first step of every builder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_model_folder(
    folder: Path,
    family: Any,
    config: dict,
    seed: int,
    *,
    preprocessor: Optional[dict] = None,
    processor: Optional[dict] = None,
) -> Path:
    """The config, the processor's files that are given, and the family's seeded weights, written into `folder`."""
    _write_json(folder / "config.json", config)
    if preprocessor is not None:
        _write_json(folder / "preprocessor_config.json", preprocessor)
    if processor is not None:
        _write_json(folder / "processor_config.json", processor)
    _save_weights(folder, _model(family, config, seed))
    return folder


def pixel_bounded_preprocessor(image_processor_type: str, processor_class: str, patch_size: int, pixels: int) -> dict:
    """Qwen 2 VL's image processor settings (which GLM-4V's reuses): 2 frames a patch, 2 x 2 merging, and an image
    held to exactly `pixels` so a square of the kit's side is read without resizing."""
    return {
        "image_processor_type": image_processor_type,
        "processor_class": processor_class,
        "patch_size": patch_size,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": pixels, "longest_edge": pixels},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    }
