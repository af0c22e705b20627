"""Tiny in-memory models of every mlx_lm family whose experts are SwitchGLU / SwitchMLP stacks, for LoRA target tests.

`moe_families()` asks the installed mlx_lm which families those are (a module that imports `switch_layers`, itself or
through a module it imports), so a MoE family mlx_lm adds has no config here and shows up as a failing test row.
Each config is one shared tiny shape plus the keys that family's `ModelArgs` requires or needs to place experts in
its blocks; a family that wraps a text model (`text_config`) gets its inner family's config there.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path
from typing import Any, Dict, Tuple

SWITCH_MODULE = "switch_layers"
# The shared tiny shape, in Hugging Face key names; each ModelArgs keeps only the keys it declares.
BASE = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "expert_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "moe_topk": 2,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "rms_norm_eps": 1e-5,
    "layer_norm_eps": 1e-5,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "use_bias": False,
    "first_k_dense_replace": 0,
    "moe_layer_freq": 1,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 1.0,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "sliding_window": 32,
    "partial_rotary_factor": 1.0,
    "rope_scaling": None,
    "use_qk_norm": False,
}
_TWO_ATTENTION = {"layer_types": ["full_attention", "full_attention"]}
# Each family's keys beyond BASE: what its ModelArgs requires, or what puts experts in the first two blocks.
FAMILY_KEYS: Dict[str, Dict[str, Any]] = {
    "Klear": {},
    "afmoe": {**_TWO_ATTENTION, "num_dense_layers": 0, "mup_enabled": False},
    "bailing_moe": {},
    "bailing_moe_v3": {},
    "deepseek": {},
    "deepseek_v2": {"topk_method": "greedy", "rope_scaling": {"factor": 1.0, "original_max_position_embeddings": 256}},
    "deepseek_v3": {},
    "deepseek_v32": {},
    "deepseek_v41": {},
    "dots1": {},
    "ernie4_5_moe": {"moe_num_shared_experts": 1},
    "exaone_moe": {**_TWO_ATTENTION, "is_moe_layer": [True, True]},
    "glm4_moe": {},
    "glm4_moe_lite": {},
    "gpt_oss": {"layer_types": ["sliding_attention", "full_attention"]},
    "granitemoe": {
        "logits_scaling": 1.0,
        "attention_multiplier": 0.25,
        "embedding_multiplier": 1.0,
        "residual_multiplier": 1.0,
    },
    "hunyuan": {
        "num_shared_expert": 1,
        "use_mixed_mlp_moe": True,
        "use_cla": False,
        "cla_share_factor": 2,
        "rope_scaling": {"alpha": 1.0, "factor": 1.0, "type": "dynamic"},
    },
    "laguna": {},
    "lfm2_moe": {
        "use_expert_bias": False,
        "num_dense_layers": 0,
        "conv_bias": False,
        "conv_L_cache": 3,
        "layer_types": ["conv", "full_attention"],
    },
    "mellum": {**_TWO_ATTENTION, "rope_parameters": {"full_attention": {"rope_theta": 10000.0}}},
    "minimax": {"rotary_dim": 16},
    "mixtral": {},
    "olmoe": {},
    "phimoe": {},
    "qwen2_moe": {},
    "qwen3_moe": {},
    "solar_open": {},
    "granitemoehybrid": {
        "embedding_multiplier": 1.0,
        "attention_multiplier": 0.25,
        "logits_scaling": 1.0,
        "residual_multiplier": 1.0,
        "layer_types": ["mamba", "attention"],
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_proj_bias": False,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "mamba_conv_bias": True,
        "position_embedding_type": "rope",
    },
    "qwen3_next": {
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 2,
    },
    "jamba": {
        "attn_layer_offset": 1,
        "attn_layer_period": 2,
        "expert_layer_offset": 0,
        "expert_layer_period": 1,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_expand": 2,
    },
    "nemotron_h": {
        "mamba_num_heads": 8,
        "mamba_head_dim": 16,
        "mamba_proj_bias": False,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "n_groups": 1,
        "mlp_bias": False,
        "layer_norm_epsilon": 1e-5,
        "use_conv_bias": True,
        "hybrid_override_pattern": ["M", "E", "*", "E"],
        "moe_shared_expert_intermediate_size": 32,
        "time_step_limit": [0.0, 1e9],
    },
    "step3p5": {"num_attention_groups": 2, "moe_layers_enum": "0,1", "share_expert_dim": 32, "moe_top_k": 2},
    "mistral4": {
        "rope_parameters": {
            "rope_theta": 10000.0,
            "rope_type": "default",
            "llama_4_scaling_beta": 0.1,
            "original_max_position_embeddings": 256,
        }
    },
    "phixtral": {"num_vocab": 512, "model_dim": 64, "num_heads": 4, "rotary_dim": 8},
    "glm_moe_dsa": {
        "index_head_dim": 16,
        "index_n_heads": 2,
        "index_topk": 4,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    "qwen3_5": {
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "full_attention_interval": 2,
        "rope_parameters": {"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
    },
    "gemma4_text": {
        "enable_moe_block": True,
        "top_k_experts": 2,
        "global_head_dim": 16,
        "vocab_size_per_layer_input": 512,
        "hidden_size_per_layer_input": 8,
        "num_kv_shared_layers": 0,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    # Llama 4 keeps one expert per token and reads the fourth block's cache for its global mask.
    "llama4": {
        "num_experts_per_tok": 1,
        "num_hidden_layers": 4,
        "attention_chunk_size": 32,
        "interleave_moe_layer_step": 1,
        "intermediate_size_mlp": 128,
        "model_type": "llama4_text",
    },
    "kimi_linear": {
        "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4, "kda_layers": [1]},
        "model_max_length": 256,
        "num_experts_per_token": 2,
    },
    "bailing_moe_linear": {"layer_group_size": 2, "group_norm_size": 1},
    "bailing_hybrid": {"layer_group_size": 2, "group_norm_size": 1, "head_dim": 16},
    "mimo_v2_flash": {
        "hybrid_layer_pattern": [1, 0],
        "moe_layer_freq": [1, 1],
        "add_swa_attention_sink_bias": False,
        "add_full_attention_sink_bias": False,
        "sliding_window_size": 32,
        "layernorm_epsilon": 1e-5,
        "swa_rope_theta": 10000.0,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 2,
        "swa_head_dim": 16,
        "swa_v_head_dim": 16,
    },
    "longcat_flash": {
        "attention_method": "MLA",
        "zero_expert_type": "identity",
        "ffn_hidden_size": 128,
        "expert_ffn_hidden_size": 32,
        "zero_expert_num": 1,
        "mla_scale_q_lora": True,
        "mla_scale_kv_lora": True,
    },
    "longcat_flash_ngram": {
        "ffn_hidden_size": 128,
        "expert_ffn_hidden_size": 32,
        "zero_expert_num": 1,
        "mla_scale_q_lora": True,
        "mla_scale_kv_lora": True,
        "ngram_vocab_size_ratio": 2,
    },
    "kimi_k3": {
        "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4, "kda_layers": [1]},
        "num_experts_per_token": 2,
    },
    "minimax_m3_vl": {
        "dense_intermediate_size": 128,
        "mlp_layer_types": ["sparse", "sparse"],
        "layer_types": ["full_attention", "full_attention"],
        "rotary_dim": 8,
    },
    "muse_spark": {
        "post_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 10000.0},
        "layer_rope_theta": [10000.0, 10000.0],
        "layer_types": ["sliding_attention", "full_attention"],
        "final_logit_softcapping": 30.0,
        "output_multiplier": 1.0,
        "moe_hidden_size": 32,
        "num_shared_experts": 0,
        "mlp_layer_types": ["sparse", "sparse"],
    },
}
# Families that wrap another family's text model under `text_config`: the inner family's tiny config goes there.
WRAPPED = {
    "qwen3_vl_moe": "qwen3_moe",
    "kimi_vl": "deepseek_v3",
    "kimi_k25": "deepseek_v3",
    "mistral3": "mistral4",
    "qwen3_5_moe": "qwen3_5",
    "gemma4": "gemma4_text",
    "llama4": "llama4",
    "minimax_m3_vl": "minimax_m3_vl",
    "muse_spark": "muse_spark",
}


def _relative_imports(path: Path) -> set:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
    return found


@functools.lru_cache(maxsize=None)
def moe_families() -> Tuple[str, ...]:
    """Every `mlx_lm.models` module that builds switch-layer experts, read from the installed mlx_lm's source."""
    import mlx_lm.models

    folder = Path(mlx_lm.models.__file__).parent
    imports = {path.stem: _relative_imports(path) for path in folder.glob("*.py")}

    def reaches(name: str, seen: frozenset) -> bool:
        return SWITCH_MODULE in imports.get(name, ()) or any(
            reaches(other, seen | {name}) for other in imports.get(name, ()) if other not in seen
        )

    return tuple(sorted(name for name in imports if name != SWITCH_MODULE and reaches(name, frozenset())))


