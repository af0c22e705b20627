"""`use_gradient_checkpointing` and `gradient_checkpointing` as notebooks write them: heard, not warned about."""

from __future__ import annotations

import warnings
from typing import Any, List

import pytest

from unsloth_zoo.mlx.checkpointing import MODEL_ATTRIBUTE, is_checkpointed, transformer_blocks


def no_effect_warnings(caught: List[warnings.WarningMessage]) -> List[str]:
    return [str(item.message) for item in caught if "no effect" in str(item.message)]


class BlockWatcher:
    """Notes at each step whether every transformer block of the model recomputes its activations."""

    def __init__(self) -> None:
        self.seen: List[bool] = []

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
        self.seen.append(all(is_checkpointed(block) for block in transformer_blocks(model)))


@pytest.mark.parametrize("value", [True, "unsloth"])
def test_the_loader_and_get_peft_model_take_it_without_a_warning(load_public, value) -> None:
    from unsloth import FastLanguageModel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, _ = load_public(use_gradient_checkpointing=value)
        assert getattr(model, MODEL_ATTRIBUTE) is True
        model = FastLanguageModel.get_peft_model(model, r=8, use_gradient_checkpointing=False)
    assert no_effect_warnings(caught) == []
    assert getattr(model, MODEL_ATTRIBUTE) is False


def test_fast_model_passes_it_on(tiny_model_dir) -> None:
    from unsloth import FastModel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, _ = FastModel.from_pretrained(
            str(tiny_model_dir), load_in_4bit=False, use_gradient_checkpointing="unsloth"
        )
        model = FastModel.get_peft_model(model, r=8, use_gradient_checkpointing=True)
    assert no_effect_warnings(caught) == []
    assert getattr(model, MODEL_ATTRIBUTE) is True


def test_an_unknown_value_is_refused(load_public) -> None:
    with pytest.raises(ValueError, match="got 'offload'"):
        load_public(use_gradient_checkpointing="offload")


def test_sft_training_recomputes_when_get_peft_model_asked(load_public, chat_rows, quiet_args) -> None:
    from unsloth import FastLanguageModel, UnslothTrainer

    losses = {}
    for value in (False, "unsloth"):
        model, tokenizer = load_public()
        model = FastLanguageModel.get_peft_model(
            model, r=8, lora_alpha=16, random_state=0, use_gradient_checkpointing=value
        )
        watcher = BlockWatcher()
        trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(), callbacks=[watcher])
        trainer.train()
        assert watcher.seen == [bool(value)] * 4
        losses[value] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses["unsloth"] == pytest.approx(losses[False], abs=1e-5)


def test_training_arguments_ask_for_it_without_a_warning(load_public, chat_rows, quiet_args) -> None:
    from trl import SFTConfig

    from unsloth import UnslothTrainer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = SFTConfig(
            output_dir=quiet_args().output_dir, max_steps=2, save_strategy="no", gradient_checkpointing=True
        )
    assert no_effect_warnings(caught) == []
    model, tokenizer = load_public(lora=True)
    watcher = BlockWatcher()
    UnslothTrainer(model, tokenizer, chat_rows, args=config, callbacks=[watcher]).train()
    assert watcher.seen == [True, True]
    assert not any(is_checkpointed(block) for block in transformer_blocks(model))


def test_the_dpo_config_asks_for_it(load_public, quiet_args) -> None:
    from trl import DPOConfig, DPOTrainer

    model, tokenizer = load_public(lora=True)
    rows = [{"prompt": "Say yes.", "chosen": " yes", "rejected": " no"}] * 2
    config = DPOConfig(output_dir=quiet_args().output_dir, max_steps=1, save_strategy="no", gradient_checkpointing=True)
    watcher = BlockWatcher()
    DPOTrainer(model, args=config, train_dataset=rows, processing_class=tokenizer, callbacks=[watcher]).train()
    assert watcher.seen == [True]


def test_vision_training_recomputes_language_and_vision_blocks(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import BUILDERS
    from unsloth import FastVisionModel

    from .test_vision import rows, vision_config

    from trl import SFTTrainer
    from unsloth.trainer import UnslothVisionDataCollator

    folder = BUILDERS["qwen2_5_vl"](tmp_path / "vlm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, processor = FastVisionModel.from_pretrained(str(folder), use_gradient_checkpointing="unsloth")
        model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, use_gradient_checkpointing=True)
    assert no_effect_warnings(caught) == []
    blocks = transformer_blocks(model)
    assert {type(block).__module__.split(".")[-1] for block in blocks} == {"language", "vision"}
    watcher = BlockWatcher()
    SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows("qwen2_5_vl", 1),
        args=vision_config(tmp_path, max_steps=2),
        callbacks=[watcher],
    ).train()
    assert watcher.seen == [True, True]


def test_grpo_samples_and_trains_with_recomputed_blocks(load_public, tmp_path) -> None:
    from .test_grpo import build

    rising = [lambda completions, **kw: [float(i) for i in range(len(completions))]]
    losses = {}
    for value in (False, True):
        trainer = build(load_public, tmp_path / str(value), rising, beta=0.1, gradient_checkpointing=value)
        watcher = BlockWatcher()
        trainer.add_callback(watcher)
        trainer.train()
        assert watcher.seen == [value, value]
        losses[value] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)
