# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`UnslothVisionDataCollator` on MLX: conversations with images or audio made into token rows, answer masks and
the processor's image and audio features.

Each row's `messages` (image parts hold a PIL image, or a local file path; audio parts a 16 kHz waveform, for a model
with an audio tower) are rendered with the processor's chat template and run through the processor once. With
`completion_only_loss` (the default) only the assistant turns count: a turn starts where the conversation before it,
rendered with the generation prompt, ends. With `train_on_responses_only` the text after each `response_part`, up to
the next `instruction_part`, counts instead. Image and audio placeholder tokens never count. Options the MLX trainer
cannot honour are refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .backend import AUDIO_FEATURES, audio_token_id, check_audio, check_images, image_token_id, process_conversation

# Keyword: the value(s) that mean "nothing asked for", and what to do instead.
REFUSED_OPTIONS: Dict[str, tuple] = {
    "force_match": ((None, True), "response markers are matched in the rendered text, never partly"),
    "num_proc": ((None,), "rows are encoded in-process, once, when the trainer is built"),
    "resize_dimension": ((None, 0), "use resize= with 'min', 'max', a side length or (width, height)"),
    "snap_to_patch_size": ((None, False), "the processor sizes images to its patches itself"),
    "ignore_index": ((None, -100), "the MLX trainer masks the loss with booleans, not a label value"),
    "return_tensors": ((None, "pt", "np", "mlx"), "batches are MLX arrays"),
    "last_response_only": ((None, False), "completion_only_loss trains every assistant answer"),
}
RESIZE_CHOICES = ("min", "max", None)
# Content parts a processor could read but training here does not, named in the refusal.
UNSUPPORTED_PARTS = {"video": "video frames"}
MEDIA_PARTS = ("image", "audio")


class EncodedRow(NamedTuple):
    ids: np.ndarray
    # True where the token is a training target.
    mask: np.ndarray
    # Each processor output other than the token ids and attention mask (pixel_values, image_grid_thw, ...).
    features: Dict[str, np.ndarray]


def per_token_features(lengths: List[int], features: List[Dict[str, np.ndarray]]) -> frozenset:
    """The names of the features holding a value per token, shaped (1, row length, ...) in every row (Gemma 4's
    `mm_token_type_ids`, Llama 3.2 Vision's `cross_attention_mask`)."""
    # Image and audio features (pixel_values, input_features, their masks) never count, even where their length matches.
    names = {name for name in features[0] if not name.startswith(("pixel", AUDIO_FEATURES))} if features else set()
    for length, row in zip(lengths, features):
        names = {name for name in names if name in row and row[name].shape[:2] == (1, length)}
    return frozenset(names)


def pad_tokens(value: np.ndarray, width: int) -> np.ndarray:
    """A per-token feature right-padded with zeros to `width` tokens, as the token ids are."""
    return np.pad(value, [(0, 0), (0, width - value.shape[1])] + [(0, 0)] * (value.ndim - 2))


def pad_frames(values: List[np.ndarray]) -> List[np.ndarray]:
    """Rows' audio features (mel frames, or their mask) right-padded with zeros, which the mask reads as padding, to
    the longest row's frames."""
    frames = max(value.shape[1] for value in values)
    return [pad_tokens(value, frames) for value in values]


def _quiet(value: Any, quiet: tuple) -> bool:
    return any(value is item or (type(value) is type(item) and value == item) for item in quiet)


def refuse_options(options: Dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(REFUSED_OPTIONS))
    if unknown:
        raise TypeError(f"UnslothVisionDataCollator got unexpected keyword argument(s): {', '.join(unknown)}")
    asked = [name for name, value in options.items() if not _quiet(value, REFUSED_OPTIONS[name][0])]
    if asked:
        hints = "; ".join(f"{name}={options[name]!r}: {REFUSED_OPTIONS[name][1]}" for name in asked)
        raise NotImplementedError(f"UnslothVisionDataCollator on MLX cannot honour {hints}")


