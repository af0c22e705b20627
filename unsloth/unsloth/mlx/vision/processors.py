# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""mlx-vlm's processors made to answer as Hugging Face's do where the notebooks need it: a chat template on the
processor, text renders by default, unrendered conversations as the text, one flat image list where the processor
wants it, placeholder ids, audio given as a list of samples, a `save_pretrained` that skips what cannot be saved, the
tokenizer's special tokens and token-id lookups on the processor itself, and what a Hub repo's own processor and
model code offer beyond Hugging Face's (ERNIE 4.5 VL's `processor.eval()`, `model.add_image_preprocess`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional


def prepare_processor(processor: Any) -> Any:
    """An mlx-vlm processor made to answer as a Hugging Face one: a chat template, text renders, conversations."""
    # mlx-vlm 0.7.10's Gemma 3 processor leaves the chat template on its tokenizer only.
    if getattr(processor, "chat_template", None) is None:
        processor.chat_template = getattr(getattr(processor, "tokenizer", None), "chat_template", None)
    # Gemma 3n's processor renders through transformers' own method, which reads an audio list as a file too.
    if type(processor).apply_chat_template.__module__.startswith("mlx_vlm.") or hasattr(processor, "feature_extractor"):
        _render_as_text_by_default(processor)
    _answer_token_ids(processor)
    return accept_conversations(processor)


def prepare_auto_processors() -> None:
    """transformers' `AutoProcessor.from_pretrained` hands back mlx-vlm's class for a family mlx-vlm patched it for
    (the PaddleOCR-VL notebook loads its processor so); that one is prepared as `FastVisionModel`'s is. Wrapped again
    after each load, so it stays outside any patch mlx-vlm added meanwhile."""
    from transformers import AutoProcessor

    current = AutoProcessor.__dict__["from_pretrained"]
    if getattr(current.__func__, PREPARED_MARK, False):
        return

    def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        processor = current.__func__(cls, *args, **kwargs)
        return prepare_processor(processor) if type(processor).__module__.startswith("mlx_vlm.") else processor

    setattr(from_pretrained, PREPARED_MARK, True)
    AutoProcessor.from_pretrained = classmethod(from_pretrained)  # type: ignore[method-assign, assignment]


def _answer_token_ids(processor: Any) -> None:
    """A processor that names its image or video placeholder (`video_token`) answers its id too (`video_token_id`),
    as Hugging Face's do: mlx-vlm's Muse Glimmer and PaddleOCR-VL processors name some only."""
    tokenizer = getattr(processor, "tokenizer", None)
    for name in ("image_token", "video_token"):
        token = getattr(processor, name, None)
        if isinstance(token, str) and tokenizer is not None and getattr(processor, f"{name}_id", None) is None:
            setattr(processor, f"{name}_id", int(tokenizer.convert_tokens_to_ids(token)))


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(turn, dict) and "role" in turn for turn in value)


# What notebooks read from the processor that only its tokenizer holds: CUDA Unsloth copies the special tokens onto
# it; here each reads (and sets) the tokenizer's own, so a later `processor.pad_token_id = 0` reaches the tokenizer.
TOKENIZER_ANSWERS = (
    "bos_token",
    "bos_token_id",
    "eos_token",
    "eos_token_id",
    "pad_token",
    "pad_token_id",
    "convert_tokens_to_ids",
    "convert_ids_to_tokens",
)
# mlx-vlm's stand-ins for processors whose Hub repo ships them as its own code (auto_map): ERNIE 4.5 VL's has a torch
# module's `eval()` / `train()`, which its notebook calls; mlx-vlm's prepares images alike in either mode.
MODE_SWITCHING_PROCESSORS = ("Ernie4_5_VLProcessor",)


def _tokenizer_answer(name: str) -> property:
    def read(self: Any) -> Any:
        return getattr(self.tokenizer, name)

    def write(self: Any, value: Any) -> None:
        setattr(self.tokenizer, name, value)

    return property(read, write)


