# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Every call this package makes into `mlx-vlm`, in one place, because its API moves between minor releases.

Written against mlx-vlm 0.7.10 (the pin in `unsloth[mlx-vision]`): loading a model folder with its processor, the
causal forward pass the trainer differentiates, and token-by-token generation. Nothing else imports `mlx_vlm`;
`processors.py` makes the processors it loads answer as Hugging Face's do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import mlx.core as mx

from .processors import prepare_auto_processors, prepare_processor

TESTED_VERSION = "0.7.10"
INSTALL_HINT = 'pip install "unsloth[mlx-vision]" (mlx-vlm==0.7.10 and Pillow)'
_UNCHECKED = (
    "its training forward pass through mlx-vlm has not been checked here against a tiny model of its "
    "architecture, so a wrong loss would go unnoticed"
)
_NO_LANGUAGE_HEAD = "it is a detection, segmentation or geometry model with no language head to fine-tune"
_EMBEDDING = "it is a retrieval embedding model, trained with a contrastive loss rather than next-token prediction"
_DEEPSEEK_OCR_2 = (
    "its training forward pass through mlx-vlm has not been checked here: its encoders are built at full size "
    "whatever the config says (the SAM encoder: 94,979,328 parameters, and the 24-layer Qwen2 encoder after it: "
    "358,256,512 parameters), too slow for a test on two CPU cores (DeepSeek-OCR 1, with the SAM encoder alone, trains)"
)
# The vision families mlx-vlm ships that training refuses, each group with its reason; every other one trains.
REFUSED_GROUPS: Dict[str, Tuple[str, ...]] = {
    _NO_LANGUAGE_HEAD: ("moge3", "rfdetr", "rt_detr_v2", "sam3", "sam3_1", "sam3d_body", "sam3d_objects"),
    _EMBEDDING: ("colidefics3", "colqwen2_5", "qwen3_vl_embedding"),
    _DEEPSEEK_OCR_2: ("deepseekocr_2",),
    _UNCHECKED: (
        "aya_vision", "clef", "cohere_compass", "d1", "d1_omni", "deepseek_v4", "deepseek_v41", "deepseek_vl_v2",
        "dots_ocr", "falcon_ocr", "falcon_perception", "fastvlm",
        "florence2", "gemma4_unified", "glm4v", "glm4v_moe", "glm5_next", "glm_ocr", "got",
        "granite4_vision", "granite_vision", "hunyuan_vl", "idefics2", "idefics3", "indic_ocr", "inkling", "internvl",
        "internvl_chat", "jina_vlm", "kimi_k25", "kimi_k3", "kimi_vl", "llama4", "llava", "llava_bunny", "llava_next",
        "llava_onevision", "llmjpvl", "locateanything", "mage_vl", "mimo_v2", "minicpmo", "minicpmv4_6", "minicpmv4_7",
        "minimax_m3_vl", "molmo", "molmo2", "molmo_point", "moondream2", "moondream3", "multi_modality",
        "muse_spark", "nemotron_h_nano_omni", "nemotron_parse", "paligemma", "phi3_v", "phi4_siglip",
        "phi4mm", "plamo2vl", "prism_hadamard_qwen35", "qwen3_5_moe", "qwen3_omni_moe", "qwen3_vl_moe", "qwen4_exp",
        "smolvlm", "step3p7", "unlimited_ocr", "youtu_vl", "zaya1_vl",
    ),
}  # fmt: skip
REFUSED: Dict[str, str] = {family: reason for reason, group in REFUSED_GROUPS.items() for family in group}


class TowerCallLimit(NamedTuple):
    """The most rows, images or audio clips one call of a family's mlx-vlm forward pass keeps right (None: no limit),
    and why."""

    rows: Optional[int]
    images: Optional[int]
    reason: str
    audios: Optional[int] = None


