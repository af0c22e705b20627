# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`SentenceEmbeddingModel`: a backbone with ST's pooling, Dense and Normalize, answering ST's model methods.

`encode` batches as sentence-transformers does (longest rows first, order restored), adds a prompt by name, and
returns numpy by default, or a tensor (torch's when torch is importable, else an mx.array) on request.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .backbone import Backbone
from .folder import FolderSpec
from .pooling import normalize, pool

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
# The prompt names ST's encode_query / encode_document look for, in its order.
QUERY_PROMPTS = ("query",)
DOCUMENT_PROMPTS = ("document", "passage", "corpus")


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, mx.array):
        return np.array(value.astype(mx.float32))
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().float().numpy()
    return np.asarray(value, dtype=np.float32)


def _as_tensor(array: np.ndarray, like: Any = None) -> Any:
    """torch's tensor when torch is importable (what ST's callers index and sort), else an mx.array."""
    if like is not None and isinstance(like, mx.array):
        return mx.array(array)
    if importlib.util.find_spec("torch") is None:
        return mx.array(array)
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def similarity_scores(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    if name == "cosine":
        a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-8)
        b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-8)
        return a @ b.T
    if name == "dot":
        return a @ b.T
    if name == "euclidean":
        return -np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    if name == "manhattan":
        return -np.abs(a[:, None, :] - b[None, :, :]).sum(axis=-1)
    raise ValueError(f"similarity_fn_name {name!r} is not one of {', '.join(SIMILARITIES)}")


