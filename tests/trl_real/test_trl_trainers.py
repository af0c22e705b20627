"""The real TRL trainers, built through unsloth, prepare their data with the policy's worker counts, then train.

Every pool `datasets` builds is recorded on `multiprocess.pool.Pool.__init__` (tools/kits/pool_spy.py). For each
trainer: auto on 1,000 rows, auto on 40,000 rows, explicit 1 and 0, and UNSLOTH_DATASET_NUM_PROC at 0 and 4.
"""

from __future__ import annotations


import pytest

import unsloth  # noqa: F401  (installs the trl patch before trl is imported)
import unsloth_num_proc
from tools.kits.fake_host import POLICY_ENV_VARS
from tools.kits.pool_spy import spy_pools

trl = pytest.importorskip("trl")

# transformers and trl announce their own deprecations while building configs; they are not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

SMALL, LARGE = 1_000, 40_000
TOPICS = ["the moon", "bread", "tomatoes", "a bicycle", "rain", "the harbour", "a kettle", "maps"]


def _prompt(i: int) -> str:
    return f"<|user|>\nTell me about {TOPICS[i % len(TOPICS)]} number {i}.\n<|assistant|>\n"


def sft_rows(n):
    return {"text": [_prompt(i) + f"It is a fine thing, number {i}." for i in range(n)]}


def paired_rows(n):
    return {
        "prompt": [_prompt(i) for i in range(n)],
        "chosen": [f"A good answer about {TOPICS[i % len(TOPICS)]}." for i in range(n)],
        "rejected": [f"Something else entirely, {i}." for i in range(n)],
    }


def reward_rows(n):
    rows = paired_rows(n)
    return {
        "chosen": [p + c for p, c in zip(rows["prompt"], rows["chosen"])],
        "rejected": [p + r for p, r in zip(rows["prompt"], rows["rejected"])],
    }


def unpaired_rows(n):
    return {
        "prompt": [_prompt(i) for i in range(n)],
        "completion": [f"Answer {i} about {TOPICS[i % len(TOPICS)]}." for i in range(n)],
        "label": [i % 2 == 0 for i in range(n)],
    }


TRAINERS = {
    "SFT": (sft_rows, {"max_length": 64}),
    "DPO": (paired_rows, {"max_length": 64}),
    "KTO": (unpaired_rows, {"max_length": 64}),
    "Reward": (reward_rows, {"max_length": 64}),
    "CPO": (paired_rows, {"max_length": 64}),
    "ORPO": (paired_rows, {"max_length": 64}),
}
# trl 1.16 keeps these in trl.experimental, and no longer ships PRM at all.
EXPERIMENTAL = {"CPO": "trl.experimental.cpo", "ORPO": "trl.experimental.orpo"}
REFERENCE_MODEL_TRAINERS = ("DPO", "KTO")
CASES = {
    "auto-small": (SMALL, None, {}),
    "auto-large": (LARGE, None, {}),
    "explicit-1": (SMALL, 1, {}),
    "explicit-0": (SMALL, 0, {}),
    "hatch-0": (SMALL, None, {"UNSLOTH_DATASET_NUM_PROC": "0"}),
    "hatch-4": (SMALL, None, {"UNSLOTH_DATASET_NUM_PROC": "4"}),
}


@pytest.fixture(autouse=True)
def _this_host(monkeypatch, maps_really_run):
    for name in POLICY_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    import datasets

    datasets.disable_progress_bars()


def _config(name, tmp_path, batch_size=2, **fields):
    from unsloth import trainers

    extra = TRAINERS[name][1]
    return getattr(trainers, f"{name}Config")(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        max_steps=2,
        per_device_train_batch_size=batch_size,
        logging_steps=1,
        save_strategy="no",
        **extra,
        **fields,
    )


def _trl_module(name):
    import importlib

    return importlib.import_module(EXPERIMENTAL.get(name, "trl"))


