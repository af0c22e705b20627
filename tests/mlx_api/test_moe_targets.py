"""MoE expert names as transformers 5 and CUDA Unsloth spell them (`gate_up_proj`, `experts`, Mixtral's `w1`..`w3`)
put LoRA on mlx_lm's expert stacks in every MoE family the installed mlx_lm has; a name matching nothing is refused
and leaves the model exactly as it was."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from tools.kits.tiny_moe_models import FAMILY_KEYS, WRAPPED, build_moe_model, moe_families

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
# The Qwen3 MoE notebook's list: "gate_up_proj" to enable LoRA on MoE layers.
QWEN3_MOE_NOTEBOOK = ATTENTION + ["gate_proj", "up_proj", "down_proj", "gate_up_proj"]
TOKENS = mx.array([[3, 17, 5, 9, 40, 2, 11, 8]])
REQUIRED = (
    "qwen3_moe",
    "qwen2_moe",
    "mixtral",
    "olmoe",
    "phimoe",
    "gpt_oss",
    "granitemoe",
    "ernie4_5_moe",
    "glm4_moe",
    "deepseek",
    "deepseek_v2",
    "deepseek_v3",
)

# mlx_lm's MoE families whose row cannot pass on this host, each with the reason; strict, so a row that starts
# passing must be taken off. A family missing from the kit and from here fails with the kit's KeyError.
KNOWN_ROWS = {
    # A pre-packed 2-bit Hadamard checkpoint format: its ModelArgs demand a packer's module manifest.
    "prism_hadamard_qwen35": (KeyError, "no tiny config: the family loads only a packer's 2-bit Hadamard manifest"),
    # LoRA goes on (asserted before the forward), but its forward pass runs Metal kernels the CPU mlx lacks.
    "muse_spark": (RuntimeError, "its forward pass runs Metal kernels, absent from the CPU build of mlx"),
}
# Rows that fail only where mlx has no Metal back end.
NEEDS_METAL = ("muse_spark",)


def _family_rows() -> list:
    return [
        pytest.param(
            family,
            marks=pytest.mark.xfail(raises=KNOWN_ROWS[family][0], strict=True, reason=KNOWN_ROWS[family][1]),
        )
        if family in KNOWN_ROWS and not (family in NEEDS_METAL and mx.metal.is_available())
        else family
        for family in moe_families()
    ]


def _experts(model: Any) -> list:
    """(path, module) of every expert stack: SwitchGLU / SwitchMLP, or their LoRA-wrapped children."""
    from mlx_lm.models.switch_layers import SwitchGLU, SwitchMLP

    return [(path, module) for path, module in model.named_modules() if isinstance(module, (SwitchGLU, SwitchMLP))]


def _trainable(model: Any) -> set:
    return {name for name, _ in tree_flatten(model.trainable_parameters())}


def _forward(model: Any) -> np.ndarray:
    logits = model(TOKENS)
    mx.eval(logits)
    return np.array(logits)


def test_the_family_list_is_mlx_lms_own_and_holds_the_notebook_families() -> None:
    assert set(REQUIRED) <= set(moe_families())
    assert "llama" not in moe_families() and "switch_layers" not in moe_families()


@pytest.mark.parametrize("family", _family_rows())
def test_gate_up_proj_puts_lora_on_every_expert_stack(family: str) -> None:
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    model = build_moe_model(family)
    stacks = _experts(model)
    assert stacks, f"{family}: the tiny config builds no expert stack"
    model = FastLanguageModel.get_peft_model(model, r=4, lora_alpha=8, target_modules=["gate_up_proj"])
    trainable = _trainable(model)
    for path, stack in stacks:
        parts = [name for name in ("gate_proj", "up_proj", "fc1") if name in stack]
        assert parts and all(isinstance(stack[name], LoRASwitchLinear) for name in parts), (path, parts)
        assert {f"{path}.{name}.lora_a" for name in parts} <= trainable
        assert not any(isinstance(stack[name], LoRASwitchLinear) for name in ("down_proj", "fc2") if name in stack)
    assert np.isfinite(_forward(model)).all()


@pytest.mark.parametrize("family", REQUIRED)
def test_the_qwen3_moe_notebooks_list_adapts_every_expert_part(family: str) -> None:
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    model = build_moe_model(family)
    # DeepSeek's latent attention has no q/k/v_proj; its notebooks name the MLP only.
    attention = [name for name in ATTENTION if any(path.endswith(name) for path, _ in model.named_modules())]
    targets = attention + QWEN3_MOE_NOTEBOOK[len(ATTENTION) :]
    model = FastLanguageModel.get_peft_model(model, r=4, lora_alpha=8, target_modules=targets)
    for _, stack in _experts(model):
        assert all(isinstance(stack[name], LoRASwitchLinear) for name in ("gate_proj", "up_proj", "down_proj"))
    assert np.isfinite(_forward(model)).all()


@pytest.mark.parametrize(
    ("names", "adapted"),
    [
        (["experts"], {"gate_proj", "up_proj", "down_proj"}),
        (["mlp.experts.gate_up_proj"], {"gate_proj", "up_proj"}),
        (["experts.down_proj"], {"down_proj"}),
        (["w1", "w3"], {"gate_proj", "up_proj"}),
        (["w2"], {"down_proj"}),
    ],
)
def test_each_expert_spelling_reaches_its_parts(names: list, adapted: set) -> None:
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    model = FastLanguageModel.get_peft_model(build_moe_model("mixtral"), r=4, target_modules=names)
    stack = model.layers[0].block_sparse_moe.switch_mlp
    lora = {name for name in ("gate_proj", "up_proj", "down_proj") if isinstance(stack[name], LoRASwitchLinear)}
    assert lora == adapted
    assert not hasattr(model.layers[0].self_attn.q_proj, "lora_a")  # an expert name reaches the experts only


def test_lfm2_moes_w1_is_its_dense_gate_proj_not_an_expert() -> None:
    """mlx_lm renames LFM2-MoE's dense `w1` to `gate_proj`; naming it adapts those, as on CUDA, not the experts."""
    import importlib

    from tools.kits.tiny_moe_models import moe_config
    from unsloth import FastLanguageModel

    module = importlib.import_module("mlx_lm.models.lfm2_moe")
    model = module.Model(module.ModelArgs.from_dict({**moe_config("lfm2_moe"), "num_dense_layers": 1}))
    model = FastLanguageModel.get_peft_model(model, r=4, target_modules=["w1"])
    assert hasattr(model.layers[0].feed_forward.gate_proj, "lora_a")
    assert not hasattr(model.layers[1].feed_forward.switch_mlp.gate_proj, "lora_a")