def padded_width(width: int, multiple: Optional[int]) -> int:
    """`width` rounded up to `multiple` (unchanged without one): a compiled step traces once per width bucket."""
    return width if not multiple else -(-width // multiple) * multiple


class EvaluationRecord:
    """What ST's evaluators write to `model.model_card_data`: each evaluator's latest metrics, kept for reading."""

    def __init__(self) -> None:
        self.eval_results: Dict[str, Dict[str, Any]] = {}

    def set_evaluation_metrics(self, evaluator: Any, metrics: Dict[str, Any], epoch: Any = 0, step: Any = 0) -> None:
        self.eval_results[type(evaluator).__name__] = {**metrics, "epoch": epoch, "step": step}


class SentenceEmbeddingModel(nn.Module):
    """What `FastSentenceTransformer.from_pretrained` returns: the MLX model behind an ST folder."""

    def __init__(self, backbone: Any, family: Backbone, spec: FolderSpec, dense: Sequence[nn.Module]) -> None:
        super().__init__()
        self.backbone = backbone
        self.dense = list(dense)
        # Plain attributes (not mlx containers), so they never count among the parameters.
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "prompts", dict(spec.prompts))
        object.__setattr__(self, "default_prompt_name", spec.default_prompt_name)
        object.__setattr__(self, "similarity_fn_name", spec.similarity_fn_name)
        object.__setattr__(self, "tokenizer", None)
        object.__setattr__(self, "max_seq_length", spec.max_seq_length)
        object.__setattr__(self, "config", getattr(backbone, "config", None))
        object.__setattr__(self, "name_or_path", "")
        object.__setattr__(self, "model_card_data", EvaluationRecord())

    @property
    def layers(self) -> List[Any]:
        """The backbone's blocks, where LoRA goes."""
        found: Any = self.backbone
        for part in self.family.blocks.split("."):
            found = getattr(found, part)
        return found

    def __call__(
        self, input_ids: mx.array, attention_mask: mx.array, pooling_mask: Optional[mx.array] = None
    ) -> mx.array:
        """Sentence embeddings for a padded batch; `pooling_mask` drops prompt tokens when include_prompt is off."""
        states = self.family.token_states(self.backbone, input_ids, attention_mask)
        vectors = pool(states, attention_mask if pooling_mask is None else pooling_mask, self.spec.pooling)
        for layer in self.dense:
            vectors = layer(vectors)
        return normalize(vectors) if self.spec.normalize else vectors

    # ---- ST's methods ----

    def get_sentence_embedding_dimension(self) -> int:
        if self.dense:
            return int(self.dense[-1].linear.weight.shape[0])
        return int(self.config.hidden_size) * len(self.spec.pooling)

    def get_max_seq_length(self) -> Optional[int]:
        return self.max_seq_length

    def tokenize(self, texts: Sequence[str]) -> Dict[str, mx.array]:
        texts = [text.lower() for text in texts] if self.spec.do_lower_case else list(texts)
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_seq_length, return_tensors="np"
        )
        return {"input_ids": mx.array(encoded["input_ids"]), "attention_mask": mx.array(encoded["attention_mask"])}

    def _prompt(self, prompt_name: Optional[str], prompt: Optional[str]) -> str:
        if prompt is not None:
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"Prompt name {name!r} not found in the configured prompts ({sorted(self.prompts)})")
        return self.prompts[name]

    def _pooling_mask(self, prompt: str, attention_mask: np.ndarray) -> Optional[mx.array]:
        if self.spec.include_prompt or not prompt:
            return None
        # ST counts the prompt's tokens without the end token and masks that many from the start.
        length = len(self.tokenizer(prompt, add_special_tokens=True)["input_ids"]) - 1
        mask = np.array(attention_mask)
        mask[:, :length] = 0
        return mx.array(mask)

    def token_rows(self, texts: Sequence[str], prompt: str = "") -> List[List[int]]:
        """Each text's ids as `tokenize` makes them (prompt first, lower-cased if the folder asks, truncated), unpadded."""
        texts = [prompt + text for text in texts]
        if self.spec.do_lower_case:
            texts = [text.lower() for text in texts]
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_seq_length)
        return [list(ids) for ids in encoded["input_ids"]]

    def token_batch(
        self, rows: Sequence[Sequence[int]], prompt: str = "", multiple: Optional[int] = None
    ) -> Tuple[mx.array, ...]:
        """`token_rows` padded as the tokenizer pads (its side and pad id), to a multiple of `multiple` when given:
        the ids, mask and pooling mask to embed."""
        longest = max(len(row) for row in rows)
        # Rounding up never pads past max_seq_length, which no row exceeds.
        width = max(longest, min(padded_width(longest, multiple), self.max_seq_length or longest))
        ids = np.full((len(rows), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        for position, row in enumerate(rows):
            place = slice(width - len(row), width) if left else slice(0, len(row))
            ids[position, place], mask[position, place] = row, 1
        pooling = self._pooling_mask(prompt, mask)
        return (mx.array(ids), mx.array(mask)) if pooling is None else (mx.array(ids), mx.array(mask), pooling)

    def embed(self, texts: Sequence[str], prompt: str = "") -> mx.array:
        """One padded batch through the model (gradients flow; used by the losses)."""
        batch = self.tokenize([prompt + text for text in texts])
        pooling = self._pooling_mask(prompt, np.array(batch["attention_mask"]))
        return self(batch["input_ids"], batch["attention_mask"], pooling)

    def encode(
        self,
        sentences: Union[str, Sequence[str]],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        output_value: Optional[str] = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: Any = None,
        normalize_embeddings: bool = False,
        truncate_dim: Optional[int] = None,
        **kwargs: Any,
    ) -> Any:
        """ST's `encode`: embeddings of one sentence (1-D) or a list (2-D), numpy unless a tensor is asked for."""
        if output_value != "sentence_embedding":
            raise NotImplementedError(f"encode(output_value={output_value!r}): only 'sentence_embedding' runs on MLX")
        if precision != "float32":
            raise NotImplementedError(f"encode(precision={precision!r}): only float32 embeddings run on MLX")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        text_prompt = self._prompt(prompt_name, prompt)
        order = np.argsort([-len(text) for text in texts], kind="stable")
        was_training = self.training
        self.eval()
        chunks = []
        for start in range(0, len(texts), batch_size):
            vectors = self.embed([texts[i] for i in order[start : start + batch_size]], text_prompt)
            if truncate_dim is not None:
                vectors = vectors[:, :truncate_dim]
            if normalize_embeddings:
                vectors = normalize(vectors)
            chunks.append(_as_numpy(vectors))
        self.train(was_training)
        dim = truncate_dim or self.get_sentence_embedding_dimension()
        stacked = np.concatenate(chunks) if chunks else np.zeros((0, dim), np.float32)
        result = np.empty_like(stacked)
        result[order] = stacked
        if single:
            result = result[0]
        if convert_to_tensor:
            return _as_tensor(result)
        return result if convert_to_numpy else list(result)

    def _named_prompt(self, names: Sequence[str], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        if kwargs.get("prompt_name") is None and kwargs.get("prompt") is None:
            kwargs["prompt_name"] = next((name for name in names if name in self.prompts), None)
        return kwargs

    def encode_query(self, sentences: Union[str, Sequence[str]], **kwargs: Any) -> Any:
        """ST's `encode_query`: `encode` with the folder's query prompt, when it has one."""
        return self.encode(sentences, **self._named_prompt(QUERY_PROMPTS, kwargs))

    def encode_document(self, sentences: Union[str, Sequence[str]], **kwargs: Any) -> Any:
        """ST's `encode_document`: `encode` with the folder's document (passage, corpus) prompt, when it has one."""
        return self.encode(sentences, **self._named_prompt(DOCUMENT_PROMPTS, kwargs))

    def similarity(self, a: Any, b: Any) -> Any:
        """ST's `similarity` under the folder's `similarity_fn_name`, as a tensor like its inputs."""
        scores = similarity_scores(_as_numpy(a), _as_numpy(b), self.similarity_fn_name)
        return _as_tensor(scores.astype(np.float32), like=a)

    def similarity_pairwise(self, a: Any, b: Any) -> Any:
        a_np, b_np = np.atleast_2d(_as_numpy(a)), np.atleast_2d(_as_numpy(b))
        scores = np.array([similarity_scores(x, y, self.similarity_fn_name)[0, 0] for x, y in zip(a_np, b_np)])
        return _as_tensor(scores.astype(np.float32), like=a)

    def source_folder(self) -> Path:
        return Path(self.name_or_path)
