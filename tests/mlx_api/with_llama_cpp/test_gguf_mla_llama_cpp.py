"""Latent-attention families (GLM-4.7-Flash's `glm4_moe_lite`), exported as deepseek2, run by llama.cpp as MLX runs
them.

A tiny model of each (`MLA_FAMILIES` in `tools/kits/tiny_gguf_mla.py`) is LoRA-trained until it answers, exported in
f16, q8_0 and q4_k_m, and the three files run by one fresh llama.cpp process, with the bounds
`test_gguf_families_llama_cpp.py` holds the first seven families to. YaRN, whose attention scale llama.cpp's
deepseek2 takes from its own log multiplier, and DeepSeek V3's expert groups (which the trained rows' last layer
cannot show: only the last position's routing reaches the first logits) are checked on untrained models in f32
(f16's rounding alone moves their first logits 1.6e-3). DeepSeek V3's 8 experts, which change llama.cpp's type for
the attention output, are checked against llama.cpp's own quantizer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tools.kits.tiny_gguf_families import YARN
from tools.kits.tiny_gguf_mla import MLA_FAMILIES, build_mla_model

from .agreement import assert_agrees, llama_cpp_continuations, mlx_greedy, prompt_text, trained_export
from .test_gguf_families_llama_cpp import EXPECTED, STEPS


@pytest.fixture(scope="module", params=list(MLA_FAMILIES))
def family_export(request, tmp_path_factory):
    name = request.param
    root = tmp_path_factory.mktemp(f"mla-{name}")
    return trained_export(
        build_mla_model(root / "model", name), root, name, MLA_FAMILIES[name][1], list(EXPECTED), STEPS
    )


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_runs_each_latent_attention_family_as_mlx_does(family_export, method):
    assert_agrees(family_export, method, EXPECTED[method])


# DeepSeek V3's YaRN: mscale and mscale_all_dim equal, so only the attention scale grows with the factor.
DEEPSEEK_YARN = {**YARN, "mscale": 1.0, "mscale_all_dim": 1.0}
CLOSE = 1e-3


def _first_logits(folder) -> tuple:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    prompt = tokenizer(prompt_text(), add_special_tokens=False)["input_ids"]
    first, _ = mlx_greedy(model, prompt, 1)
    return model, tokenizer, prompt, first


def test_llama_cpp_applies_latent_attention_yarn_as_mlx_does(tmp_path):
    model, tokenizer, prompt, first = _first_logits(
        build_mla_model(tmp_path / "yarn", "glm4_moe_lite", rope_scaling=DEEPSEEK_YARN)
    )
    assert len(prompt) > YARN["original_max_position_embeddings"]  # the prompt runs past YaRN's original context
    _, _, _, unscaled = _first_logits(build_mla_model(tmp_path / "plain", "glm4_moe_lite"))
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reloaded = llama_cpp_continuations([path], prompt_text(), count=1)[path.name]
    assert reloaded["prompt"] == prompt
    scale = np.abs(first).max()
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max() / scale)
    without = float(np.abs(unscaled - first).max() / scale)
    print(f"glm4_moe_lite YaRN f32: gap {gap:.2e}, without YaRN {without:.2e}")
    assert without > CLOSE  # YaRN changes these logits more than the bound allows
    assert gap < CLOSE


def test_llama_cpp_chooses_experts_within_groups_as_mlx_does(tmp_path):
    # Four layers, so that earlier positions' routing reaches the last one; the same weights without groups compare.
    grouped = build_mla_model(tmp_path / "grouped", "deepseek_v3", num_hidden_layers=4)
    ungrouped = Path(shutil.copytree(grouped, tmp_path / "ungrouped"))
    config = json.loads((ungrouped / "config.json").read_text())
    (ungrouped / "config.json").write_text(json.dumps({**config, "n_group": 1, "topk_group": 1}))
    model, tokenizer, prompt, first = _first_logits(grouped)
    _, _, _, without_groups = _first_logits(ungrouped)
    path = model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="f32")
    reloaded = llama_cpp_continuations([path], prompt_text(), count=1)[path.name]
    scale = np.abs(first).max()
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max() / scale)
    without = float(np.abs(without_groups - first).max() / scale)
    print(f"deepseek_v3 expert groups f32: gap {gap:.2e}, without groups {without:.2e}")
    assert without > CLOSE
    assert gap < CLOSE


@pytest.mark.parametrize("method", ["q3_k_l", "q4_k_m"])
def test_an_eight_expert_k_quant_mix_matches_llama_cpp_s_quantizer(tmp_path, method):
    import gguf

    from unsloth import FastLanguageModel
    from unsloth.mlx.gguf.file_types import quantize_with_llama_cpp

    def stored(path) -> dict:
        return {
            tensor.name: (tensor.tensor_type.name, tensor.data.tobytes()) for tensor in gguf.GGUFReader(path).tensors
        }

    model, tokenizer = FastLanguageModel.from_pretrained(str(build_mla_model(tmp_path / "model", "deepseek_v3")))
    source = model.save_pretrained_gguf(str(tmp_path / "f32"), tokenizer, quantization_method="f32")
    ours = model.save_pretrained_gguf(str(tmp_path / "ours"), tokenizer, quantization_method=method)
    theirs = tmp_path / "theirs.gguf"
    quantize_with_llama_cpp(source, theirs, method)
    mine, reference = stored(str(ours)), stored(str(theirs))
    assert {name: kind for name, (kind, _) in mine.items()} == {name: kind for name, (kind, _) in reference.items()}
    assert [name for name in reference if mine[name][1] != reference[name][1]] == []
