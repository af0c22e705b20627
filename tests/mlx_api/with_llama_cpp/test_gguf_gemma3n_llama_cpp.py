"""Gemma 3n, exported as gemma3n, run by llama.cpp as MLX runs it: AltUp, Laurel, per-layer inputs, sparse MLPs.

The tiny model of `tools/kits/tiny_gguf_gemma3n.py` (the published wrapper around a 256-wide text model, AltUp's
output scales drawn away from mlx_lm's zeros so the per-layer inputs count) is LoRA-trained until it answers,
exported in f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_gemma3n import build_gemma3n_model

from .agreement import NEW_TOKENS, agreement, llama_cpp_continuations, mlx_greedy, prompt_text, train_until_it_answers
from .test_gguf_families_llama_cpp import EXPECTED, STEPS

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def gemma3n_export(tmp_path_factory):
    from unsloth import FastLanguageModel

    import mlx.core as mx

    mx.random.seed(0)
    root = tmp_path_factory.mktemp("gemma3n")
    model, tokenizer = FastLanguageModel.from_pretrained(str(build_gemma3n_model(root / "model")))
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
def test_llama_cpp_runs_gemma3n_as_mlx_does(gemma3n_export, method):
    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = gemma3n_export["reloaded"][file_name]
    assert reloaded["prompt"] == gemma3n_export["prompt"]
    equal, gap = agreement(reloaded, gemma3n_export["tokens"], gemma3n_export["first"])
    print(f"gemma3n_text {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({gemma3n_export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], gemma3n_export["tokens"])
    assert gap < largest_gap
    assert "kettle" in gemma3n_export["answer"]  # the model learned its answer, so the tokens compared are not noise
