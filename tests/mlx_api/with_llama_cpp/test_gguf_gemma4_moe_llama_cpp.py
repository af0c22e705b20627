"""Gemma 4 with its expert block (26B-A4B's layout), exported as gemma4, run by llama.cpp as MLX runs it.

The tiny model of `tools/kits/tiny_gguf_gemma4_moe.py` (router scales drawn away from one) is LoRA-trained until it
answers, exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_gemma4_moe import build_gemma4_moe_model

from .agreement import NEW_TOKENS, agreement, llama_cpp_continuations, mlx_greedy, prompt_text, train_until_it_answers
from .test_gguf_families_llama_cpp import EXPECTED, STEPS

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def moe_export(tmp_path_factory):
    from unsloth import FastLanguageModel

    import mlx.core as mx

    mx.random.seed(0)
    root = tmp_path_factory.mktemp("gemma4-moe")
    model, tokenizer = FastLanguageModel.from_pretrained(str(build_gemma4_moe_model(root / "model")))
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0, target_modules=TARGETS)
    train_until_it_answers(model, tokenizer, root, steps=STEPS, learning_rate=1e-2)
    text = prompt_text()
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    first, tokens = mlx_greedy(model, prompt, NEW_TOKENS)
    paths = model.save_pretrained_gguf(str(root / "gguf"), tokenizer, quantization_method=list(EXPECTED))
    return {
        "prompt": prompt,
        "first": first,
        "tokens": tokens,
        "answer": tokenizer.decode(tokens),
        "reloaded": llama_cpp_continuations(paths, text),
    }


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_gemma4_s_expert_block_as_mlx_does(moe_export, method):
    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = moe_export["reloaded"][file_name]
    assert reloaded["prompt"] == moe_export["prompt"]
    equal, gap = agreement(reloaded, moe_export["tokens"], moe_export["first"])
    print(f"gemma4_text MoE {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({moe_export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], moe_export["tokens"])
    assert gap < largest_gap
    assert "kettle" in moe_export["answer"]  # the model learned its answer, so the tokens compared are not noise
