"""Qwen 3.5, dense and MoE, exported to GGUF and run by llama.cpp's qwen35 / qwen35moe, continues a prompt as MLX does.

A tiny model of each (`QWEN35_FAMILIES` in `tools/kits/tiny_gguf_qwen35.py`: the published vision-language wrapper
around a 256-wide language model of gated delta-net and gated full-attention blocks) is LoRA-trained until it
answers, exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, held to the
bounds `test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_qwen35 import QWEN35_FAMILIES, build_qwen35_model

from .agreement import NEW_TOKENS, agreement, llama_cpp_continuations, mlx_greedy, prompt_text, train_until_it_answers
from .test_gguf_families_llama_cpp import EXPECTED, STEPS


@pytest.fixture(scope="module", params=list(QWEN35_FAMILIES))
def qwen35_export(request, tmp_path_factory):
    from unsloth import FastLanguageModel

    import mlx.core as mx

    mx.random.seed(0)  # each model trains alike whichever ran before it
    name = request.param
    root = tmp_path_factory.mktemp(f"qwen35-{name}")
    folder = build_qwen35_model(root / "model", name)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    targets = list(QWEN35_FAMILIES[name][1])
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
        "paths": paths,
        "reloaded": llama_cpp_continuations(paths, text),
    }


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_qwen3_5_as_mlx_does(qwen35_export, method):
    import gguf

    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = qwen35_export["reloaded"][file_name]
    assert reloaded["prompt"] == qwen35_export["prompt"]  # llama.cpp splits text with Qwen 3.5's own regex
    equal, gap = agreement(reloaded, qwen35_export["tokens"], qwen35_export["first"])
    print(f"{qwen35_export['name']} {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({qwen35_export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], qwen35_export["tokens"])
    assert gap < largest_gap
    assert "kettle" in qwen35_export["answer"]  # the model learned its answer, so the tokens compared are not noise
    if method == "q4_k_m":  # the matrices really are Q4_K, not a 32-wide fallback
        reader = gguf.GGUFReader(str(qwen35_export["paths"][2]))
        assert "Q4_K" in {tensor.tensor_type.name for tensor in reader.tensors}