def _flat_config(family: str) -> Dict[str, Any]:
    if family not in FAMILY_KEYS:
        raise KeyError(f"no tiny config for mlx_lm's MoE family {family!r}: add its keys to FAMILY_KEYS in {__file__}")
    return {**BASE, "model_type": family, **FAMILY_KEYS[family]}


def moe_config(family: str) -> Dict[str, Any]:
    """The tiny config dict of `family`; KeyError naming this kit when the family has none yet."""
    if family in WRAPPED:
        return {"model_type": family, "vocab_size": BASE["vocab_size"], "text_config": _flat_config(WRAPPED[family])}
    return _flat_config(family)


def build_moe_model(family: str, seed: int = 0) -> Any:
    """An mlx_lm model of `family` built from its tiny config with a fixed seed, weights evaluated."""
    import mlx.core as mx

    module = importlib.import_module(f"mlx_lm.models.{family}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(moe_config(family)))
    mx.eval(model.parameters())
    return model


def write_moe_model(folder: Any, family: str, seed: int = 0, **overrides: Any) -> Path:
    """A loadable folder (config, random weights, tokenizer) of `family`'s tiny config with `overrides` applied."""
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

    return build_tiny_hybrid_model(folder, family, seed=seed, config={**moe_config(family), **overrides})