# Families whose mlx-vlm forward pass is right for a few rows or images per call only: training runs a larger
# batch as several calls within the limit (`tower_call_groups`) and combines them as one batch.
TOWER_CALL_LIMITS: Dict[str, TowerCallLimit] = {
    "mllama": TowerCallLimit(
        rows=1,
        images=None,
        reason="mlx-vlm 0.7.10's Llama 3.2 Vision call keeps only the first row's images (it indexes its tower's "
        "output with [0])",
    ),
    "ernie4_5_moe_vl": TowerCallLimit(
        rows=None,
        images=3,
        reason="mlx-vlm 0.7.10's ERNIE 4.5 VL tower splits a call's patches into at most three attention blocks, so "
        "from the fourth image on images attend to each other",
    ),
    "deepseekocr": TowerCallLimit(
        rows=1,
        images=1,
        reason="mlx-vlm 0.7.10's DeepSeek-OCR call gives the n-th global view to the n-th row, so a row with no image "
        "or with two would shift every image after it",
    ),
    "gemma4": TowerCallLimit(
        rows=None,
        images=None,
        audios=1,
        reason="mlx-vlm 0.7.10's Gemma 4 call fills the audio placeholders from its audio tower's output flattened, "
        "padding frames included, so a second clip of a call would start on the first one's padding",
    ),
}


class ViewPairImages(NamedTuple):
    """A family whose mlx-vlm processor returns a row's images as a [local crops, global views] pair under `images`,
    with a per-token `images_seq_mask` saying where they go, and whose model call reads that pair as its pixel
    values (DeepSeek-OCR). Rows keep the global views as `pixel_values`; rows with local crops are refused."""

    # The processor's call keywords, given the processor.
    call_options: Callable[[Any], Dict[str, Any]]
    crops_refused: str

    def row_features(self, output: Dict[str, Any]) -> Dict[str, Any]:
        """The processor's output with its `images` pair made `pixel_values` (float32: numpy has no bfloat16)."""
        crops = output.get("images_spatial_crop")
        if crops is not None and bool((crops > 1).any()):
            raise NotImplementedError(f"training {self.crops_refused}")
        crops_and_views = output.pop("images")
        return {**output, "pixel_values": crops_and_views[1].astype(mx.float32)}

    @staticmethod
    def model_pixels(views: mx.array) -> List[mx.array]:
        """The pair the model call reads, its crops empty."""
        return [views[:0], views]


VIEW_PAIR_IMAGES: Dict[str, ViewPairImages] = {
    "deepseekocr": ViewPairImages(
        # Every token kept (mlx-vlm drops the last for inference); the global view at the checkpoint's own base
        # resolution (its `candidate_resolutions`, 1,024 pixels in the published one, mlx-vlm's default).
        call_options=lambda processor: {"inference_mode": False, "base_size": int(processor.image_size)},
        crops_refused="DeepSeek-OCR on MLX takes images of at most 640 pixels a side, each one global view: an image "
        "over 640 pixels is also cut into 640-pixel local views, a path of mlx-vlm's call not checked here against a "
        "tiny model; pass resize=640 to UnslothVisionDataCollator",
    ),
}
# Families whose audio tower's training forward pass is checked here against a tiny model; any other's audio is refused.
AUDIO_FAMILIES = ("gemma4", "gemma3n")
# Families that train on text and audio but whose image parts are refused, each with its reason (none today: Gemma
# 3n's full-size MobileNet-V5 tower trains, tests/mlx_api/test_vision_gemma3n.py).
IMAGES_REFUSED: Dict[str, str] = {}
# (config `model_type`, vision `model_type`) of checkpoints as the Hub ships them -> the mlx-vlm module that loads
# them: Pixtral's config says llava, whose module has no Pixtral tower.
CONFIG_ROUTES: Dict[Tuple[str, str], str] = {("llava", "pixtral"): "pixtral"}
# A config's first architecture -> the mlx-vlm module that loads it: the Hub's DeepSeek-OCR configs say
# deepseek_vl_v2, and mlx-vlm's own conversions rewrite them to the DeepSeek-OCR modules.
ARCHITECTURE_ROUTES: Dict[str, str] = {
    "DeepseekOCRForCausalLM": "deepseekocr",
    "DeepseekOCR2ForCausalLM": "deepseekocr_2",
}


