# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""CSM's training rows and loss as transformers' `CsmForConditionalGeneration.forward` computes them with `labels`.

Each row from the notebook's processor (input_ids, labels, input_values, input_values_cutoffs) has its clips encoded
by the model's Mimi once; each position becomes a frame: a text token, a clip's codes, or the all-eos frame. The loss
is the backbone's first-codebook cross-entropy plus the depth decoder's over the other codebooks, both summed and
divided by the backbone's target count, as transformers' `Trainer` normalises it (`num_items_in_batch`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from unsloth_zoo.mlx.data import TokenizedRows

from ..training.collated import as_numpy, collator_inputs
from ..training.train_data import PreparedRows, TrainRows
from .csm import is_csm

IGNORED = -100
# The processor's label for an audio frame that trains the backbone only.
BACKBONE_ONLY = -101


class CsmRow(NamedTuple):
    ids: np.ndarray
    # (length, codebooks + 1): a frame's codes then its text token; `kept` says which of them are embedded.
    frames: np.ndarray
    kept: np.ndarray
    # (length, codebooks), -100 where nothing is learnt.
    labels: np.ndarray


def _clip_codes(codec: Any, values: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """The row's clips encoded one by one by Mimi, each cut to its own frames, end to end: (frames, codebooks)."""
    ends = [int(end) for end in cutoffs if end >= 0]
    clips = [values[..., start:end].reshape(-1) for start, end in zip([0, *ends[:-1]], ends)]
    return np.concatenate([codec.encode(clip)[: codec.frames(clip.size)] for clip in clips])


def prompt_frames(batch: Dict[str, Any], config: Any, codec: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One processed row's ids as frames: (frames, kept, the codes placed at each audio or audio-eos position)."""
    ids = as_numpy(batch["input_ids"])[0].astype(np.int64)
    books = config.num_codebooks
    frames = np.zeros((len(ids), books + 1), dtype=np.int64)
    kept = np.zeros_like(frames, dtype=bool)
    frames[:, books], kept[:, books] = ids, True
    audio = ids == config.audio_token_id
    if audio.any():
        codes = _clip_codes(codec, as_numpy(batch["input_values"])[0], as_numpy(batch["input_values_cutoffs"])[0])
        if len(codes) != int(audio.sum()):
            raise ValueError(
                f"a CSM row holds {int(audio.sum())} audio tokens for {len(codes)} Mimi frames of its clips: "
                "build the row with the model's own processor"
            )
        frames[audio, :books] = codes
    eos = ids == config.audio_eos_token_id
    frames[eos, :books] = config.codebook_eos_token_id
    kept[audio | eos] = ~np.eye(books + 1, dtype=bool)[books]
    return frames, kept, audio | eos


def kept_length(batch: Dict[str, Any], width: int) -> int:
    attention = as_numpy(batch["attention_mask"])[0].astype(bool) if "attention_mask" in batch else np.ones(width, bool)
    length = int(attention.sum())
    if not attention[:length].all():
        raise NotImplementedError(
            "a left-padded CSM row: transformers' CSM counts positions from the row's first token, padding included; "
            "pad the processor's text on the right (text_kwargs padding_side='right'), as the notebook does"
        )
    return length


def csm_row(batch: Dict[str, Any], config: Any, codec: Any) -> CsmRow:
    """One collated row as frames and codebook labels, its right padding dropped."""
    if "labels" not in batch:
        raise ValueError("a CSM row trains on its labels: call the processor with output_labels=True")
    ids = as_numpy(batch["input_ids"])[0].astype(np.int64)
    labels = as_numpy(batch["labels"])[0].astype(np.int64)
    length = kept_length(batch, len(ids))
    frames, kept, coded = prompt_frames(batch, config, codec)
    wide = np.repeat(labels[:, None], config.num_codebooks, axis=1)
    wide[coded] = frames[coded, : config.num_codebooks]
    wide[labels == BACKBONE_ONLY, 1:] = IGNORED
    return CsmRow(ids[:length], frames[:length], kept[:length], wide[:length])


def encode_csm_rows(collator: Any, dataset: Any, config: Any, model_config: Any, codec: Any) -> List[CsmRow]:
    return [csm_row(collator([row]), model_config, codec) for row in collator_inputs(dataset, config, raw=True)]


class CsmTrainRows(TrainRows):
    """Training rows with each row's frames and labels; remembers which rows the last batch read."""

    def __init__(self, source: TokenizedRows, rows: List[CsmRow]) -> None:
        super().__init__(source)
        self.csm_rows = rows
        self.last_read: List[int] = []
        self.set_masks([row.labels[:, 0] != IGNORED for row in rows])

    def take_read_masks(self, width: int) -> np.ndarray:
        self.last_read = list(self._read)
        return super().take_read_masks(width)

    def read_batch(self, width: int) -> Tuple[mx.array, mx.array, mx.array]:
        rows = [self.csm_rows[index] for index in self.last_read]
        books = rows[0].labels.shape[1]
        frames = np.zeros((len(rows), width, books + 1), dtype=np.int32)
        kept = np.zeros(frames.shape, dtype=bool)
        labels = np.full((len(rows), width, books), IGNORED, dtype=np.int32)
        for slot, row in enumerate(rows):
            size = min(width, len(row.ids))
            frames[slot, :size], kept[slot, :size], labels[slot, :size] = (
                row.frames[:size],
                row.kept[:size],
                row.labels[:size],
            )
        return mx.array(frames), mx.array(kept), mx.array(labels)


def backbone_states(model: Any, frames: mx.array, kept: mx.array, cache: Any = None) -> mx.array:
    """The backbone's normed hidden states for frames of codes and text tokens (the masked embeddings summed)."""
    embeds = model._embed_tokens(frames) * kept[..., None].astype(model.text_embeddings.weight.dtype)
    return model.backbone(embeds.sum(axis=2), cache=cache)


def depth_logits(model: Any, last_states: mx.array, codes: mx.array) -> mx.array:
    """The depth decoder's logits for codebooks 1.. from the backbone state before each frame and its earlier codes."""
    books = codes.shape[1] + 1
    offsets = mx.arange(books - 1) * model.args.audio_vocab_size
    inputs = mx.concatenate([last_states[:, None], model.audio_embeddings(codes + offsets)], axis=1)
    states = model.decoder(model.projection(inputs))
    return mx.einsum("nkd,kdv->nkv", states[:, 1:], model.audio_head[: books - 1])


def _summed_cross_entropy(logits: mx.array, targets: mx.array) -> Tuple[mx.array, mx.array]:
    keep = targets != IGNORED
    scores = nn.losses.cross_entropy(logits.astype(mx.float32), mx.where(keep, targets, 0), reduction="none")
    return (scores * keep).sum(), keep.sum()


def csm_loss(
    model: Any, frames: mx.array, kept: mx.array, labels: mx.array, rows: mx.array, positions: mx.array
) -> Tuple[mx.array, mx.array]:
    """(backbone's summed loss + depth decoder's summed loss) / backbone targets, and that count."""
    states = backbone_states(model, frames, kept)
    backbone, count = _summed_cross_entropy(model.codebook0_head(states)[:, :-1], labels[:, 1:, 0])
    total = backbone
    if rows.size:
        trained = labels[rows, positions]
        logits = depth_logits(model, states[rows, positions - 1], trained[:, :-1])
        total = total + _summed_cross_entropy(logits, trained[:, 1:])[0]
    return total / mx.maximum(count, 1), count


def depth_frames(labels: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(row, position) of each frame the depth decoder trains on: one whose later codebooks are not all ignored."""
    return np.nonzero(~(labels[:, :, 1:] == IGNORED).all(axis=-1))


def csm_step(model: Any, rows: CsmTrainRows) -> Callable[..., Any]:
    """The trainer's forward/backward for CSM batches."""
    loss_and_grad = nn.value_and_grad(model, csm_loss)

    def forward_backward(tokens: Any, lengths: Any) -> Tuple[Any, Any, Dict]:
        rows.take_read_masks(tokens.shape[1])
        frames, kept, labels = rows.read_batch(tokens.shape[1])
        at_row, at_position = depth_frames(np.array(labels))
        (loss, count), grads = loss_and_grad(
            model, frames, kept, labels, mx.array(at_row, dtype=mx.int32), mx.array(at_position, dtype=mx.int32)
        )
        return loss, count, grads

    return forward_backward


def _stacked(rows: List[Any]) -> Dict[str, Any]:
    """transformers' `default_data_collator`, which `Trainer` uses when a notebook passes none."""
    from transformers import default_data_collator

    return default_data_collator(rows)


class CsmCollator(NamedTuple):
    """The notebook's collator (or transformers' default) with the model whose Mimi encodes the rows' clips."""

    collate: Callable[[List[Any]], Any]
    model: Any

    def __call__(self, rows: List[Any]) -> Any:
        return self.collate(rows)


class CsmOwnRows:
    """A CSM model's rows: the notebook's processor output (or its collator's batches), trained by `csm_loss`."""

    def collator(self, model: Any, processor: Any, data_collator: Any, dataset: Any) -> Optional[Any]:
        if not is_csm(model):
            return None
        return CsmCollator(data_collator or _stacked, model)

    def encode(self, collator: Any, dataset: Any, eval_dataset: Any, config: Any) -> Tuple[PreparedRows, Any]:
        model = collator.model
        if eval_dataset is not None:
            raise NotImplementedError("evaluation of a CSM model is not built on MLX yet; leave eval_dataset out")
        rows = encode_csm_rows(collator, dataset, config, model.config, model.codec_model)
        return PreparedRows(TokenizedRows([row.ids for row in rows]), False, None), rows

    def train_rows(self, rows: Any, encoded: List[CsmRow]) -> TrainRows:
        return CsmTrainRows(rows, encoded)

    def step(self, model: Any, rows: Any) -> Callable[..., Any]:
        return csm_step(model, rows)
