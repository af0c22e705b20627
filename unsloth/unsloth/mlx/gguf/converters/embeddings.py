# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Sentence-embedding models as llama.cpp's embedding call reads them: BERT (all-MiniLM-L6-v2), XLM-RoBERTa
(BGE-M3), ModernBERT (gte-modernbert-base), Qwen3-Embedding and EmbeddingGemma with its two Dense layers.

The sentence pooling is not in `config.json` (sentence-transformers keeps it in `1_Pooling`), so the embedding
saver passes it in the config under `POOLING_KEY`, and the Dense layers' shapes under `DENSE_KEY`; the entries sit in
`EMBEDDING_CONVERTERS`, apart from the text models that share Qwen3's and Gemma 3's `model_type`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from ..families import POOLING_KEY, Family, UnsupportedModel
from .architectures import Piece
from .base import Converter, head_dim, rope_parameters
from .plain import Gemma3

# Our pooling names to llama.cpp's pooling types (gguf.PoolingType): mean, the first token, the last token.
POOLING_TYPES = {"mean": 1, "cls": 2, "lasttoken": 3}
# The folder's Dense layers, as the saver passes them: [{"in": .., "out": .., "bias": .., "activation": ..}, ...].
DENSE_KEY = "sentence_dense"
IDENTITY = "torch.nn.modules.linear.Identity"
# Weights llama.cpp's bert graph has no tensor for: the classifier's pooler and the position id buffer.
_UNUSED_PREFIXES = ("pooler.", "embeddings.position_ids")
# llama.cpp's bert and modern-bert graphs compute GELU; the tanh approximation and others are not what HF ran.
_ACTIVATIONS = {"gelu"}


class EmbeddingConverter(Converter):
    """The pooled states as the output: the pooling key, and no Dense layers unless the family has a slot."""

    vocabularies: Tuple[str, ...] = ("WordPiece",)  # tokenizer.json model types checked with llama.cpp for it
    dense_layers: Tuple[int, ...] = (0,)  # how many Dense layers llama.cpp's graph applies after pooling

    def refuse(self, config: Dict[str, Any]) -> None:
        if config.get(POOLING_KEY) not in POOLING_TYPES:
            raise UnsupportedModel(
                f"llama.cpp pools an embedding model by {', '.join(POOLING_TYPES)} only, "
                f"not {config.get(POOLING_KEY)!r}"
            )
        dense = config.get(DENSE_KEY) or []
        if len(dense) not in self.dense_layers:
            raise UnsupportedModel(
                f"llama.cpp's {self.family.architecture} file has room for {' or '.join(map(str, self.dense_layers))} "
                f"Dense layers after the pooling, not {len(dense)}"
            )

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        import gguf

        super().write_keys(writer, config, family)
        writer.add_pooling_type(gguf.PoolingType(POOLING_TYPES[config[POOLING_KEY]]))


class Bert(EmbeddingConverter):
    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise UnsupportedModel(
                f"GGUF export writes BERT with absolute positions only, not {config['position_embedding_type']!r}"
            )
        if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise UnsupportedModel(f"llama.cpp's bert graph computes GELU, not {config['hidden_act']!r}")

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        return {name: value for name, value in weights.items() if not name.startswith(_UNUSED_PREFIXES)}

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_causal_attention(False)
        writer.add_token_type_count(int(config.get("type_vocab_size") or 1))


class XLMRoberta(Bert):
    """llama.cpp's bert counts positions from 0, XLM-RoBERTa from past the padding id: the rows before are cut."""

    vocabularies = ("WordPiece", "Unigram")

    def _offset(self, config: Dict[str, Any]) -> int:
        return int(config.get("pad_token_id") or 0) + 1

    def prepare_weights(self, weights: Dict[str, np.ndarray], config: Dict[str, Any]) -> Dict[str, np.ndarray]:
        kept = super().prepare_weights(weights, config)
        name = "embeddings.position_embeddings.weight"
        return {**kept, name: kept[name][self._offset(config) :]}

    def write_hyperparameters(self, writer: Any, config: Dict[str, Any]) -> None:
        positions = int(config["max_position_embeddings"]) - self._offset(config)
        super().write_hyperparameters(writer, {**config, "max_position_embeddings": positions})