def require_mlx_vlm() -> None:
    """ImportError naming the install command when mlx-vlm (or Pillow, which its processors need) is missing."""
    missing = []
    for module in ("mlx_vlm", "PIL"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(f"vision models on MLX need {' and '.join(missing)}: {INSTALL_HINT}")


def installed_version() -> Optional[str]:
    try:
        return importlib.metadata.version("mlx-vlm")
    except importlib.metadata.PackageNotFoundError:
        return None


def routed_model_type(config: Dict[str, Any]) -> Optional[str]:
    """The mlx-vlm module that loads a config whose own `model_type` names one that cannot; None when it can."""
    vision = config.get("vision_config") or {}
    key = (str(config.get("model_type", "")), str(vision.get("model_type", "")) if isinstance(vision, dict) else "")
    architectures = config.get("architectures") or [""]
    routed = CONFIG_ROUTES.get(key) or ARCHITECTURE_ROUTES.get(str(architectures[0]))
    return routed if routed != key[0] else None


@contextlib.contextmanager
def _routed_folder(folder: Path, model_type: Optional[str]) -> Iterator[Path]:
    """`folder` itself, or with a routed `model_type` a staging folder of links to its files whose config names the
    module that can load it."""
    if not model_type:
        yield folder
        return
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="unsloth-mlx-vlm-") as staging:
        for entry in folder.iterdir():
            if entry.name != "config.json":
                (Path(staging) / entry.name).symlink_to(entry.resolve())
        config["model_type"] = model_type
        (Path(staging) / "config.json").write_text(json.dumps(config), encoding="utf-8")
        yield Path(staging)


def _load_routed(folder: Path, model_type: str) -> Tuple[Any, Any]:
    from mlx_vlm.utils import load

    with _routed_folder(folder, model_type) as staging:
        # Eager load, so nothing reads the staging folder once it is gone.
        return load(str(staging), lazy=False)


def quantize_saved_model(folder: Path, bits: int, group_size: int) -> None:
    """The float model saved in `folder` quantized there as `mlx_vlm.convert -q` quantizes: the language model in
    affine groups, the vision and audio towers and projectors left in floating point, and the config saying so."""
    require_mlx_vlm()
    from mlx_vlm.quant_utils import quantize_model
    from mlx_vlm.utils import load_model, save_config, save_weights, skip_multimodal_module

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    with _routed_folder(folder, routed_model_type(config)) as source:
        model = load_model(source, lazy=False)
    own = getattr(model, "quant_predicate", None)

    def language_only(path: str, module: Any) -> Any:
        return not skip_multimodal_module(path) and (own(path, module) if own is not None else True)

    config.setdefault("vision_config", {})
    model, config = quantize_model(model, config, group_size, bits, mode="affine", quant_predicate=language_only)
    save_weights(folder, model, donate_weights=True)
    save_config(config, config_path=folder / "config.json")


def load_model_and_processor(folder: Path) -> Tuple[Any, Any]:
    """The mlx-vlm model and its processor from a local model folder."""
    require_mlx_vlm()
    from mlx_vlm.utils import load

    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    routed = routed_model_type(config)
    model, processor = _load_routed(folder, routed) if routed else load(str(folder))
    initialise_bare_modules(model)
    # Loading imported the family's module, which may have pointed AutoProcessor at mlx-vlm's class just now.
    prepare_auto_processors()
    return model, prepare_processor(processor)


def initialise_bare_modules(model: Any) -> Any:
    """Give the state `nn.Module.__init__` sets to sub-modules built without it: mlx-vlm 0.7.10's Gemma 4 audio
    attention makes its relative position embedding with `__new__`, so `model.freeze()` (LoRA) fails on it."""
    import mlx.nn as nn

    for _, module in model.named_modules():
        if "_no_grad" not in vars(module):
            training = vars(module).get("_training", True)
            nn.Module.__init__(module)
            module._training = training
    return model


def _module_family(value: Any) -> Optional[str]:
    """The mlx-vlm family whose module defines `value`'s class, or None."""
    module = type(value).__module__.split(".")
    return module[2] if module[:2] == ["mlx_vlm", "models"] and len(module) > 2 else None


def model_family(model: Any) -> str:
    """The mlx-vlm module that built the model (a routed config keeps its own `model_type`), else the config's."""
    return _module_family(model) or str(getattr(getattr(model, "config", None), "model_type", ""))


# Config fields naming the tokens a processor expands into image or video features.
_PLACEHOLDER_FIELDS = ("image_token_index", "image_token_id", "video_token_index", "video_token_id")


def placeholder_token_ids(model: Any) -> List[int]:
    """The image and video placeholder ids: a completion holding one could not be run again with its prompt's
    features (the model would find more placeholders than images), so sampling for training never draws them."""
    config = getattr(model, "config", None)
    found = {getattr(config, field, None) for field in _PLACEHOLDER_FIELDS}
    return sorted(int(value) for value in found if isinstance(value, int) and value >= 0)