def test_a_refused_list_leaves_the_model_unchanged_and_usable() -> None:
    from unsloth import FastLanguageModel

    model = build_moe_model("qwen3_moe")
    before_logits, before_weights = _forward(model), dict(tree_flatten(model.parameters()))
    trainable_before = _trainable(model)
    with pytest.raises(ValueError, match=r"'gate_upproj' matches nothing.*the model is unchanged"):
        FastLanguageModel.get_peft_model(model, target_modules=ATTENTION + ["gate_upproj"])
    after_weights = dict(tree_flatten(model.parameters()))
    assert after_weights.keys() == before_weights.keys() and _trainable(model) == trainable_before
    np.testing.assert_array_equal(_forward(model), before_logits)
    # And the same model still takes LoRA afterwards.
    FastLanguageModel.get_peft_model(model, target_modules=ATTENTION + ["gate_up_proj"])
    assert hasattr(model.layers[0].mlp.switch_mlp.up_proj, "lora_a")


def test_every_configured_family_is_one_mlx_lm_still_has() -> None:
    assert set(FAMILY_KEYS) | set(WRAPPED) <= set(moe_families())


def test_a_four_bit_bases_experts_take_gate_up_proj() -> None:
    """QLoRA on a MoE checkpoint quantized as mlx_lm quantizes one (experts included): the QuantizedSwitchLinear
    stacks are reached by the same names."""
    import mlx.nn as nn
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    model = build_moe_model("qwen3_moe")
    nn.quantize(model, group_size=32, bits=4, class_predicate=lambda _, module: hasattr(module, "to_quantized"))
    assert isinstance(model.layers[0].mlp.switch_mlp.up_proj, QuantizedSwitchLinear)
    model = FastLanguageModel.get_peft_model(model, r=4, target_modules=ATTENTION + ["gate_up_proj"])
    stack = model.layers[0].mlp.switch_mlp
    assert isinstance(stack.gate_proj, LoRASwitchLinear) and isinstance(stack.up_proj.linear, QuantizedSwitchLinear)
    assert np.isfinite(_forward(model)).all()