class ModernBert(EmbeddingConverter):
    """Bidirectional layers, every `global_attn_every_n_layers`-th global from the first, the rest within
    `local_attention // 2` on each side with a rope base of their own; LayerNorms without biases, a GeGLU MLP."""

    vocabularies = ("WordPiece", "BPE")  # gte-modernbert-base's byte-level BPE, llama.cpp's gpt2 vocabulary

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        for key in ("norm_bias", "attention_bias", "mlp_bias"):
            if config.get(key):
                raise UnsupportedModel(f"modernbert with {key}=True: llama.cpp's modern-bert graph reads no biases")
        if config.get("hidden_activation", "gelu") not in _ACTIVATIONS:  # GeGLU, llama.cpp's default for it
            raise UnsupportedModel(
                f"llama.cpp's modern-bert graph is checked here with GELU only, not {config['hidden_activation']!r}"
            )

    def rope_base(self, config: Dict[str, Any], local: bool = False) -> float:
        if local:
            value = config.get("local_rope_theta") or rope_parameters(config, "sliding_attention").get("rope_theta")
            return float(value or 10000.0)
        value = config.get("global_rope_theta") or rope_parameters(config).get("rope_theta")
        return float(value or 160000.0)

    def rope_scaling(self, config: Dict[str, Any]) -> Any:
        return None  # ModernBERT's rope_parameters hold only the two bases

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        writer.add_causal_attention(False)
        writer.add_layer_norm_eps(float(config.get("norm_eps") or 1e-5))
        writer.add_sliding_window(int(config.get("local_attention") or 128))
        writer.add_sliding_window_pattern(int(config.get("global_attn_every_n_layers") or 3))
        writer.add_rope_freq_base_swa(self.rope_base(config, local=True))


class Qwen3Embedding(EmbeddingConverter):
    """Qwen3-Embedding: the causal qwen3 file, pooled (by its last token, as the published models are)."""

    vocabularies = ("BPE",)


class GemmaEmbedding(EmbeddingConverter, Gemma3):
    """EmbeddingGemma: Gemma 3's layers attending both ways (sliding ones within half the window on each side), then
    the folder's two Dense layers as `dense_2` and `dense_3`, which llama.cpp applies after the pooling."""

    vocabularies = ("BPE",)
    dense_layers = (0, 2)

    def refuse(self, config: Dict[str, Any]) -> None:
        super().refuse(config)
        if not config.get("use_bidirectional_attention"):
            raise UnsupportedModel("llama.cpp's gemma-embedding attends both ways; this gemma3_text model is causal")
        if int(config.get("query_pre_attn_scalar") or head_dim(config)) != head_dim(config):
            raise UnsupportedModel(
                "llama.cpp's gemma-embedding scales attention by head_dim ** -0.5, not query_pre_attn_scalar "
                f"{config['query_pre_attn_scalar']!r} ** -0.5"
            )
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if config.get(key):
                raise UnsupportedModel(f"llama.cpp's gemma-embedding applies no {key}")
        hidden = int(config["hidden_size"])
        dense = config.get(DENSE_KEY) or []
        for index, layer in enumerate(dense):
            if layer["bias"] or layer["activation"] != IDENTITY:
                raise UnsupportedModel(
                    f"llama.cpp's gemma-embedding applies its Dense layers with no bias or activation; layer {index} "
                    f"has bias={layer['bias']} and {layer['activation']}"
                )
        if dense and (dense[0]["in"] != hidden or dense[-1]["out"] != hidden):
            raise UnsupportedModel(
                "llama.cpp's gemma-embedding needs its Dense layers to lead from and back to the hidden size"
            )

    def split_weight(self, name: str, data: np.ndarray, config: Dict[str, Any]) -> List[Piece]:
        if name.startswith("dense."):  # the saver's `dense.<i>.weight`: the folder's 2_Dense, 3_Dense
            return [(f"dense_{int(name.split('.')[1]) + 2}.weight", data, True)]
        return super().split_weight(name, data, config)

    def write_keys(self, writer: Any, config: Dict[str, Any], family: Family) -> None:
        super().write_keys(writer, config, family)
        for index, layer in enumerate(config.get(DENSE_KEY) or []):
            writer.add_dense_features_dims(f"dense_{index + 2}", int(layer["in"]), int(layer["out"]))


EMBEDDING_CONVERTERS = {
    "bert": Bert(Family("bert")),
    "xlm-roberta": XLMRoberta(Family("bert")),
    "modernbert": ModernBert(Family("modern-bert", key="MODERN_BERT")),
    "qwen3": Qwen3Embedding(Family("qwen3")),
    "gemma3_text": GemmaEmbedding(Family("gemma-embedding", norm_offset=1.0, key="GEMMA_EMBEDDING")),
}