def _switch_mode(training: bool) -> Any:
    def switch(self: Any) -> Any:
        self.training = training
        return self

    return switch


def keep_image_preprocess(model: Any, processor: Any) -> None:
    """ERNIE 4.5 VL's `model.add_image_preprocess(processor)`: its repo's model normalises images with the
    processor's image processor; mlx-vlm's processor hands the model normalised images already, so it is kept only."""
    model.image_preprocess = processor.image_processor


# Model methods a Hub repo's own code offers and its notebook calls, by the mlx-vlm family standing in for it.
REPO_CODE_MODEL_METHODS = {"ernie4_5_moe_vl": {"add_image_preprocess": keep_image_preprocess}}


PREPARED_MARK = "__unsloth_mlx_prepared__"
# The subclass made for each processor class, so every processor of a family shares one.
_CONVERSING: Dict[type, type] = {}


def accept_conversations(processor: Any) -> Any:
    """`processor(images, conversation)` renders the conversation with the chat template first (with the
    generation prompt unless `add_generation_prompt=False`), as CUDA Unsloth's processors do: the vision GRPO
    notebooks pass their unrendered prompts so. A processor in `FLAT_IMAGE_PROCESSORS` given one list of images per
    text gets them as one flat list. Anything else reaches the processor unchanged."""
    base = type(processor)
    if base in _CONVERSING.values() or not hasattr(processor, "apply_chat_template"):
        return processor
    if base not in _CONVERSING:
        missing = [name for name in TOKENIZER_ANSWERS if not hasattr(processor, name)]
        _CONVERSING[base] = _conversing_class(base, missing if hasattr(processor, "tokenizer") else [])
    processor.__class__ = _CONVERSING[base]
    return processor


def _plain_processor(base: Any) -> Any:
    return base.__new__(base)  # its state follows, as pickle and deepcopy hand it over


# mlx-vlm processors that read one flat list of images across their texts and fail on the list per text that Hugging
# Face's processors also take (the Muse Glimmer notebooks pass `images=[[image]]`).
FLAT_IMAGE_PROCESSORS = ("Ernie4_5_VLProcessor", "MuseGlimmerProcessor")


def _flatten_image_groups(values: List[Any], kwargs: Dict[str, Any], position: Optional[int]) -> None:
    """A list of image lists, one per text, in the call's arguments made the one flat list across texts."""
    in_args = position is not None and position < len(values)
    images = values[position] if in_args else kwargs.get("images")  # type: ignore[index]
    if isinstance(images, (list, tuple)) and images and all(isinstance(group, (list, tuple)) for group in images):
        flat = [image for group in images for image in group]
        if in_args:
            values[position] = flat  # type: ignore[index]
        else:
            kwargs["images"] = flat


