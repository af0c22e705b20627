"""The cheap llama.cpp check of a text family's converter: a tiny untrained model of each family in
`UNTRAINED_FAMILIES` (`tools/kits/tiny_gguf_families.py`), `UNTRAINED_MLA_FAMILIES` (`tiny_gguf_mla.py`) and
`TEXT_FAMILIES` (`tiny_gguf_text_families.py`), exported
in f32 and read by llama.cpp in one process, must give MLX's logits at the first generated position, and MLX's greedy
tokens while MLX's top-1 margin is clear of the gap. f32 weights and an f32 key/value cache (`llama_cpp_f32_greedy.py`)
leave only the two libraries' summation orders between them; a wrong layout or key (half of GLM's head rotated,
Qwen3-Next's query and key rows swapped, Llama 4's rope frequency factors left out) moves the logits by 2e-3 to 2.6."""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest

from tools.kits.tiny_gguf_families import UNTRAINED_FAMILIES, bias_expert_selection, spread_zero_routers
from tools.kits.tiny_gguf_mla import UNTRAINED_MLA_FAMILIES
from tools.kits.tiny_gguf_text_families import TEXT_FAMILIES, vary_activation_settings

from .agreement import llama_cpp_continuations, prompt_text

NEW_TOKENS = 4
FAMILIES = {**UNTRAINED_FAMILIES, **UNTRAINED_MLA_FAMILIES, **TEXT_FAMILIES}
RUNNER = Path(__file__).with_name("llama_cpp_f32_greedy.py")
# The logits of these models reach about 1.6 and float32 sums differ by about 1e-7 of that per layer: the measured gaps
# are 1.2e-6 to 1.7e-6 (with llama.cpp's default f16 cache they would be 2e-4 to 7e-4, too close to a lost factor).
LARGEST_GAP = 2e-5
# llama.cpp's CPU GELU reads its input rounded to f16 (ggml-cpu/vec.h's GGML_GELU_FP16 table), a relative error of up to
# 2**-11 in every MLP activation, and is the tanh approximation where mlx_lm's gpt_bigcode runs the exact one: measured
# gaps 6.3e-4 (GPT-NeoX), 5.7e-4 (StarCoder) and 8.4e-4 (GPT-2); a misordered query/key/value row moves them past 0.1.
GELU_GAP = {"gpt_neox": 2e-3, "gpt_bigcode": 2e-3, "gpt2": 2e-3}
# A greedy token is compared only while MLX's top two logits stand further apart than this many measured gaps.
CLEAR_MARGIN = 4


def _mlx_steps(model, prompt: List[int]):
    """MLX's first-position logits, and for each greedy step its token and its top-1 margin."""
    import mlx.core as mx

    model.eval()
    sequence, steps, first = list(prompt), [], None
    for _ in range(NEW_TOKENS):
        logits = np.array(model(mx.array([sequence])).astype(mx.float32)[0, -1], dtype=np.float64)
        first = logits if first is None else first
        top_two = np.sort(logits)[-2:]
        steps.append((int(np.argmax(logits)), float(top_two[1] - top_two[0])))
        sequence.append(steps[-1][0])
    return first, steps


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    root = tmp_path_factory.mktemp("untrained")
    results, paths = {}, []
    for name, build in FAMILIES.items():
        folder = build_tiny_hybrid_model(root / name / "model", name, config=build())
        spread_zero_routers(folder, seed=0)
        bias_expert_selection(folder, seed=0)
        vary_activation_settings(folder, seed=0)
        model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
        prompt = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
        first, steps = _mlx_steps(model, prompt)
        path = model.save_pretrained_gguf(str(root / name / "gguf"), tokenizer, quantization_method="f32")
        renamed = path.with_name(f"{name}.F32.gguf")
        path.rename(renamed)
        paths.append(renamed)
        results[name] = {"prompt": prompt, "first": first, "steps": steps}
    reloaded = llama_cpp_continuations(paths, prompt_text(), count=NEW_TOKENS, runner=RUNNER)
    return {name: {**result, "reloaded": reloaded[f"{name}.F32.gguf"]} for name, result in results.items()}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_llama_cpp_runs_each_untrained_family_as_mlx_does(exports, name):
    export = exports[name]
    reloaded = export["reloaded"]
    assert reloaded["prompt"] == export["prompt"]
    gap = float(np.abs(np.array(reloaded["first_logits"]) - export["first"]).max())
    compared = 0
    for step, (token, margin) in enumerate(export["steps"]):
        if margin <= CLEAR_MARGIN * gap:
            break  # later tokens follow an MLX choice closer than the export's error
        assert reloaded["tokens"][step] == token, (step, reloaded["tokens"], [t for t, _ in export["steps"]])
        compared += 1
    largest = float(np.abs(export["first"]).max())
    print(f"{name} f32: gap {gap:.2e} (largest logit {largest:.2f}), {compared}/{NEW_TOKENS} tokens compared and equal")
    assert gap < GELU_GAP.get(name, LARGEST_GAP)
    assert compared >= 1, export["steps"]


# Families whose f16 file needs a tensor kept f32 beyond the common rule (RWKV-7's fused token-shift mixes, which
# llama.cpp multiplies in f32 only: stored f16 it stops with "binary_op: unsupported types").
F16_FAMILIES = ("rwkv7",)
# f16 weights and llama.cpp's default f16 cache: rwkv7's measured gap is 7.5e-4.
F16_GAP = 2e-3


@pytest.mark.parametrize("name", F16_FAMILIES)
def test_llama_cpp_runs_the_f16_file_of_a_family_with_f32_only_tensors(tmp_path, name):
    from tools.kits.tiny_hybrid_model import build_tiny_hybrid_model
    from unsloth import FastLanguageModel

    folder = build_tiny_hybrid_model(tmp_path / "model", name, config=FAMILIES[name]())
    vary_activation_settings(folder, seed=0)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    prompt = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
    first, steps = _mlx_steps(model, prompt)
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f16")
    reloaded = llama_cpp_continuations([path], prompt_text(), count=NEW_TOKENS)[path.name]
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max())
    print(f"{name} f16: gap {gap:.2e}")
    assert gap < F16_GAP
    assert reloaded["tokens"][0] == steps[0][0]
