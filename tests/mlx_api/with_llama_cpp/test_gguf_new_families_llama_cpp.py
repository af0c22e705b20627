"""The hybrid and mixture-of-experts families, exported to GGUF and run by llama.cpp, continue a prompt as MLX does.

A tiny model of each (LFM2, Granite 4.0-H with experts and dense, Granite 4.0 without Mamba layers,
gpt-oss with YaRN, Qwen 3 with YaRN, Granite 3, Qwen 3 MoE, OLMo 2; `tools/kits/tiny_gguf_families.py`, 256 wide so K-quant blocks
fit) is LoRA-trained until it answers, exported in f16, q8_0 and q4_k_m, and the three files are run by one fresh
llama.cpp process, with the bounds `test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_families import (
    GGUF_FAMILIES,
    YARN,
    build_gguf_family_model,
    qwen3_config,
    split_as_o200k,
    wide_gpt_oss,
    wide_granitemoehybrid,
)

from .agreement import NEW_TOKENS, agreement, llama_cpp_continuations, mlx_greedy, prompt_text, train_until_it_answers
from .test_gguf_families_llama_cpp import EXPECTED, STEPS

# Granite 4.0 with attention in every layer, which llama.cpp reads as a Granite MoE file.
ATTENTION_ONLY = {**wide_granitemoehybrid(moe=True), "layer_types": ["attention"] * 3}
# name: (config, module names LoRA targets) for the variants built here.
EXTRA = {
    "gpt_oss_yarn": ({**wide_gpt_oss(), "rope_scaling": YARN}, GGUF_FAMILIES["gpt_oss"][1]),
    # Qwen 3's long-context setting, past its original context within the prompt.
    "qwen3_yarn": ({**qwen3_config(), "rope_scaling": YARN}, GGUF_FAMILIES["olmo2"][1]),
    "granitemoehybrid_attention_only": (
        ATTENTION_ONLY,
        ("q_proj", "k_proj", "v_proj", "o_proj", "input_linear", "output_linear"),
    ),
}
# gpt-oss ships with YaRN, and its YaRN variant runs every tensor the plain one has: one trained gpt-oss (23 s) is enough.
FAMILIES = [name for name in [*GGUF_FAMILIES, *EXTRA] if name != "gpt_oss"]
# The expert families, with LoRA on attention only, need more steps to learn their answer.
LONGER = {"gpt_oss_yarn": 150, "qwen3_moe": 100}


@pytest.fixture(scope="module", params=FAMILIES)
def family_export(request, tmp_path_factory):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    name = request.param
    root = tmp_path_factory.mktemp(f"family-{name}")
    if name in GGUF_FAMILIES:
        folder, targets = build_gguf_family_model(root / "model", name), GGUF_FAMILIES[name][1]
    else:
        config, targets = EXTRA[name]
        folder = build_tiny_hybrid_model(root / "model", config["model_type"], config=config)
        if config["model_type"] == "gpt_oss":
            split_as_o200k(folder)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0, target_modules=list(targets))
    train_until_it_answers(model, tokenizer, root, steps=LONGER.get(name, STEPS), learning_rate=1e-2)
    text = prompt_text()
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    first, tokens = mlx_greedy(model, prompt, NEW_TOKENS)
    paths = model.save_pretrained_gguf(str(root / "gguf"), tokenizer, quantization_method=list(EXPECTED))
    return {
        "name": name,
        "prompt": prompt,
        "first": first,
        "tokens": tokens,
        "answer": tokenizer.decode(tokens),
        "paths": paths,
        "reloaded": llama_cpp_continuations(paths, text),
    }


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_each_new_family_as_mlx_does(family_export, method):
    import gguf

    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = family_export["reloaded"][file_name]
    assert reloaded["prompt"] == family_export["prompt"]
    equal, gap = agreement(reloaded, family_export["tokens"], family_export["first"])
    print(f"{family_export['name']} {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({family_export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], family_export["tokens"])
    assert gap < largest_gap
    assert "kettle" in family_export["answer"]  # the model learned its answer, so the tokens compared are not noise
    if method == "q4_k_m":
        reader = gguf.GGUFReader(str(family_export["paths"][2]))
        assert "Q4_K" in {tensor.tensor_type.name for tensor in reader.tensors}


def test_gpt_oss_o200k_splitting_is_named_so_llama_cpp_tokenizes_as_hugging_face_does(tmp_path):
    from unsloth import FastLanguageModel

    # Case changes, a contraction after capitals and a run of slashes: where o200k and Llama 3's regexes part.
    text = "<|user|>\nI'm HTTPServer's don'T CamelCase 12345 a//b/c!!\n\n  x<|eos|>\n"
    folder = build_gguf_family_model(tmp_path / "model", "gpt_oss")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    paths = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method=["f16"])
    reloaded = llama_cpp_continuations(paths, text, count=1)["unsloth.F16.gguf"]
    assert reloaded["prompt"] == tokenizer(text, add_special_tokens=False)["input_ids"]
