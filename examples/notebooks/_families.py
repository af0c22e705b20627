"""The first cell of the scripts for notebooks on other families: the tiny model of the notebook's own mlx-lm
architecture (mistral, gemma2, lfm2, granitemoehybrid, gpt_oss, ...) under its Hub ids (offline), with a chat
template where the real repository ships one, and local files in the columns of those notebooks' datasets."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
REVISION = "0" * 40
HYBRIDS = ("lfm2", "granitemoehybrid", "gpt_oss")
# Granite 4.0-H micro is the dense variant: a plain MLP beside its Mamba and attention blocks, no experts.
VARIANTS = {"granitemoehybrid-dense": ("granitemoehybrid", {"moe": False})}

# Short templates in each family's own turn markers (written here; the real ones carry more: tools, dates).
TEMPLATES = {
    "lfm2": (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "granite": (
        "{% for m in messages %}<|start_of_role|>{{ m['role'] }}<|end_of_role|>{{ m['content'] }}<|end_of_text|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"
    ),
    # Magistral's [INST] turns; a content may be a list of text parts, as the real template allows.
    "magistral": (
        "{{ bos_token }}{% for m in messages %}{% if m['content'] is string %}{% set c = m['content'] %}{% else %}"
        "{% set c = m['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}"
        "{% endif %}{% if m['role'] == 'user' %}[INST]{{ c }}[/INST]{% elif m['role'] == 'system' %}"
        "[SYSTEM_PROMPT]{{ c }}[/SYSTEM_PROMPT]{% else %}{{ c }}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    # gpt-oss's harmony layout: the effort in the system turn, the thinking on the analysis channel.
    "gpt_oss": (
        "<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
        "{% for m in messages %}{% if m['role'] == 'assistant' %}"
        "{% if m.get('thinking') %}<|start|>assistant<|channel|>analysis<|message|>{{ m['thinking'] }}<|end|>{% endif %}"
        "<|start|>assistant<|channel|>final<|message|>{{ m['content'] }}<|return|>"
        "{% else %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
    ),
    # Gemma 4's own template writes a placeholder for each image or audio part (its processor expands them).
    "gemma4_own": (
        "{{ bos_token }}{% for m in messages %}<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
        "{% if part['type'] == 'image' %}<|image|>{% elif part['type'] == 'audio' %}<|audio|>"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<turn|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
    ),
    # ERNIE 4.5's plain "User: / Assistant: " turns, each answer closed by the EOS.
    "ernie": (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n"
        "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n{% else %}Assistant: {{ m['content'] }}"
        "{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}Assistant: {% endif %}"
    ),
    # GLM-4.7's turns: role tags with no newline, an empty thought before each answer.
    "glm": (
        "[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>"
        "{% if m['role'] == 'assistant' %}<think></think>{% endif %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|><think></think>{% endif %}"
    ),
}
_TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    # Past the notebooks' 2048-token contexts, as the real checkpoints are, so no rope scaling is asked for.
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "bos_token_id": None,
    "torch_dtype": "float32",
    "num_hidden_layers": 2,
}
# The newer notebooks' families, each with the trait its notebook leans on (experts, Gemma 4's per-layer inputs).
NEW_FAMILY_CONFIGS = {
    "qwen3_moe": {
        **_TINY,
        "architectures": ["Qwen3MoeForCausalLM"],
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
    },
    "gemma4_text": {
        **_TINY,
        "architectures": ["Gemma4ForCausalLM"],
        "global_head_dim": 16,
        "num_kv_shared_layers": 0,
        "vocab_size_per_layer_input": 512,
        "hidden_size_per_layer_input": 8,
        "sliding_window": 64,
        "sliding_window_pattern": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "use_double_wide_mlp": False,
        "tie_word_embeddings": True,
    },
    # A dense first layer, then four experts (two per token) beside a shared one, as the 21B-A3B is laid out.
    "ernie4_5_moe": {
        **_TINY,
        "architectures": ["Ernie4_5_MoeForCausalLM"],
        "num_hidden_layers": 3,
        "use_bias": False,
        "moe_intermediate_size": 32,
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_layer_start_index": 1,
        "moe_layer_interval": 1,
        "moe_num_shared_experts": 1,
        "tie_word_embeddings": True,
    },
    # Falcon-H1: a Mamba-2 mixer beside attention in every block, then a gated MLP.
    "falcon_h1": {
        **_TINY,
        "architectures": ["FalconH1ForCausalLM"],
        "mamba_d_ssm": 64,
        "mamba_n_heads": 4,
        "mamba_d_head": 16,
        "mamba_d_state": 16,
        "mamba_chunk_size": 32,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "tie_word_embeddings": True,
    },
    # GLM-4.7-Flash: multi-head latent attention, a dense first block, then experts beside a shared expert.
    "glm4_moe_lite": {
        **_TINY,
        "architectures": ["Glm4MoeLiteForCausalLM"],
        "num_key_value_heads": 4,
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "kv_lora_rank": 16,
        "q_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "first_k_dense_replace": 1,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
    },
    # Nemotron 3 Nano: Mamba-2, experts (fc1/fc2 with a shared expert) and attention blocks in one hybrid pattern.
    "nemotron_h": {
        **_TINY,
        "architectures": ["NemotronHForCausalLM"],
        "attention_bias": False,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "mamba_proj_bias": False,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "n_groups": 1,
        "chunk_size": 32,
        "mlp_bias": False,
        "layer_norm_epsilon": 1e-5,
        "use_bias": False,
        "use_conv_bias": True,
        "hybrid_override_pattern": ["M", "E", "*", "E"],
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 32,
        "n_group": 1,
        "topk_group": 1,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False,
    },
}


def _with_trained_output_scale(folder: Path, config: dict) -> Path:
    """Falcon-H1's tied head multiplies its logits by lm_head_multiplier / embedding_multiplier (about 0.007): a
    trained checkpoint's weights make up for it, random ones do not (every logit near 0, the loss stuck at ln(vocab)
    whatever LoRA learns), so the final norm gets the gain that brings the logits back to an ordinary model's scale."""
    import importlib

    import mlx.core as mx

    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    args = module.ModelArgs.from_dict(config)
    weights = mx.load(str(folder / "model.safetensors"))
    weights["model.final_layernorm.weight"] *= args.embedding_multiplier / args.lm_head_multiplier
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    return folder


