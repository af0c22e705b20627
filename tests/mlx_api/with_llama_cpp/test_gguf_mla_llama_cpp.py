"""Latent-attention families (GLM-4.7-Flash's `glm4_moe_lite`), exported as deepseek2, run by llama.cpp as MLX runs
them.

A tiny model of each (`MLA_FAMILIES` in `tools/kits/tiny_gguf_mla.py`) is LoRA-trained until it answers, exported in
f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_mla import MLA_FAMILIES, build_mla_model

from .agreement import NEW_TOKENS, agreement, llama_cpp_continuations, mlx_greedy, prompt_text, train_until_it_answers
from .test_gguf_families_llama_cpp import EXPECTED, STEPS


@pytest.fixture(scope="module", params=list(MLA_FAMILIES))
def family_export(request, tmp_path_factory):
    from unsloth import FastLanguageModel

    import mlx.core as mx

    mx.random.seed(0)  # each family trains alike whichever ran before it
    name = request.param
    root = tmp_path_factory.mktemp(f"mla-{name}")
    folder = build_mla_model(root / "model", name)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    targets = list(MLA_FAMILIES[name][1])
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0, target_modules=targets)
    train_until_it_answers(model, tokenizer, root, steps=STEPS, learning_rate=1e-2)
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
        "reloaded": llama_cpp_continuations(paths, text),
    }


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_each_latent_attention_family_as_mlx_does(family_export, method):
    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = family_export["reloaded"][file_name]
    assert reloaded["prompt"] == family_export["prompt"]
    equal, gap = agreement(reloaded, family_export["tokens"], family_export["first"])
    print(f"{family_export['name']} {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({family_export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], family_export["tokens"])
    assert gap < largest_gap
    assert "kettle" in family_export["answer"]  # the model learned its answer, so the tokens compared are not noise
