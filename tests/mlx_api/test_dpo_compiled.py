"""A compiled DPO step (`mx_compile=True`, the GPU's default) logs what the uncompiled one does."""

from __future__ import annotations

import pytest

from .test_preference_trainers import dataset, notebook_dpo_config, rows


def dpo_logs(load_public, tmp_path, compiled: bool) -> list:
    from trl import DPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    trainer = DPOTrainer(
        model,
        ref_model=None,
        args=notebook_dpo_config(tmp_path / str(compiled), mx_compile=compiled, max_steps=4),
        beta=0.25,
        train_dataset=dataset(rows()),
        tokenizer=tokenizer,
        max_length=48,
    )
    trainer.train()
    return [entry for entry in trainer.state.log_history if "loss" in entry]


def test_compiled_dpo_logs_the_uncompiled_values(load_public, tmp_path) -> None:
    plain = dpo_logs(load_public, tmp_path, False)
    compiled = dpo_logs(load_public, tmp_path, True)
    assert len(plain) == len(compiled) == 4
    for expected, found in zip(plain, compiled):
        assert found.keys() == expected.keys()
        for name, value in expected.items():
            assert found[name] == pytest.approx(value, abs=1e-5), name
    # The step learned something, so the comparison is not one of two untouched models.
    assert plain[-1]["rewards/margins"] > 0