def build_notebook_model(folder: Path, architecture: str) -> Path:
    """The tiny model of a notebook's architecture (a VARIANTS name too) written into `folder`."""
    family, options = VARIANTS.get(architecture, (architecture, {}))
    if family in NEW_FAMILY_CONFIGS:
        from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model

        config = {**NEW_FAMILY_CONFIGS[family], "model_type": family}
        built = build_tiny_hybrid_model(folder, family, config=config)
        return _with_trained_output_scale(built, config) if family == "falcon_h1" else built
    if family in HYBRIDS:
        from tools.kits.tiny_hybrid_model import HYBRID_CONFIGS, build_tiny_hybrid_model

        return build_tiny_hybrid_model(folder, family, config=HYBRID_CONFIGS[family](**options))
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    return build_tiny_mlx_model(folder, architecture=architecture)


def _set_template(snapshot: Path, template: str) -> None:
    from unsloth.mlx.chat.families import FAMILIES

    path = snapshot / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["chat_template"] = FAMILIES[template].template if template in FAMILIES else TEMPLATES[template]
    # A notebook strips `tokenizer.bos_token` from its texts; the tiny vocabulary's system token stands in for it.
    config.setdefault("bos_token", "<|system|>")
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (snapshot / "chat_template.jinja").unlink(missing_ok=True)


def _jsonl(path: Path, rows: list) -> str:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_family_datasets(folder: Path, copies: int = 16) -> Dict[str, str]:
    """Stand-ins, in their columns, for the datasets of the CPT, text-completion, gpt-oss, Ollama and Granite
    notebooks (Granite's is a CSV sheet with a header row)."""
    from tools.kits.notebook_cache import FACTS

    folder.mkdir(parents=True, exist_ok=True)
    facts = FACTS * copies
    articles = [{"id": str(n), "url": "", "title": q, "text": f"{q} {a}"} for n, (q, a) in enumerate(facts)]
    korean = [
        {"id": str(n), "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
        for n, (q, a) in enumerate(facts)
    ]
    stories = [{"text": f"Once upon a time someone asked: {q} {a}"} for q, a in facts]
    thinking = [
        {
            "reasoning_language": "French",
            "developer": "You answer briefly.",
            "user": q,
            "analysis": "The answer is in the question's story.",
            "final": a,
            "messages": [
                {"role": "system", "content": "reasoning language: French", "thinking": None},
                {"role": "user", "content": q, "thinking": None},
                {"role": "assistant", "content": a, "thinking": "The answer is in the question's story."},
            ],
        }
        for q, a in facts
    ]
    alpaca = [{"instruction": q, "input": "", "output": a, "text": f"{q} {a}"} for q, a in facts]
    support = folder / "support_recs.csv"
    with support.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["conversation snippet", "recommended reply"])
        writer.writerows([f"User: {q}\nAgent: Let me look.", f"Suggest: {a}"] for q, a in facts)
    return {
        "wikimedia/wikipedia": _jsonl(folder / "wikipedia.jsonl", articles),
        "FreedomIntelligence/alpaca-gpt4-korean": _jsonl(folder / "alpaca_korean.jsonl", korean),
        "roneneldan/TinyStories": _jsonl(folder / "tinystories.jsonl", stories),
        "HuggingFaceH4/Multilingual-Thinking": _jsonl(folder / "multilingual_thinking.jsonl", thinking),
        "vicgalle/alpaca-gpt4": _jsonl(folder / "alpaca_gpt4.jsonl", alpaca),
        "unsloth/Support-Bot-Recommendation": str(support),
    }


def prepare(repositories: Dict[str, Tuple[str, Optional[str]]], copies: int = 16) -> Dict[str, str]:
    """Switch MLX on, cache `{repo id: (architecture, template or None)}`, move into a scratch folder, write the
    datasets (the eight facts `copies` times each); returns {dataset id: local JSONL path}."""
    os.environ.setdefault("UNSLOTH_MLX", "1")
    scratch = Path(os.environ.get("NOTEBOOK_WORKDIR") or tempfile.mkdtemp(prefix="notebook-"))
    hf_home = scratch / "hf-home"
    os.environ["HF_HOME"] = str(hf_home)
    os.environ["HF_HUB_OFFLINE"] = "1"
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tools.kits.notebook_cache import write_datasets

    built: Dict[str, Path] = {}
    for repo_id, (architecture, template) in repositories.items():
        if architecture not in built:
            built[architecture] = build_notebook_model(hf_home / "sources" / architecture, architecture)
        organisation, name = repo_id.split("/")
        repository = hf_home / "hub" / f"models--{organisation}--{name}"
        snapshot = repository / "snapshots" / REVISION
        shutil.copytree(built[architecture], snapshot)
        if template is not None:
            _set_template(snapshot, template)
        (repository / "refs").mkdir(parents=True, exist_ok=True)
        (repository / "refs" / "main").write_text(REVISION, encoding="utf-8")
    files = {name: str(path) for name, path in write_datasets(scratch / "data", copies).items()}
    files.update(write_family_datasets(scratch / "data", copies))
    os.chdir(scratch)
    return files
