"""DPO and ORPO on MLX through TRL's names: the notebooks' keywords, the reference policy, rows and bad input.

Parity of the numbers with TRL's own trainers is in with_torch/test_preference_parity.py; here the trainers run
on the tiny llama in any session, trl installed or not.
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from .conftest import run_python

ZEPHYR = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|eos|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def rows(count: int = 6) -> list:
    return [
        {"prompt": f"Question {index}: which bird sings?", "chosen": " The small one.", "rejected": " Nobody"}
        for index in range(count)
    ]


def dataset(values: list):
    import datasets

    return datasets.Dataset.from_list(values)


def notebook_dpo_config(output_dir: Path, **extra):
    from trl import DPOConfig

    values = dict(
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        warmup_ratio=0.1,
        max_steps=3,
        learning_rate=5e-3,
        fp16=False,
        bf16=False,
        logging_steps=1,
        optim="adamw_8bit",
        weight_decay=0.0,
        lr_scheduler_type="linear",
        seed=42,
        output_dir=str(output_dir),
        report_to="none",
        save_strategy="no",
    )
    return DPOConfig(**{**values, **extra})


def plain_log_probs(model, ids: list) -> float:
    """The summed log-probability of `ids[1:]` under `model`, computed here without the trainer's code."""
    logits = np.array(model(mx.array([ids[:-1]]))[0].astype(mx.float32), dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(sum(log_probs[position, token] for position, token in enumerate(ids[1:])))


def test_the_notebooks_keywords_train_and_log_trl_metrics(load_public, tmp_path, recorder) -> None:
    from trl import DPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    trainer = DPOTrainer(
        model,
        ref_model=None,
        args=notebook_dpo_config(tmp_path / "out"),
        beta=0.25,
        train_dataset=dataset(rows()),
        tokenizer=tokenizer,
        max_length=48,
        max_prompt_length=6,
        callbacks=[recorder],
    )
    assert trainer.args.beta == 0.25 and trainer.args.max_prompt_length == 6 and trainer.args.max_seq_length == 48
    assert trainer.args.optim == "adamw" and trainer.args.warmup_ratio == 0.1
    # max_prompt_length keeps the prompt's last 6 tokens, as TRL 0.2x did.
    (chosen, start), _ = trainer.train_rows.sequences[0]
    assert start == 6 and chosen[:6] == trainer.train_rows.pairs[0].prompt_ids[-6:]
    trainer.train()
    logs = [entry for entry in recorder.logs if "loss" in entry]
    assert len(logs) == 3
    expected = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"}
    expected |= {"logps/chosen", "logps/rejected", "logits/chosen", "logits/rejected"}
    assert expected <= set(logs[0])
    assert math.isclose(logs[0]["loss"], math.log(2), abs_tol=1e-6) and logs[0]["rewards/margins"] == 0.0
    assert logs[-1]["rewards/margins"] > 0 and logs[-1]["loss"] < math.log(2)


def test_ref_model_none_with_lora_is_the_model_with_its_adapters_off(load_public, tmp_path) -> None:
    from trl import DPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    trainer = DPOTrainer(
        model,
        None,
        notebook_dpo_config(tmp_path / "out", learning_rate=5e-2),
        train_dataset=dataset(rows()),
        processing_class=tokenizer,
    )
    trainer.train()
    base, _ = load_public(max_seq_length=128)
    batch_sequences = trainer.train_rows.sequences[:2]
    from unsloth.mlx.rl.preference_trainer import pair_batch

    reference = np.array(trainer.reference_values(pair_batch(batch_sequences, trainer.pad_id)))
    expected = []
    for side in (0, 1):
        for pair in batch_sequences:
            ids, start = pair[side]
            expected.append(plain_log_probs(base, ids) - plain_log_probs(base, ids[:start]))
    np.testing.assert_allclose(reference[[0, 1, 2, 3]], expected, rtol=1e-5)
    # The adapters did train: the policy itself moved away from the reference.
    policy = plain_log_probs(model, batch_sequences[0][0][0]) - plain_log_probs(model, batch_sequences[0][0][0][:start])
    assert abs(policy - expected[0]) > 1e-3


def test_the_reference_pass_runs_the_base_layers_without_the_adapters(load_public) -> None:
    from mlx.utils import tree_map_with_path

    from unsloth.mlx.rl.reference import ReferencePolicy

    model, _ = load_public(lora=True, max_seq_length=128)
    base, _ = load_public(max_seq_length=128)
    ids = list(range(5, 21))
    expected = plain_log_probs(base, ids)
    # NaN adapters poison any pass that still multiplies through them, even by a zeroed lora_b.
    model.update(tree_map_with_path(lambda path, array: array * float("nan"), model.trainable_parameters()))
    found = ReferencePolicy(model).run(lambda reference: mx.array(plain_log_probs(reference, ids)))
    assert float(found) == pytest.approx(expected, rel=1e-5)
    # The adapters are back in place afterwards.
    assert math.isnan(plain_log_probs(model, ids))


def test_a_pair_batch_windows_each_completion_from_its_first_target() -> None:
    from unsloth.mlx.rl.preference_trainer import pair_batch

    # Prompts of 3 and 1 tokens, completions of 2 and 4; the second pair's rejected side is the widest row.
    chosen = [([5, 6, 7, 8, 9], 3), ([5, 6, 7], 1)]
    rejected = [([5, 6, 7, 10], 3), ([5, 11, 12, 13, 14, 15], 1)]
    batch = pair_batch(list(zip(chosen, rejected)), pad_id=0)
    # Target t predicts token t + 1, so a prompt of n tokens puts its completion's first target at n - 1.
    assert np.array(batch.answer_positions).tolist() == [
        [2, 3, 3, 3, 3],
        [0, 1, 1, 1, 1],
        [2, 2, 2, 2, 2],
        [0, 1, 2, 3, 4],
    ]
    assert np.array(batch.answer_mask).tolist() == [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1] * 5]
    picked = np.take_along_axis(np.array(batch.completion), np.array(batch.answer_positions), axis=1)
    assert (picked * np.array(batch.answer_mask)).sum() == np.array(batch.completion).sum()
    # Rounded for a compiled step, the window only grows by masked places.
    wide = pair_batch(list(zip(chosen, rejected)), pad_id=0, multiple=4)
    assert np.array(wide.answer_mask).sum() == np.array(batch.answer_mask).sum()
    assert wide.answer_positions.shape[1] % 4 == 0 and wide.answer_positions.max() < wide.tokens.shape[1] - 1


