"""`FastModel` with its published keywords: `full_finetuning`, `load_in_4bit` / `load_in_8bit`, and
`get_peft_model`'s `finetune_*` switches mapped onto the text model's modules; a quantized base never trains
without LoRA."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import NEUTRAL_CWD

ATTENTION = {"q_proj", "k_proj", "v_proj", "o_proj"}
MLP = {"gate_proj", "up_proj", "down_proj"}


def _lora_targets(model) -> set:
    from unsloth_zoo.mlx.lora import lora_settings

    return {key.rsplit(".", 1)[-1] for key in lora_settings(model).keys}


def test_from_unsloth_import_fast_model_in_a_fresh_interpreter() -> None:
    code = "from unsloth import FastModel; print(FastModel.__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=NEUTRAL_CWD)
    assert result.returncode == 0 and result.stdout.strip() == "FastModel", result.stderr


def test_the_gemma_3_notebooks_calls(tiny_model_dir) -> None:
    from unsloth import FastModel

    model, tokenizer = FastModel.from_pretrained(
        model_name=str(tiny_model_dir),
        max_seq_length=2048,
        load_in_4bit=True,
        load_in_8bit=False,
        full_finetuning=False,
    )
    model = FastModel.get_peft_model(
        model,
        finetune_vision_layers=False,
        finetune_language_layers=True,
        finetune_attention_modules=True,
        finetune_mlp_modules=True,
        r=8,
        lora_alpha=8,
        lora_dropout=0,
        bias="none",
        random_state=3407,
    )
    assert _lora_targets(model) == ATTENTION | MLP
    assert type(model.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"


@pytest.mark.parametrize(
    ("switches", "targets"),
    [({"finetune_mlp_modules": False}, ATTENTION), ({"finetune_attention_modules": False}, MLP)],
)
def test_switches_choose_the_modules(tiny_model_dir, switches, targets) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(tiny_model_dir), load_in_4bit=False)
    assert _lora_targets(FastModel.get_peft_model(model, r=8, **switches)) == targets


@pytest.mark.parametrize(
    ("switches", "named"),
    [
        ({"finetune_vision_layers": True}, "finetune_vision_layers=True"),
        ({"finetune_language_layers": False}, "finetune_language_layers=False"),
        ({"finetune_attention_modules": False, "finetune_mlp_modules": False}, "finetune_mlp_modules=False"),
    ],
)
def test_switches_that_leave_nothing_or_need_vision_are_refused_by_name(tiny_model_dir, switches, named) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(tiny_model_dir), load_in_4bit=False)
    with pytest.raises(NotImplementedError, match=named):
        FastModel.get_peft_model(model, r=8, **switches)


def test_full_finetuning_loads_unquantized_when_4bit_is_left_at_its_default(tiny_model_dir) -> None:
    from unsloth import FastModel
    from unsloth.mlx.models.quantize import model_quantization

    model, _ = FastModel.from_pretrained(str(tiny_model_dir), full_finetuning=True)
    assert model_quantization(model) is None
    model, _ = FastModel.from_pretrained(str(tiny_model_dir))
    assert model_quantization(model).bits == 4  # the published default, as on CUDA
    with pytest.raises(NotImplementedError, match="full_finetuning=True with load_in_4bit=True"):
        FastModel.from_pretrained(str(tiny_model_dir), load_in_4bit=True, full_finetuning=True)


@pytest.mark.parametrize("entry", ["FastModel", "FastLanguageModel"])
def test_get_peft_model_after_a_full_finetuning_load_adds_no_lora_as_on_cuda(tiny_model_dir, capsys, entry) -> None:
    import unsloth
    from unsloth_zoo.mlx.lora import lora_settings

    fast = getattr(unsloth, entry)
    model, _ = fast.from_pretrained(str(tiny_model_dir), full_finetuning=True)
    assert fast.get_peft_model(model, r=8, lora_alpha=8) is model and lora_settings(model) is None
    assert "Full finetuning is enabled, so .get_peft_model has no effect" in capsys.readouterr().out


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_base_without_lora_is_refused_at_the_trainer(load_public, quiet_args, chat_rows, bits) -> None:
    from unsloth import UnslothTrainer

    model, tokenizer = load_public(**{f"load_in_{bits}bit": True})
    with pytest.raises(NotImplementedError, match=f"load_in_{bits}bit=True and has no LoRA"):
        UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args())


def test_get_peft_model_after_a_full_finetuning_load_still_takes_gradient_checkpointing(tiny_model_dir) -> None:
    from unsloth import FastLanguageModel
    from unsloth_zoo.mlx.checkpointing import wants_gradient_checkpointing

    model, _ = FastLanguageModel.from_pretrained(str(tiny_model_dir), full_finetuning=True)
    model = FastLanguageModel.get_peft_model(model, r=8, use_gradient_checkpointing="unsloth")
    assert wants_gradient_checkpointing(model)