# The GLM-4.7-Flash and Nemotron 3 Nano notebooks' lists, names their families lack included.
GLM_FLASH_NOTEBOOK = ["q_proj", "k_proj", "v_proj", "out_proj", "gate_proj", "up_proj", "down_proj"]
NEMOTRON_NOTEBOOK = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_names_another_family_uses_are_skipped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """GLM's latent attention has no q/k/v_proj nor out_proj: they are skipped, named once with what the model has,
    and the names that match (the shared and routed experts) are adapted, as PEFT does on CUDA."""
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    with caplog.at_level("WARNING", logger="unsloth_zoo.mlx.lora"):
        model = FastLanguageModel.get_peft_model(
            build_moe_model("glm4_moe_lite"), r=4, target_modules=GLM_FLASH_NOTEBOOK
        )
    warned = [record.getMessage() for record in caplog.records if "target_modules" in record.getMessage()]
    assert len(warned) == 1, warned
    assert "'q_proj', 'k_proj', 'v_proj', 'out_proj'" in warned[0] and "q_a_proj" in warned[0]
    assert "kv_a_proj_with_mqa" in warned[0] and "'gate_proj'" not in warned[0]
    block = model.layers[0]
    assert isinstance(block.mlp.switch_mlp.gate_proj, LoRASwitchLinear) and hasattr(
        block.mlp.shared_experts.up_proj, "lora_a"
    )
    assert not hasattr(block.self_attn.q_a_proj, "lora_a")
    assert np.isfinite(_forward(model)).all()


def test_a_typo_beside_skipped_names_is_still_refused() -> None:
    from unsloth import FastLanguageModel

    model = build_moe_model("glm4_moe_lite")
    with pytest.raises(ValueError, match=r"'up_prj' matches nothing.*the model is unchanged") as refusal:
        FastLanguageModel.get_peft_model(model, target_modules=["q_proj", "up_proj", "up_prj"])
    assert "'q_proj'" not in str(refusal.value)
    assert not any(hasattr(module, "lora_a") for _, module in model.named_modules())


def test_a_list_of_only_other_families_names_is_refused() -> None:
    from unsloth import FastLanguageModel

    model = build_moe_model("glm4_moe_lite")
    with pytest.raises(ValueError, match=r"'q_proj', 'k_proj' match nothing.*the model is unchanged"):
        FastLanguageModel.get_peft_model(model, target_modules=["q_proj", "k_proj"])


def test_nemotron_h_up_and_down_proj_reach_the_routed_experts(caplog: pytest.LogCaptureFixture) -> None:
    """Nemotron-H's routed experts are a SwitchMLP (fc1 / fc2, Hugging Face's up_proj / down_proj): the notebook's
    names adapt them beside the shared expert; its gate_proj, which the family lacks, is skipped by name."""
    from mlx_lm.tuner.lora import LoRASwitchLinear

    from unsloth import FastLanguageModel

    with caplog.at_level("WARNING", logger="unsloth_zoo.mlx.lora"):
        model = FastLanguageModel.get_peft_model(build_moe_model("nemotron_h"), r=4, target_modules=NEMOTRON_NOTEBOOK)
    assert any("'gate_proj' names no layer" in record.getMessage() for record in caplog.records)
    moe = [block.mixer for block in model.layers if hasattr(block.mixer, "switch_mlp")]
    assert moe
    for mixer in moe:
        assert isinstance(mixer.switch_mlp.fc1, LoRASwitchLinear) and isinstance(mixer.switch_mlp.fc2, LoRASwitchLinear)
        assert hasattr(mixer.shared_experts.up_proj, "lora_a") and hasattr(mixer.shared_experts.down_proj, "lora_a")
    assert np.isfinite(_forward(model)).all()
