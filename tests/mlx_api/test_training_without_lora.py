"""A trainer given a model without LoRA adapters says once that it will train every weight (after a refused
get_peft_model the base would otherwise be fully fine-tuned in silence), unless the load asked for a full fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx.utils import tree_flatten

ROWS = [{"text": f"The kettle number {n} boils water for tea."} for n in range(4)]
LOGGER = "unsloth_zoo.mlx.lora"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    return build_tiny_mlx_model(tmp_path_factory.mktemp("llama") / "model")


def _trainer_warnings(model: Any, tokenizer: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> list:
    from unsloth import UnslothTrainer, UnslothTrainingArguments

    arguments = UnslothTrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, max_seq_length=32)
    caplog.clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=ROWS, args=arguments)
    return [record.getMessage() for record in caplog.records if "no LoRA adapters" in record.getMessage()]


def test_a_refused_get_peft_model_then_training_warns_once_with_the_count(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir))
    with pytest.raises(ValueError, match="bogus_proj"):
        FastLanguageModel.get_peft_model(model, target_modules=["q_proj", "bogus_proj"])
    warned = _trainer_warnings(model, tokenizer, tmp_path, caplog)
    count = sum(array.size for _, array in tree_flatten(model.parameters()))
    assert len(warned) == 1, warned
    assert f"all {count:,} of its trainable parameters" in warned[0] and "full_finetuning=True" in warned[0]


def test_full_finetuning_at_load_trains_whole_without_a_warning(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir), full_finetuning=True)
    assert _trainer_warnings(model, tokenizer, tmp_path, caplog) == []


def test_a_model_with_lora_trains_without_a_warning(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir))
    model = FastLanguageModel.get_peft_model(model, r=4, target_modules=["q_proj", "v_proj"])
    assert _trainer_warnings(model, tokenizer, tmp_path, caplog) == []
