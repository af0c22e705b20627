# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Load a llama-architecture GGUF written by `save_pretrained_gguf` back into an mlx_lm model, without torch.

`mx.load` reads the tensors and metadata; names go back to Hugging Face's and the rotary row permutation the
converter applied to the query and key projections is undone, so the model computes what the exported one did.

Run as `python -m unsloth.mlx.gguf.reload MODEL.gguf TOKENS.json OUT.safetensors` to reload in a fresh process and
write the reloaded weights plus the logits for the given token rows (what the round-trip test compares).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Dict, List, NamedTuple, Sequence

import mlx.core as mx

LOGITS_KEY = "__logits__"
_LAYER_PARTS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER_NAME = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_TOP_NAME = re.compile(r"^([a-z_]+)\.(weight|bias)$")


class ReloadedGGUF(NamedTuple):
    model: Any
    weights: Dict[str, mx.array]
    tokens: List[str]
    metadata: Dict[str, Any]


def hugging_face_name(gguf_name: str) -> str:
    match = _LAYER_NAME.match(gguf_name)
    if match and match.group(2) in _LAYER_PARTS:
        return f"model.layers.{match.group(1)}.{_LAYER_PARTS[match.group(2)]}.{match.group(3)}"
    match = _TOP_NAME.match(gguf_name)
    if match and match.group(1) in _TOP_LEVEL:
        return f"{_TOP_LEVEL[match.group(1)]}.{match.group(2)}"
    raise ValueError(f"no Hugging Face name known for the GGUF tensor {gguf_name!r}")


def undo_rotary_permutation(weight: mx.array, heads: int) -> mx.array:
    """Inverse of the converter's per-head reordering of query/key rows (pairs interleaved back into halves)."""
    rows = weight.shape[0]
    split = weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def _number(metadata: Dict[str, Any], key: str) -> Any:
    value = metadata[key]
    return value.item() if isinstance(value, mx.array) else value


def model_arguments(metadata: Dict[str, Any], weights: Dict[str, mx.array]) -> Dict[str, Any]:
    """mlx_lm llama arguments from the GGUF's `llama.*` metadata."""
    return {
        "model_type": "llama",
        "hidden_size": int(_number(metadata, "llama.embedding_length")),
        "num_hidden_layers": int(_number(metadata, "llama.block_count")),
        "intermediate_size": int(_number(metadata, "llama.feed_forward_length")),
        "num_attention_heads": int(_number(metadata, "llama.attention.head_count")),
        "num_key_value_heads": int(_number(metadata, "llama.attention.head_count_kv")),
        "rms_norm_eps": float(_number(metadata, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_number(metadata, "llama.rope.freq_base")),
        "max_position_embeddings": int(_number(metadata, "llama.context_length")),
        "vocab_size": int(weights["model.embed_tokens.weight"].shape[0]),
        "tie_word_embeddings": "lm_head.weight" not in weights,
    }


def load_gguf_model(path: str) -> ReloadedGGUF:
    from mlx_lm.models import llama

    raw, metadata = mx.load(str(path), return_metadata=True)
    if metadata.get("general.architecture") != "llama":
        raise NotImplementedError(
            f"only llama-architecture GGUF files reload here, not {metadata.get('general.architecture')!r}"
        )
    weights = {hugging_face_name(name): value for name, value in raw.items()}
    arguments = model_arguments(metadata, weights)
    for name in list(weights):
        if name.endswith("self_attn.q_proj.weight"):
            weights[name] = undo_rotary_permutation(weights[name], arguments["num_attention_heads"])
        elif name.endswith("self_attn.k_proj.weight"):
            weights[name] = undo_rotary_permutation(weights[name], arguments["num_key_value_heads"])
    model = llama.Model(llama.ModelArgs.from_dict(arguments))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return ReloadedGGUF(model, weights, list(metadata.get("tokenizer.ggml.tokens", [])), metadata)


def logits_for(model: Any, token_rows: Sequence[Sequence[int]]) -> mx.array:
    return model(mx.array(token_rows, dtype=mx.int32)).astype(mx.float32)


def main(argv: Sequence[str]) -> int:
    gguf_path, tokens_path, output_path = argv
    reloaded = load_gguf_model(gguf_path)
    token_rows = json.loads(open(tokens_path, encoding="utf-8").read())
    arrays = {**reloaded.weights, LOGITS_KEY: logits_for(reloaded.model, token_rows)}
    mx.save_safetensors(output_path, arrays, metadata={"tokens": json.dumps(reloaded.tokens)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
