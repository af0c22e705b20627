"""The families GGUF export reaches with the name map and the common keys alone, run by llama.cpp as MLX runs them.

Untrained tiny models (`GENERIC_FAMILIES` in `tools/kits/tiny_gguf_families.py`), f16 only and one llama.cpp process
for all, to stay fast: the first-position logits within 2e-3 of MLX's (relative to the largest), the same first
greedy token and at least 3 of 4. A tensor in the wrong layout or a missing key moves the logits far past that.
"""

from __future__ import annotations

import pytest

from tools.kits.tiny_gguf_families import GENERIC_FAMILIES, bias_expert_selection

from .agreement import agreement, llama_cpp_continuations, mlx_greedy, prompt_text

COUNT = 4
CLOSE = 2e-3


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    root = tmp_path_factory.mktemp("generic")
    results, paths = {}, []
    for name, build in GENERIC_FAMILIES.items():
        folder = build_tiny_hybrid_model(root / name / "model", name, config=build())
        bias_expert_selection(folder, seed=0)  # GLM-4.5's selection bias, else zero and never checked
        model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
        prompt = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
        first, tokens = mlx_greedy(model, prompt, COUNT)
        path = model.save_pretrained_gguf(str(root / name / "gguf"), tokenizer, quantization_method="f16")
        renamed = path.with_name(f"{name}.F16.gguf")
        path.rename(renamed)
        paths.append(renamed)
        results[name] = {"prompt": prompt, "first": first, "tokens": tokens}
    reloaded = llama_cpp_continuations(paths, prompt_text(), count=COUNT)
    return {name: {**result, "reloaded": reloaded[f"{name}.F16.gguf"]} for name, result in results.items()}


@pytest.mark.parametrize("name", list(GENERIC_FAMILIES))
def test_llama_cpp_runs_each_generic_family_as_mlx_does(exports, name):
    export = exports[name]
    assert export["reloaded"]["prompt"] == export["prompt"]
    equal, gap = agreement(export["reloaded"], export["tokens"], export["first"])
    print(f"{name} f16: {equal}/{COUNT} equal, gap {gap:.2e}")
    # An untrained model's top logits can sit closer than f16's rounding, so one later token may part.
    assert export["reloaded"]["tokens"][0] == export["tokens"][0]
    assert equal >= COUNT - 1, (export["reloaded"]["tokens"], export["tokens"])
    assert gap < CLOSE