def test_dpo_sequence_log_probs_sum_each_completion_whatever_its_prompt(load_public) -> None:
    from unsloth.mlx.rl.dpo import sequence_log_probs
    from unsloth.mlx.rl.preference_trainer import pair_batch

    model, _ = load_public(max_seq_length=128)
    chosen = [(list(range(5, 17)), 7), (list(range(20, 25)), 2)]
    rejected = [(list(range(30, 39)), 7), (list(range(40, 56)), 2)]
    found = np.array(sequence_log_probs(model, pair_batch(list(zip(chosen, rejected)), pad_id=0)))
    expected = [plain_log_probs(model, ids) - plain_log_probs(model, ids[:start]) for ids, start in chosen + rejected]
    np.testing.assert_allclose(found, expected, rtol=1e-5)


def test_orpo_trains_with_the_notebooks_keywords(load_public, tmp_path, recorder) -> None:
    from trl import ORPOConfig, ORPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    args = ORPOConfig(
        learning_rate=8e-3,
        lr_scheduler_type="linear",
        max_length=64,
        max_prompt_length=32,
        max_completion_length=32,
        beta=0.1,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        optim="adamw_8bit",
        max_steps=3,
        logging_steps=1,
        warmup_ratio=0.1,
        report_to="none",
        output_dir=str(tmp_path / "out"),
        save_strategy="no",
    )
    trainer = ORPOTrainer(
        model=model, train_dataset=dataset(rows()), tokenizer=tokenizer, args=args, callbacks=[recorder]
    )
    # The config's max_length cuts each sequence, as TRL's does, below the 128 positions the model was loaded for.
    assert trainer.args.max_seq_length == 64
    trainer.train()
    logs = [entry for entry in recorder.logs if "loss" in entry]
    assert {"nll_loss", "log_odds_ratio", "log_odds_chosen", "rewards/margins"} <= set(logs[0])
    first = logs[0]
    # TRL's ORPO loss: the NLL minus beta times the mean log-sigmoid of the log odds (one batch, so means agree).
    assert math.isclose(first["loss"], first["nll_loss"] - 0.1 * first["log_odds_ratio"], rel_tol=1e-5)
    assert logs[-1]["nll_loss"] < first["nll_loss"]