@functools.lru_cache(maxsize=1)
def vision_families() -> Tuple[str, ...]:
    """Every mlx-vlm model family with a vision tower: a package under `mlx_vlm.models` holding a `vision` module or
    exporting a `VisionModel` (read as files: importing every family would take seconds)."""
    spec = importlib.util.find_spec("mlx_vlm.models")
    folders = [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec else []
    found = set()
    for package in (path for folder in folders for path in folder.iterdir() if (path / "__init__.py").is_file()):
        if (package / "vision.py").is_file() or "VisionModel" in (package / "__init__.py").read_text("utf-8"):
            found.add(package.name)
    return tuple(sorted(found))


def trainable_families() -> List[str]:
    """The vision families training accepts: mlx-vlm's, less those refused by name."""
    return [family for family in vision_families() if family not in REFUSED]


def check_family(model: Any) -> str:
    family = model_family(model)
    version = installed_version() or "absent"
    if family in REFUSED:
        raise NotImplementedError(
            f"vision fine-tuning on MLX does not train {family!r} (mlx-vlm {version} can load it): {REFUSED[family]}; "
            f"the families that train are {', '.join(trainable_families())}"
        )
    if family not in vision_families():
        raise NotImplementedError(
            f"vision fine-tuning on MLX trains mlx-vlm's vision families; {family!r} is not one in mlx-vlm {version}"
        )
    return family


# The features holding one row per image: ERNIE 4.5 VL's and Qwen's grids, DeepSeek-OCR's crop counts.
_PER_IMAGE_FEATURES = ("image_grid_thw", "images_spatial_crop")


def _images_in(features: Dict[str, Any]) -> int:
    """How many images a row's features hold: the rows of its per-image feature."""
    grids = [features[name] for name in _PER_IMAGE_FEATURES if features.get(name) is not None]
    return int(grids[0].shape[0]) if grids else 0


def _audios_in(features: Dict[str, Any]) -> int:
    """How many audio clips a row's features hold: the rows of its mel spectrograms (`input_features`)."""
    mels = features.get(AUDIO_FEATURES)
    return 0 if mels is None else int(mels.shape[0])


def check_audio(model: Any) -> None:
    """NotImplementedError naming why this model cannot train on audio, if it cannot."""
    family = model_family(model)
    if getattr(model, "audio_tower", None) is None:
        raise NotImplementedError(
            f"this {family} checkpoint has no audio tower (its config has no audio_config), so it cannot hear audio "
            "parts; train it on images and text, or load a checkpoint with an audio tower (Gemma 4 E2B, E4B)"
        )
    if family not in AUDIO_FAMILIES:
        raise NotImplementedError(
            f"audio training on MLX covers {', '.join(AUDIO_FAMILIES)}; {family}'s audio forward pass through mlx-vlm "
            "has not been checked here against a tiny model of its architecture"
        )


def check_images(model: Any) -> None:
    """NotImplementedError naming why this model cannot train on images, if it cannot."""
    family = model_family(model)
    if family in IMAGES_REFUSED:
        raise NotImplementedError(
            f"{family} on MLX trains on text and audio, not on image parts: {IMAGES_REFUSED[family]}; drop the image "
            "parts, or train a family whose images train (Gemma 3, Gemma 4)"
        )


def tower_call_groups(model: Any, rows: Sequence[Dict[str, Any]]) -> List[List[int]]:
    """The positions of a batch's rows (given by their features) in consecutive groups, each as many rows and images
    as one call of the family's forward pass keeps right; one group unless `TOWER_CALL_LIMITS` limits the family.
    A row that alone holds more images than one call keeps is refused by name."""
    family = model_family(model)
    limit = TOWER_CALL_LIMITS.get(family)
    if limit is None:
        return [list(range(len(rows)))]
    groups: List[List[int]] = []
    images_in_group = audios_in_group = 0
    for position, features in enumerate(rows):
        images, audios = _images_in(features), _audios_in(features)
        for count, most, kind in ((images, limit.images, "images"), (audios, limit.audios, "audio clips")):
            if most is not None and count > most:
                raise NotImplementedError(
                    f"training {family} on MLX takes at most {most} {kind} per row (a row of this batch has "
                    f"{count}): {limit.reason}; split that row's {kind} across rows"
                )
        row_full = limit.rows is not None and bool(groups) and len(groups[-1]) >= limit.rows
        images_full = limit.images is not None and images_in_group + images > limit.images
        audios_full = limit.audios is not None and audios_in_group + audios > limit.audios
        if not groups or row_full or images_full or audios_full:
            groups.append([])
            images_in_group = audios_in_group = 0
        groups[-1].append(position)
        images_in_group += images
        audios_in_group += audios
    return groups


def vision_tower(model: Any) -> Any:
    """The model's vision tower (PaddleOCR-VL calls it `visual`), or None for a text model."""
    tower = getattr(model, "vision_tower", None)
    return tower if tower is not None else getattr(model, "visual", None)


def language_model(model: Any) -> Any:
    return model.language_model


def effective_config(model: Any, source: Dict[str, Any]) -> Dict[str, Any]:
    """The checkpoint's config with each sub-config completed by the values mlx-vlm built the model with (its own
    defaults for the keys the file leaves out): what the model runs as, for an export to describe."""
    config = dict(source)
    built = getattr(model, "config", None)
    for name in ("text_config", "vision_config", "audio_config"):
        values = getattr(built, name, None)
        if values is not None and hasattr(values, "to_dict"):
            config[name] = {**(source.get(name) or {}), **values.to_dict()}
    return config


def causal_logits(model: Any, input_ids: mx.array, pixel_values: Optional[mx.array], extras: Dict[str, Any]) -> Any:
    """Logits of every position, each seeing only earlier tokens (and the images), for a right-padded batch: mlx-vlm's
    own model call, except where a family's call masks differently from training."""
    if pixel_values is None and AUDIO_FEATURES not in extras:
        output = model.language_model(input_ids)
        return getattr(output, "logits", output)
    family = model_family(model)
    if family == "gemma3":
        # Gemma 3's own call masks image and padding with a non-causal mask; training needs the causal one.
        features = model.get_input_embeddings(input_ids, pixel_values, mx.ones(input_ids.shape, dtype=mx.int32))
        output = model.language_model(input_ids, inputs_embeds=features.inputs_embeds, mask=None)
    elif family == "gemma3n":
        embeds, per_layer = gemma3n_embeddings(model, input_ids, pixel_values, extras)
        output = model.language_model(None, inputs_embeds=embeds, mask=None, per_layer_inputs=per_layer)
    else:
        output = model(input_ids, call_pixels(model, pixel_values), mask=None, **extras)
    return getattr(output, "logits", output)


def call_pixels(model: Any, pixel_values: Optional[mx.array]) -> Any:
    """The pixel values as the family's mlx-vlm call reads them: the rows' own, or a `VIEW_PAIR_IMAGES` pair."""
    pair = VIEW_PAIR_IMAGES.get(model_family(model))
    return pair.model_pixels(pixel_values) if pair is not None and pixel_values is not None else pixel_values


def gemma3n_embeddings(
    model: Any, input_ids: mx.array, pixel_values: Optional[mx.array], extras: Dict[str, Any]
) -> Tuple[mx.array, mx.array]:
    """Gemma 3n's input embeddings and per-layer inputs from mlx-vlm's own `get_input_embeddings`, with text tokens
    scaled by the square root of the width: mlx-vlm 0.7.10 leaves them unscaled there, while its language model (and
    Hugging Face's `Gemma3nTextScaledWordEmbedding`) scales them; image and audio tokens are not scaled in either."""
    features = model.get_input_embeddings(input_ids, pixel_values, **extras)
    embeds = features.inputs_embeds
    text = (input_ids < model.embed_vision.vocab_offset)[..., None]
    scale = mx.array(model.language_model.model.hidden_size**0.5, dtype=embeds.dtype)
    return mx.where(text, embeds * scale, embeds), features.per_layer_inputs


def generate_tokens(
    model: Any,
    input_ids: mx.array,
    pixel_values: Optional[mx.array],
    mask: Optional[mx.array],
    extras: Dict[str, Any],
    max_new_tokens: int,
    sampling: Dict[str, Any],
) -> Iterator[int]:
    """New token ids one by one (the caller stops at EOS), with a key-value cache."""
    if pixel_values is not None:
        check_images(model)
    if model_family(model) in ("gemma3", "gemma3n"):
        yield from _own_prefill_tokens(model, input_ids, pixel_values, extras, max_new_tokens, sampling)
        return
    from mlx_vlm.generate.ar import generate_step

    pixels = call_pixels(model, pixel_values)
    steps = generate_step(input_ids, model, pixels, mask, max_tokens=max_new_tokens, **sampling, **extras)
    for token, _ in steps:
        yield int(token.item() if hasattr(token, "item") else token)


def _own_prefill_tokens(
    model: Any,
    input_ids: mx.array,
    pixel_values: Optional[mx.array],
    extras: Dict[str, Any],
    max_new_tokens: int,
    sampling: Dict[str, Any],
) -> Iterator[int]:
    """Decoding whose prompt pass is the one training runs: causal (mlx-vlm's Gemma 3 prompt pass attends both ways),
    and for Gemma 3n with its text embeddings scaled (`gemma3n_embeddings`)."""
    from mlx_lm.sample_utils import make_sampler

    unsupported = sorted(set(sampling) - {"temperature", "top_p", "min_p", "top_k", "logit_bias"})
    if unsupported:
        raise NotImplementedError(
            f"generate for {model_family(model)} on MLX does not support {', '.join(unsupported)}"
        )
    sampler = make_sampler(
        temp=float(sampling.get("temperature") or 0.0),
        top_p=float(sampling.get("top_p") or 0.0),
        min_p=float(sampling.get("min_p") or 0.0),
        top_k=int(sampling.get("top_k") or 0),
    )
    language = model.language_model
    cache = language.make_cache()
    embeds: Any = None
    per_layer: Dict[str, Any] = {}
    if model_family(model) == "gemma3n":
        embeds, per_layer["per_layer_inputs"] = gemma3n_embeddings(model, input_ids, pixel_values, extras)
    elif pixel_values is not None:
        embeds = model.get_input_embeddings(input_ids, pixel_values, mx.ones(input_ids.shape, dtype=mx.int32))
        embeds = embeds.inputs_embeds
    logits = language(input_ids, inputs_embeds=embeds, mask=None, cache=cache, **per_layer).logits[:, -1, :]
    bias = sampling.get("logit_bias") or {}
    for _ in range(max_new_tokens):
        if bias:
            logits[:, list(bias)] = logits[:, list(bias)] + mx.array(list(bias.values()), dtype=logits.dtype)
        token = sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        value = int(token.item())
        yield value
        logits = language(mx.array([[value]]), cache=cache).logits[:, -1, :]


def process_conversation(processor: Any, text: str, images: List[Any], audios: Sequence[Any] = ()) -> Dict[str, Any]:
    """One rendered conversation through the processor: 1-D `input_ids`, and numpy image and audio features."""
    import numpy as np

    if not images and not audios:
        ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": list(ids)}
    # Gemma 3's processor reads a list of images per text; Qwen's a flat list across texts.
    given = ([images] if images and _nested_images(processor) else images) or None
    media: Dict[str, Any] = {"audio": list(audios)} if audios else {}
    pair = VIEW_PAIR_IMAGES.get(_module_family(processor) or "")
    if pair is not None:
        if len(images) > 1:
            raise NotImplementedError(
                f"training {type(processor).__name__} on MLX takes one image per row (a row has {len(images)}): its "
                "processor reads one image per text; split the images across rows"
            )
        media.update(pair.call_options(processor))
    try:
        output = processor(images=given, text=[text], add_special_tokens=False, **media)
    except TypeError as error:
        # mlx-vlm's PaddleOCR-VL processor passes add_special_tokens=False to its tokenizer itself.
        if "add_special_tokens" not in str(error):
            raise
        output = processor(images=given, text=[text], **media)
    if pair is not None:
        output = pair.row_features(dict(output))
    result = {name: np.asarray(value) for name, value in output.items()}
    result["input_ids"] = result["input_ids"][0].tolist()
    result.pop("attention_mask", None)
    result.pop("token_type_ids", None)
    return result


def _nested_images(processor: Any) -> bool:
    return type(processor).__name__.startswith("Gemma3")


# The processor's mel spectrograms, one row per audio clip (Gemma 4's), as its model call reads them.
AUDIO_FEATURES = "input_features"


def audio_token_id(processor: Any, model: Any = None) -> Optional[int]:
    """The id of the placeholder each audio clip's features replace, or None for a processor with none."""
    for owner in (processor, getattr(processor, "tokenizer", None), getattr(model, "config", None)):
        value = getattr(owner, "audio_token_id", None)
        if isinstance(value, int):
            return value
    return None


def image_token_id(processor: Any, model: Any = None) -> int:
    """The id of the placeholder each image's features replace."""
    for owner in (processor, getattr(processor, "tokenizer", None), getattr(model, "config", None)):
        for name in ("image_token_id", "image_token_index"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    raise ValueError(f"cannot tell the image token of {type(processor).__name__}")