def _conversing_class(base: type, tokenizer_answers: List[str]) -> type:
    try:
        signature: Optional[inspect.Signature] = inspect.signature(base.__call__)
        names = list(signature.parameters)[1:]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        signature, names = None, []
    position = names.index("text") if "text" in names else None
    image_position = names.index("images") if "images" in names else None
    flat_images = base.__name__ in FLAT_IMAGE_PROCESSORS

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        add_generation_prompt = kwargs.pop("add_generation_prompt", True)
        values = list(args)
        in_args = position is not None and position < len(values)
        text: Any = values[position] if in_args else kwargs.get("text")  # type: ignore[index]
        if _is_conversation(text) or (isinstance(text, list) and text and all(map(_is_conversation, text))):
            conversations = [text] if _is_conversation(text) else text
            rendered = [
                self.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt)
                for turns in conversations
            ]
            text = rendered[0] if _is_conversation(text) else rendered
            if in_args:
                values[position] = text  # type: ignore[index]
            else:
                kwargs["text"] = text
        if flat_images:
            _flatten_image_groups(values, kwargs, image_position)
        try:
            return base.__call__(self, *values, **kwargs)
        except TypeError as error:
            # mlx-vlm's PaddleOCR-VL processor passes add_special_tokens=False to its tokenizer itself.
            if "'add_special_tokens'" not in str(error) or kwargs.pop("add_special_tokens", None) is not False:
                raise
            return base.__call__(self, *values, **kwargs)

    def __reduce_ex__(self: Any, protocol: Any) -> Any:
        # Pickled (datasets' fingerprints and workers, deepcopy) as the plain processor, whose class has a name.
        return _plain_processor, (base,), dict(self.__dict__)

    # mlx-vlm reads the processor's parameters to decide what to pass (Gemma 4's `audio`), so they stay visible.
    if signature is not None:
        __call__.__signature__ = signature  # type: ignore[attr-defined]

    def save_pretrained(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The notebooks' own `processor.save_pretrained(...)` cell, which mlx-vlm's unsaveable objects would break.
        with _set_aside_unsaveable(self):
            return base.save_pretrained(self, *args, **kwargs)  # type: ignore[attr-defined]

    attributes = {"__call__": __call__, "__reduce_ex__": __reduce_ex__, "__module__": base.__module__}
    attributes["save_pretrained"] = save_pretrained
    attributes.update({name: _tokenizer_answer(name) for name in tokenizer_answers})
    if base.__name__ in MODE_SWITCHING_PROCESSORS:
        attributes.update(eval=_switch_mode(False), train=_switch_mode(True))
    return type(base.__name__, (base,), {**attributes, "__qualname__": base.__qualname__})


def _render_as_text_by_default(processor: Any) -> None:
    """mlx-vlm's PaddleOCR-VL processor renders through its tokenizer, which tokenizes unless told not to; a
    Hugging Face processor returns the text, as notebooks expect. A tokenized dict (Gemma 4's, with its audio
    features) comes back as Hugging Face's BatchFeature, whose `.to("cuda")` the audio notebooks call."""
    render = processor.apply_chat_template

    def apply_chat_template(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("tokenize", False)
        if args:
            args = (_audio_as_arrays(args[0]), *args[1:])
        rendered = render(*args, **kwargs)
        if type(rendered) is dict:
            from transformers.feature_extraction_utils import BatchFeature

            return BatchFeature(data=rendered)
        return rendered

    processor.apply_chat_template = apply_chat_template


def _audio_as_arrays(conversation: Any) -> Any:
    """The conversation with each audio part's list of samples (as `datasets.map` stores it) made a numpy array:
    mlx-vlm reads anything but an array as a file, which needs mlx-audio."""
    import numpy as np

    if not isinstance(conversation, list):
        return conversation

    def part(value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") == "audio" and isinstance(value.get("audio"), list):
            return {**value, "audio": np.asarray(value["audio"], dtype=np.float32)}
        return value

    return [
        {**turn, "content": [part(item) for item in turn["content"]]}
        if isinstance(turn, dict) and isinstance(turn.get("content"), list)
        else turn
        for turn in conversation
    ]


def _unsaveable(processor: Any) -> Dict[str, Any]:
    """The objects mlx-vlm hangs on a processor that transformers' save cannot write: the streaming detokenizer (a
    SentencePiece one, ERNIE 4.5 VL's, cannot be deep-copied, which the save does to every attribute) and a model
    config object (Muse Glimmer's, which JSON cannot hold; its loader reads config.json again)."""
    return {
        name: value
        for name, value in vars(processor).items()
        if name == "detokenizer" or (dataclasses.is_dataclass(value) and not isinstance(value, type))
    }


@contextlib.contextmanager
def _set_aside_unsaveable(processor: Any) -> Iterator[None]:
    aside = _unsaveable(processor)
    for name in aside:
        del processor.__dict__[name]
    try:
        yield
    finally:
        processor.__dict__.update(aside)


def save_processor(processor: Any, folder: Path) -> None:
    """The processor's files in `folder`, without what `_unsaveable` names."""
    if not hasattr(processor, "save_pretrained"):
        return
    with _set_aside_unsaveable(processor):
        processor.save_pretrained(str(folder))