def _check_resize(resize: Any) -> Any:
    if resize in RESIZE_CHOICES:
        return resize
    if isinstance(resize, int) and not isinstance(resize, bool) and resize > 0:
        return resize
    if (
        isinstance(resize, (tuple, list))
        and len(resize) == 2
        and all(isinstance(side, int) and side > 0 for side in resize)
    ):
        return tuple(resize)
    raise ValueError(f"resize={resize!r}: use 'min', 'max', None, a positive side length or (width, height)")


def _open_image(value: Any) -> Any:
    """A PIL image as it is; a local path opened (nothing is downloaded)."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, (str, Path)) and Path(value).is_file():
        return Image.open(value)
    if isinstance(value, dict) and value.get("bytes"):
        import io

        return Image.open(io.BytesIO(value["bytes"]))
    raise ValueError(
        f"an image part holds {type(value).__name__} {str(value)[:60]!r}: give a PIL image or a local file"
    )


def _waveform(value: Any, sampling_rate: int) -> np.ndarray:
    """An audio part's samples as a 1-D float32 array: an array or list of samples, or datasets' decoded
    {"array", "sampling_rate"} at the processor's rate (nothing is resampled or decoded from a file here)."""
    rate = sampling_rate
    if isinstance(value, dict) and "array" in value:
        rate = int(value.get("sampling_rate") or sampling_rate)
        value = value["array"]
    if rate != sampling_rate:
        raise ValueError(
            f"an audio part is sampled at {rate} Hz, but the processor reads {sampling_rate} Hz: cast the column with "
            f"datasets' Audio(sampling_rate={sampling_rate}) first"
        )
    samples = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if samples is None or samples.dtype.kind not in "iuf" or samples.ndim != 1 or not samples.size:
        raise ValueError(
            f"an audio part holds {type(value).__name__} {str(value)[:60]!r}: give its samples as a 1-D array "
            f"at {sampling_rate} Hz (datasets' Audio column decodes them)"
        )
    return samples.astype(np.float32)


