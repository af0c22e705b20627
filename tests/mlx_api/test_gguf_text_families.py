"""The text families issue 46 added to GGUF export refuse, by name, each setting llama.cpp's graph would not run as
mlx_lm does; the kit's own config of each (`tools/kits/tiny_gguf_text_families.py`, checked against llama.cpp in
`with_llama_cpp/test_gguf_untrained_families_llama_cpp.py`) is accepted."""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_text_families import TEXT_FAMILIES


def _text_config(name: str) -> dict:
    from unsloth.mlx.gguf.families import unwrap_text_model

    return unwrap_text_model(TEXT_FAMILIES[name]())[0]


@pytest.mark.parametrize("name", list(TEXT_FAMILIES))
def test_each_new_family_kit_config_is_exported(name):
    from unsloth.mlx.gguf.convert import family_for

    assert family_for(_text_config(name)).architecture


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("openelm", {"share_input_output_layers": False}, "always uses the embedding as its head"),
        ("openelm", {"normalize_qk_projections": False}, "llama.cpp's openelm always norms them"),
        ("dbrx", {"attn_config": {"kv_n_heads": 2, "clip_qkv": None, "rope_theta": 1e4}}, "dbrx without clip_qkv"),
        ("minicpm3", {"attention_bias": True}, "minicpm3 with attention_bias=True"),
        ("minicpm3", {"rms_norm_eps": 1e-6}, "mlx_lm norms its query and latent with 1e-5"),
        ("exaone_moe", {"layer_types": ["full_attention"] * 3}, "exaone_moe without sliding layers"),
        ("exaone_moe", {"is_moe_layer": [False, True, False]}, "dense layers after an expert layer"),
        ("exaone_moe", {"num_shared_experts": 0}, "exaone_moe without a shared expert"),
        ("exaone_moe", {"n_group": 2, "topk_group": 1}, "exaone_moe choosing experts within groups"),
        ("mimo_v2_flash", {"swa_head_dim": 64}, "mimo_v2_flash with swa_head_dim apart from head_dim"),
        ("mimo_v2_flash", {"n_shared_experts": 1}, "mimo_v2_flash with shared experts"),
        ("mimo_v2_flash", {"norm_topk_prob": False}, "llama.cpp's mimo2 always renormalizes"),
        ("mimo_v2_flash", {"routed_scaling_factor": 2.0}, "never scales the experts' weights"),
        ("apertus", {"mlp_bias": True}, "apertus with mlp_bias=True"),
        ("mamba2", {"use_bias": True}, "mamba2 with use_bias=True"),
        ("mamba2", {"n_groups": 2}, "mamba2 with n_groups > 1"),
        ("mamba2", {"time_step_limit": [0.001, 100.0]}, "llama.cpp's scan never clips the step"),
        ("mamba2", {"layer_norm_epsilon": 1e-6}, "mamba2 with layer_norm_epsilon 1e-06"),
        ("jamba", {"mamba_expand": 4}, "jamba with mamba_expand other than 2"),
        ("jamba", {"mamba_proj_bias": True}, "jamba with mamba_proj_bias=True"),
        ("jamba", {"num_experts": 4}, "jamba choosing some of its experts"),
        ("qwen", {"no_bias": False}, "qwen with no_bias=False"),
        ("qwen", {"kv_channels": 32}, "qwen with kv_channels x heads != hidden_size"),
        ("plamo", {"num_attention_heads": 6}, "plamo with 6 heads not a multiple of n_shared_head 4"),
        ("plamo3", {"linear_type": "fp8"}, "plamo3 with linear_type other than normal"),
        ("afmoe", {"layer_types": ["sliding_attention", "full_attention"] * 2}, "other than three of every four"),
        ("afmoe", {"mup_enabled": False}, "afmoe with mup_enabled=False"),
        ("afmoe", {"score_func": "softmax"}, "afmoe with score_func other than sigmoid"),
        ("step3p5", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "step3p5 with rope_scaling"),
        ("step3p5", {"rope_theta": [1e6, 5e4, 1e4, 5e4]}, "rope_theta varying across sliding layers"),
        ("kimi_linear", {"num_attention_heads": 8}, "num_heads apart from num_attention_heads"),
        ("kimi_linear", {"num_shared_experts": 0}, "kimi_linear without routed and shared experts"),
        ("kimi_linear", {"moe_layer_freq": 2}, "kimi_linear with moe_layer_freq other than 1"),
        ("kimi_linear", {"moe_renormalize": False}, "always renormalizes them"),
        ("kimi_linear", {"num_expert_group": 2, "topk_group": 1}, "kimi_linear choosing experts within groups"),
        ("plamo2", {"mamba_enabled": False}, "stops on GGML_ASSERT\\(buffer\\)"),
        ("plamo2", {"rms_norm_eps": 1e-5}, "mlx_lm norms queries and keys with 1e-6"),
        ("step3p5", {"partial_rotary_factors": [0.5, 1.0, 0.5, 1.0]}, "partial_rotary_factors varying across sliding"),
    ],
)
def test_a_setting_a_new_family_cannot_honour_is_refused_by_name(name, change, message):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    with pytest.raises(UnsupportedModel, match=message):
        family_for({**_text_config(name), **change})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"index_head_dim": 32}, "index_head_dim 32: llama.cpp's glm-dsa turns"),
        ({"max_position_embeddings": 1048576}, "shares GLM-5.2's indexers"),
        ({"indexer_rope_interleave": False}, "indexer_rope_interleave=False"),
    ],
)
def test_a_glm5_indexer_llama_cpp_reads_otherwise_is_refused_by_name(change, message):
    from tools.kits.tiny_gguf_mla import glm_moe_dsa_config
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    assert family_for(glm_moe_dsa_config()).architecture == "glm-dsa"
    with pytest.raises(UnsupportedModel, match=message):
        family_for({**glm_moe_dsa_config(), **change})


@pytest.mark.parametrize(
    ("model_type", "why"),
    [("olmo", "ai2-olmo"), ("bitnet", "Metal kernel")],
)
def test_a_type_that_cannot_be_checked_here_stays_refused_with_its_reason(model_type, why):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    with pytest.raises(UnsupportedModel, match=why):
        family_for({"model_type": model_type})


@pytest.mark.parametrize("name", ["mamba2", "mamba"])
def test_a_model_without_attention_takes_a_k_quant_mix(tmp_path, name):
    from tools.kits.tiny_gguf_families import UNTRAINED_FAMILIES
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    config = {**UNTRAINED_FAMILIES, **TEXT_FAMILIES}[name]()
    model, tokenizer = FastLanguageModel.from_pretrained(
        str(build_tiny_hybrid_model(tmp_path / "model", name, config=config))
    )
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="q4_k_m")
    assert path.name == "unsloth.Q4_K_M.gguf" and path.stat().st_size > 0