def test_conversational_rows_use_the_chat_template_as_trl_does(load_public, tmp_path) -> None:
    from trl import DPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    tokenizer.chat_template = ZEPHYR
    conversation = [
        {
            "prompt": [{"role": "user", "content": "Which bird sings?"}],
            "chosen": [{"role": "assistant", "content": "The small one."}],
            "rejected": [{"role": "assistant", "content": "Nobody."}],
        }
    ] * 2
    trainer = DPOTrainer(
        model,
        args=notebook_dpo_config(tmp_path / "out"),
        train_dataset=dataset(conversation),
        processing_class=tokenizer,
    )
    prompt_text = "<|user|>\nWhich bird sings?<|eos|>\n<|assistant|>\n"
    whole = tokenizer(prompt_text + "The small one.<|eos|>\n")["input_ids"]
    pair = trainer.train_rows.pairs[0]
    assert pair.prompt_ids == tokenizer(prompt_text)["input_ids"]
    assert pair.prompt_ids + pair.chosen_ids == whole


@pytest.mark.parametrize(
    ("bad_rows", "error", "words"),
    [
        ([{"question": "q", "chosen": "a", "rejected": "b"}], ValueError, ["train_dataset", "'prompt'"]),
        (
            [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q", "chosen": 3, "rejected": "b"}],
            TypeError,
            ["row 1", "'chosen'", "int"],
        ),
        (
            [{"prompt": "q", "chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]}],
            TypeError,
            ["row 0", "all be strings or all be conversations"],
        ),
    ],
)
@pytest.mark.parametrize("method", ["DPO", "ORPO"])
def test_bad_rows_get_one_message_and_nothing_written(load_public, tmp_path, method, bad_rows, error, words) -> None:
    import trl

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    output = tmp_path / "out"
    args = getattr(trl, f"{method}Config")(output_dir=str(output), max_steps=1, report_to="none")
    with pytest.raises(error) as raised:
        # A plain list of rows: Arrow itself would refuse to mix types in a column.
        getattr(trl, f"{method}Trainer")(model=model, args=args, train_dataset=bad_rows, tokenizer=tokenizer)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    assert not output.exists()


@pytest.mark.parametrize(
    ("keywords", "error", "word"),
    [
        ({"loss_type": "ipo"}, NotImplementedError, "loss_type='ipo'"),
        ({"label_smoothing": 0.1}, NotImplementedError, "label_smoothing=0.1"),
        ({"beta": -1.0}, ValueError, "beta=-1.0"),
        ({"max_prompt_length": 0}, ValueError, "max_prompt_length=0"),
    ],
)
def test_dpo_config_refuses_what_it_cannot_honour_by_name(tmp_path, keywords, error, word) -> None:
    from trl import DPOConfig

    with pytest.raises(error, match=word.replace("(", r"\(").replace(".", r"\.")):
        DPOConfig(output_dir=str(tmp_path), **keywords)


def test_trainer_level_beta_is_checked_like_the_configs(load_public, tmp_path) -> None:
    from trl import DPOTrainer

    model, tokenizer = load_public(lora=True, max_seq_length=128)
    with pytest.raises(ValueError, match="beta=0"):
        DPOTrainer(
            model, args=notebook_dpo_config(tmp_path), beta=0, train_dataset=dataset(rows()), tokenizer=tokenizer
        )


PROBE = """
import json, sys
import unsloth
from unsloth import PatchDPOTrainer, PatchFastRL, FastLanguageModel
from trl import DPOTrainer, DPOConfig, ORPOTrainer, ORPOConfig, KTOTrainer
from trl.experimental.orpo import ORPOTrainer as HomeTrainer, ORPOConfig as HomeConfig
import warnings
warnings.simplefilter("ignore")  # the real trl.experimental warns that its APIs may change
from trl.experimental import orpo as home
try:
    KTOTrainer(None)
    refusal = None
except NotImplementedError as error:
    refusal = str(error)
print(json.dumps({
    "patch": [PatchDPOTrainer(), PatchFastRL("GRPO", FastLanguageModel)],
    "dpo": [DPOTrainer.__module__, DPOConfig.__module__],
    "orpo": [ORPOTrainer.__module__, HomeTrainer is ORPOTrainer, HomeConfig is ORPOConfig],
    "home_all": sorted(home.__all__),
    "refusal": refusal,
    "torch": "torch" in sys.modules,
}))
"""


def test_trl_names_and_patch_calls_in_a_fresh_interpreter(trl_situation) -> None:
    found = run_python(PROBE)
    assert found["patch"] == [None, None]
    assert found["dpo"] == ["unsloth.mlx.rl.dpo", "unsloth.mlx.rl.dpo_config"]
    assert found["orpo"] == ["unsloth.mlx.rl.orpo", True, True] and found["home_all"] == ["ORPOConfig", "ORPOTrainer"]
    assert found["refusal"].startswith("KTOTrainer is not available on MLX")
    assert "DPOTrainer" in found["refusal"] and found["torch"] is False


BLOCKED = """
import importlib.abc, json, sys, warnings


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "unsloth.mlx.rl.dpo":
            raise ImportError("blocked for the test")
        return None


sys.meta_path.insert(0, Blocker())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import unsloth
    import trl
from unsloth import UnslothTrainer
try:
    trl.DPOTrainer(None)
    refusal = None
except NotImplementedError as error:
    refusal = str(error)
print(json.dumps({
    "sft": trl.SFTTrainer is UnslothTrainer,
    "orpo": trl.ORPOTrainer.__module__,
    "refusal": refusal,
    "warnings": [str(item.message) for item in caught],
}))
"""


def test_a_trainer_that_fails_to_load_refuses_by_name_and_the_rest_of_trl_is_patched(trl_situation) -> None:
    found = run_python(BLOCKED)
    assert found["sft"] and found["orpo"] == "unsloth.mlx.rl.orpo"
    assert found["refusal"].startswith("DPOTrainer is not available on MLX")
    assert any(
        "could not load DPOTrainer" in message and "blocked for the test" in message for message in found["warnings"]
    )


@pytest.mark.parametrize(("loaded", "expected"), [(2048, 1024), (128, 128)])
def test_max_length_defaults_to_trls_1024_within_the_models_length(tiny_model_dir, tmp_path, loaded, expected) -> None:
    from trl import DPOTrainer

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir), max_seq_length=loaded)
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
    model.max_seq_length = loaded  # the tiny llama has 512 positions; the notebooks' models have thousands
    model.args.max_position_embeddings = max(loaded, 512)
    trainer = DPOTrainer(model, args=notebook_dpo_config(tmp_path), train_dataset=rows(), tokenizer=tokenizer)
    assert trainer.args.max_seq_length == expected


@pytest.mark.parametrize("disable", [True, False])
def test_disable_dropout_turns_off_the_lora_dropout_as_trl_does(tiny_model_dir, tmp_path, disable) -> None:
    import mlx.nn as nn
    from trl import ORPOConfig, ORPOTrainer

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir), max_seq_length=128)
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0.3, random_state=0)
    args = ORPOConfig(output_dir=str(tmp_path), disable_dropout=disable, max_steps=1)
    ORPOTrainer(model=model, args=args, train_dataset=rows(), tokenizer=tokenizer)
    rates = {round(1 - module._p_1, 6) for _, module in model.named_modules() if isinstance(module, nn.Dropout)}
    assert rates == ({0.0} if disable else {0.3})