class UnslothVisionDataCollator:
    """What a vision notebook passes as `data_collator`; the MLX trainer reads its processor and settings."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        max_seq_length: Optional[int] = None,
        formatting_func: Optional[Callable[[Any], Any]] = None,
        resize: Any = "min",
        ignore_index: int = -100,
        train_on_responses_only: bool = False,
        instruction_part: Optional[str] = None,
        response_part: Optional[str] = None,
        force_match: bool = True,
        num_proc: Optional[int] = None,
        completion_only_loss: bool = True,
        pad_to_multiple_of: Optional[int] = None,
        resize_dimension: Any = 0,
        snap_to_patch_size: bool = False,
        last_response_only: bool = False,
        **options: Any,
    ) -> None:
        # CUDA Unsloth's parameters in its order, so a positional call reads the same; those MLX cannot honour
        # are refused by name unless left at their defaults.
        refuse_options(
            {
                "ignore_index": ignore_index,
                "force_match": force_match,
                "num_proc": num_proc,
                "resize_dimension": resize_dimension,
                "snap_to_patch_size": snap_to_patch_size,
                "last_response_only": last_response_only,
                **options,
            }
        )
        if processor is None or not hasattr(processor, "apply_chat_template"):
            raise TypeError(
                "UnslothVisionDataCollator(model, processor): the second argument must be the processor "
                "FastVisionModel.from_pretrained returned"
            )
        self.model = model
        self.processor = processor
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)
        self.formatting_func = formatting_func
        self.resize = _check_resize(resize)
        self.image_size = None if self.resize in RESIZE_CHOICES else self.resize
        self.completion_only_loss = bool(completion_only_loss)
        if train_on_responses_only and not response_part:
            raise ValueError(
                "UnslothVisionDataCollator: train_on_responses_only=True needs response_part (the text that opens "
                "each answer, as the chat template writes it) and instruction_part (the text that opens each question)"
            )
        # (instruction_part or "", response_part) when the answers are found by their markers.
        self.markers: Optional[Tuple[str, str]] = (
            (str(instruction_part or ""), str(response_part)) if train_on_responses_only else None
        )
        self.pad_to_multiple_of = None if pad_to_multiple_of is None else int(pad_to_multiple_of)

    # ---- one row ----

    def messages(self, row: Any) -> List[Dict[str, Any]]:
        formatted = self.formatting_func(row) if self.formatting_func is not None else row
        if isinstance(formatted, dict):
            formatted = formatted.get("messages", formatted.get("conversations"))
        if not isinstance(formatted, list) or not formatted:
            raise ValueError(
                "UnslothVisionDataCollator needs each row to be {'messages': [...]} (or formatting_func to return "
                f"the messages); got {type(row).__name__} with {sorted(row) if isinstance(row, dict) else 'no keys'}"
            )
        return formatted

    def _images(self, messages: Sequence[Dict[str, Any]], row: Any) -> List[Any]:
        """Every image part in order; a part without its image takes the next one of the row's `images` column."""
        spare = list(row.get("images") or []) if isinstance(row, dict) else []
        found = []
        for message in messages:
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") in UNSUPPORTED_PARTS:
                    raise NotImplementedError(
                        f"UnslothVisionDataCollator on MLX got a {part['type']} part: it trains on images and audio "
                        f"only (mlx-vlm's {UNSUPPORTED_PARTS[part['type']]} are not wired into training here)"
                    )
                if isinstance(part, dict) and part.get("type") == "image":
                    check_images(self.model)
                    value = part.get("image", part.get("path", part.get("url")))
                    if value is None:
                        if not spare:
                            raise ValueError("an image part has no image, and the row's images column has none left")
                        value = spare.pop(0)
                    found.append(self._sized(_open_image(value)))
        return found

    def _audios(self, messages: Sequence[Dict[str, Any]]) -> List[np.ndarray]:
        """Every audio part's waveform in order, once the model is known to hear them."""
        parts = [
            part
            for message in messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if isinstance(part, dict) and part.get("type") == "audio"
        ]
        if not parts:
            return []
        check_audio(self.model)
        extractor = getattr(self.processor, "feature_extractor", None)
        if extractor is None:
            raise NotImplementedError(
                f"{type(self.processor).__name__} has no audio feature extractor, so audio parts cannot be encoded"
            )
        rate = int(getattr(extractor, "sampling_rate", 16000))
        return [_waveform(part.get("audio", part.get("array")), rate) for part in parts]

    def _sized(self, image: Any) -> Any:
        image = image.convert("RGB")
        if isinstance(self.resize, int):
            scale = self.resize / max(image.size)
            return image.resize((max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))))
        if isinstance(self.resize, tuple):
            return image.resize(self.resize)
        return image

    def _render(self, messages: Sequence[Dict[str, Any]], generation_prompt: bool) -> str:
        return str(
            self.processor.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)
        )

    def _length(
        self, messages: Sequence[Dict[str, Any]], images: List[Any], audios: List[Any], generation_prompt: bool
    ) -> int:
        text = self._render(messages, generation_prompt)
        taken_images, taken_audios = (self._count_parts(messages, kind) for kind in MEDIA_PARTS)
        return len(
            process_conversation(self.processor, text, images[:taken_images], audios[:taken_audios])["input_ids"]
        )

    @staticmethod
    def _count_parts(messages: Sequence[Dict[str, Any]], kind: str) -> int:
        return sum(
            1
            for message in messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if isinstance(part, dict) and part.get("type") == kind
        )

    def _prefix_tokens(self, text: str, images: List[Any], audios: List[Any]) -> int:
        """How many tokens `text`, the start of a rendered row, is with the images and audio its placeholders hold."""

        def held(placeholder_name: str, parts: List[Any]) -> List[Any]:
            placeholder = getattr(self.processor, placeholder_name, None)
            return parts[: text.count(placeholder)] if isinstance(placeholder, str) and placeholder else parts

        held_images, held_audios = held("image_token", images), held("audio_token", audios)
        return len(process_conversation(self.processor, text, held_images, held_audios)["input_ids"])

    def _marked_answers(
        self, markers: Tuple[str, str], text: str, images: List[Any], audios: List[Any], length: int
    ) -> np.ndarray:
        """True from after each response marker to the next instruction marker (or the row's end)."""
        instruction, response = markers
        mask = np.zeros(length, dtype=bool)
        start = text.find(response)
        if start < 0:
            raise ValueError(
                f"train_on_responses_only: response_part={response!r} is not in a row as the chat template renders "
                f"it ({text[:120]!r}...); give the text that opens each answer there"
            )
        while start >= 0:
            start += len(response)
            end = text.find(instruction, start) if instruction else -1
            end = len(text) if end < 0 else end
            first, last = (
                self._prefix_tokens(text[:start], images, audios),
                self._prefix_tokens(text[:end], images, audios),
            )
            mask[first:last] = True
            start = text.find(response, end)
        return mask

    def encode(self, row: Any) -> EncodedRow:
        """One row's token ids, its training mask and its image and audio features (numpy)."""
        messages = self.messages(row)
        images, audios = self._images(messages, row), self._audios(messages)
        processed = process_conversation(self.processor, self._render(messages, False), images, audios)
        ids = np.asarray(processed.pop("input_ids"), dtype=np.int32)
        processed.pop("attention_mask", None)
        mask = np.zeros(len(ids), dtype=bool)
        if self.markers is not None:
            mask = self._marked_answers(self.markers, self._render(messages, False), images, audios, len(ids))
        elif self.completion_only_loss:
            for index, message in enumerate(messages):
                if message.get("role") == "assistant":
                    start = self._length(messages[:index], images, audios, True)
                    end = self._length(messages[: index + 1], images, audios, False)
                    mask[start:end] = True
        else:
            mask[:] = True
        placeholders = [image_token_id(self.processor, self.model), audio_token_id(self.processor, self.model)]
        mask &= ~np.isin(ids, [token for token in placeholders if token is not None])
        if not mask.any():
            raise ValueError("a row has no assistant answer to train on (completion_only_loss needs an assistant turn)")
        if self.max_seq_length is not None and len(ids) > self.max_seq_length:
            cut = ids[self.max_seq_length :]
            hints = {"image": "make the images smaller (resize=)", "audio": "make the audio clips shorter"}
            for kind, token in zip(MEDIA_PARTS, placeholders):
                if token is not None and (cut == token).any():
                    raise ValueError(
                        f"a row is {len(ids)} tokens with its {kind}, longer than max_seq_length="
                        f"{self.max_seq_length}, and cutting it would cut the {kind}; raise max_seq_length or "
                        f"{hints[kind]}"
                    )
            ids, mask = ids[: self.max_seq_length], mask[: self.max_seq_length]
        return EncodedRow(ids, mask, {name: np.asarray(value) for name, value in processed.items()})

    def __call__(self, rows: Sequence[Any]) -> Dict[str, Any]:
        """A padded batch as Hugging Face collators return it: input_ids, attention_mask, labels (-100) and pixels."""
        encoded = [self.encode(row) for row in rows]
        width = max(len(row.ids) for row in encoded)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        pad = int(getattr(getattr(self.processor, "tokenizer", self.processor), "pad_token_id", None) or 0)
        ids = np.full((len(encoded), width), pad, dtype=np.int32)
        attention = np.zeros((len(encoded), width), dtype=np.int32)
        labels = np.full((len(encoded), width), -100, dtype=np.int32)
        for slot, row in enumerate(encoded):
            ids[slot, : len(row.ids)] = row.ids
            attention[slot, : len(row.ids)] = 1
            labels[slot, : len(row.ids)] = np.where(row.mask, row.ids, -100)
        batch: Dict[str, Any] = {"input_ids": ids, "attention_mask": attention, "labels": labels}
        per_token = per_token_features([len(row.ids) for row in encoded], [row.features for row in encoded])
        for name in dict.fromkeys(name for row in encoded for name in row.features):
            values = [row.features[name] for row in encoded if name in row.features]
            if name in per_token:
                values = [pad_tokens(value, width) for value in values]
            elif name.startswith(AUDIO_FEATURES):
                values = pad_frames(values)
            batch[name] = np.concatenate(values, axis=0)
        return batch