def _build(name, request, tokenizer, config, rows):
    import datasets

    dataset = datasets.Dataset.from_dict(TRAINERS[name][0](rows))
    models = {"model": request.getfixturevalue("tiny_llama_scorer" if name == "Reward" else "tiny_llama")}
    if name in REFERENCE_MODEL_TRAINERS:
        # Nothing can be downloaded here, so the frozen reference is built locally too.
        models["ref_model"] = request.getfixturevalue("tiny_llama_reference")
    trainer_class = getattr(_trl_module(name), f"{name}Trainer")
    return trainer_class(**models, args=config, train_dataset=dataset, processing_class=tokenizer)


def test_the_names_are_trls_own_configs():
    from unsloth import trainers

    for name in TRAINERS:
        assert getattr(trainers, f"{name}Config") is getattr(_trl_module(name), f"{name}Config")


def test_a_config_this_trl_no_longer_ships_is_named():
    from unsloth import trainers

    with pytest.raises(ImportError, match="does not ship PRMConfig"):
        _ = trainers.PRMConfig


def test_patching_twice_changes_nothing():
    from unsloth.trl_patch import patch_trl

    post_init = trl.SFTConfig.__post_init__
    prepare = trl.SFTTrainer._prepare_dataset
    patch_trl(trl)
    assert (trl.SFTConfig.__post_init__, trl.SFTTrainer._prepare_dataset) == (post_init, prepare)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_pools_follow_the_policy(name, case, request, hf_tokenizer, monkeypatch, tmp_path):
    rows, requested, env = CASES[case]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # Built, never trained: KTO maps its KL completions in batches of the training batch, and at 2 rows a batch that
    # map of 40,000 rows took most of two minutes (the policy reads no batch size).
    config = _config(name, tmp_path, batch_size=64, dataset_num_proc=requested)
    with spy_pools() as log:
        _build(name, request, hf_tokenizer, config, rows)
    pools = log.process_pools()
    if case == "hatch-4":
        assert pools and set(pools) == {4}
    elif case == "auto-large":
        # With rows known, auto gives this host at most this many workers; a forking 2-CPU host gets 2.
        largest = unsloth_num_proc.load_policy().get_dataset_num_proc(None, rows=LARGE)
        assert pools and all(2 <= size <= largest for size in pools), pools
    else:
        assert pools == [], pools


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_each_trainer_trains_two_steps(name, request, hf_tokenizer, tmp_path):
    trainer = _build(name, request, hf_tokenizer, _config(name, tmp_path), 64)
    result = trainer.train()
    assert result.global_step == 2


def test_a_renamed_preparation_method_is_loud_and_still_sizes_maps(hf_tokenizer, tiny_llama, tmp_path):
    from unsloth.trl_patch import trainers as patched_trainers

    class RenamedTrainer(trl.SFTTrainer):
        pass

    # A newer trl that renamed the method: the class has no `_prepare_dataset` anywhere in its ancestry.
    renamed = type("SFTTrainer", (), {"__init__": RenamedTrainer.__init__})
    fake_trl = type("FakeTrl", (), {"SFTTrainer": renamed, "__version__": "9.9.9"})
    with pytest.warns(patched_trainers.PreparationMethodMissing, match="SFTTrainer has no _prepare_dataset"):
        assert patched_trainers.patch_trainer_classes(fake_trl, {"sft": trl.SFTConfig}) == ["SFTTrainer"]
    assert getattr(renamed.__init__, patched_trainers.WRAPPED_MARKER)


def test_a_heavy_tokenizer_keeps_every_step_of_the_preparation_in_process(
    heavy_hf_tokenizer, tiny_llama_for_heavy, tmp_path
):
    # 16,000 rows give a light pipeline 2 or more workers; a 128k-vocabulary tokenizer (~7 MiB pickled) is
    # worth no pool at that size, so neither its tokenizing map nor the cheap maps around it (EOS, labels,
    # truncation, the filter) may build one.
    import datasets

    rows = 16_000
    assert unsloth_num_proc.load_policy().get_dataset_num_proc(None, rows=rows) is not None
    dataset = datasets.Dataset.from_dict(sft_rows(rows))
    with spy_pools() as log:
        trl.SFTTrainer(
            model=tiny_llama_for_heavy,
            args=_config("SFT", tmp_path),
            train_dataset=dataset,
            processing_class=heavy_hf_tokenizer,
        )
    assert log.process_pools() == []
