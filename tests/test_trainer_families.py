"""unsloth's trainer families: what each config writes for `dataset_num_proc`, and what each preparation tokenizes.

Expected worker counts come from the policy on a faked host, with the encoding read from the table
in the policy's `DATASET_NUM_PROC_LAYER`; expected tokens come from the real tokenizer applied to the same text.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path

import pytest

import unsloth_num_proc
from tools.kits.fake_host import POLICY_ENV_VARS, HostProfile, apply_host
from tools.kits.pool_spy import spy_pools
from tools.kits.sft_data import (
    INSTRUCTION_PART,
    RESPONSE_PART,
    build_preference_rows,
    build_sft_rows,
    build_stepwise_rows,
    build_unpaired_rows,
)
from unsloth import chat_templates
from unsloth.trainers import (
    CONFIG_LAYER,
    DATASET_NUM_PROC_LAYER,
    IGNORE_INDEX,
    MAP_LAYER,
    TRAINER_FAMILIES,
    make_config,
    prepare_dataset,
)

REPO = Path(__file__).resolve().parent.parent
FAMILIES = sorted(DATASET_NUM_PROC_LAYER)
PAIRED_FAMILIES = [family for family in FAMILIES if TRAINER_FAMILIES[family].prepare is TRAINER_FAMILIES["dpo"].prepare]
REQUESTS = [None, 0, 1, 2, 3]
HOSTS = {
    "fork": HostProfile(platform="linux", cpu_count=8, start_method="fork", available_memory_gb=64.0),
    "spawn": HostProfile(platform="linux", cpu_count=8, start_method="spawn", available_memory_gb=64.0),
}
ROWS = 40


# ---- fixtures ----


@pytest.fixture(scope="module", autouse=True)
def _maps_really_run(maps_really_run):
    yield


@pytest.fixture
def real_host(monkeypatch):
    """This machine as it is, minus any policy variable the caller's shell may have set."""
    for name in POLICY_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return unsloth_num_proc.load_policy()


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """Apply a simulated host by name, optionally with extra environment variables; returns the loaded policy."""
    counter = itertools.count()
    policy = unsloth_num_proc.load_policy()

    def apply(name: str, **env: str):
        profile = HOSTS[name]
        profile = dataclasses.replace(profile, env=env)
        apply_host(monkeypatch, profile, tmp_path / f"host{next(counter)}", [policy])
        return policy

    return apply


def in_process(family: str):
    return make_config(family, dataset_num_proc=1)


def dataset_of(rows):
    import datasets

    return datasets.Dataset.from_list(rows)


def ids(tokenizer, text: str, special: bool = True) -> list:
    return tokenizer.encode(text, add_special_tokens=special).ids


# ---- the table ----


def test_the_table_names_every_family_and_only_known_layers():
    assert set(DATASET_NUM_PROC_LAYER) == set(TRAINER_FAMILIES)
    assert set(DATASET_NUM_PROC_LAYER.values()) <= {CONFIG_LAYER, MAP_LAYER}
    for family, entry in TRAINER_FAMILIES.items():
        assert entry.config_class.family == family


def test_unknown_family_is_named():
    with pytest.raises(KeyError, match="nope"):
        make_config("nope")
    with pytest.raises(KeyError, match="nope"):
        prepare_dataset("nope", None, None)


def test_a_config_of_another_family_is_refused(tokenizer):
    with pytest.raises(TypeError, match="DPODatasetConfig"):
        prepare_dataset("dpo", dataset_of(build_preference_rows(2)), tokenizer, make_config("kto", dataset_num_proc=1))


# ---- what each config writes ----


@pytest.mark.parametrize("host_name", sorted(HOSTS))
@pytest.mark.parametrize("request_value", REQUESTS)
@pytest.mark.parametrize("family", FAMILIES)
def test_config_writes_the_encoding_its_table_row_names(fake_host, family, host_name, request_value):
    policy = fake_host(host_name)
    layer = DATASET_NUM_PROC_LAYER[family]
    expected = policy.get_dataset_num_proc(request_value, serial_as_none=(layer == MAP_LAYER))
    assert make_config(family, dataset_num_proc=request_value).dataset_num_proc == expected


@pytest.mark.parametrize("serial", [0, 1])
@pytest.mark.parametrize("family", FAMILIES)
def test_serial_is_one_only_in_a_config_layer_on_a_forking_host(fake_host, family, serial):
    layer = DATASET_NUM_PROC_LAYER[family]
    fake_host("fork")
    assert make_config(family, dataset_num_proc=serial).dataset_num_proc == (1 if layer == CONFIG_LAYER else None)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_request_is_in_process_none_on_a_spawning_host(fake_host, family):
    fake_host("spawn")
    assert [make_config(family, dataset_num_proc=request).dataset_num_proc for request in REQUESTS] == [None] * len(
        REQUESTS
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_an_explicit_count_is_kept_on_a_roomy_forking_host(fake_host, family):
    fake_host("fork")
    assert make_config(family, dataset_num_proc=3).dataset_num_proc == 3


@pytest.mark.parametrize("family", FAMILIES)
def test_the_hatch_decides_every_config(fake_host, family):
    layer = DATASET_NUM_PROC_LAYER[family]
    fake_host("fork", UNSLOTH_DATASET_NUM_PROC="0")
    assert make_config(family, dataset_num_proc=3).dataset_num_proc == (1 if layer == CONFIG_LAYER else None)
    fake_host("fork", UNSLOTH_DATASET_NUM_PROC="5")
    assert make_config(family, dataset_num_proc=1).dataset_num_proc == 5


# ---- what each preparation tokenizes ----


def test_sft_tokenizes_the_text_field_and_truncates(real_host, tokenizer):
    rows = build_sft_rows(ROWS)
    config = make_config("sft", dataset_num_proc=1, max_length=64)
    result = prepare_dataset("sft", dataset_of(rows), tokenizer, config)
    expected = [ids(tokenizer, row["text"])[:64] for row in rows]
    assert any(len(ids(tokenizer, row["text"])) > 64 for row in rows), "no row is long enough to test truncation"
    assert result.column_names == ["input_ids", "attention_mask"]
    assert result["input_ids"] == expected
    assert result["attention_mask"] == [[1] * len(row) for row in expected]


@pytest.mark.parametrize("family", PAIRED_FAMILIES)
def test_paired_preference_families_tokenize_prompt_chosen_rejected(real_host, tokenizer, family):
    rows = build_preference_rows(ROWS)
    result = prepare_dataset(family, dataset_of(rows), tokenizer, in_process(family))
    assert sorted(result.column_names) == ["chosen_input_ids", "prompt_input_ids", "rejected_input_ids"]
    assert result["prompt_input_ids"] == [ids(tokenizer, row["prompt"]) for row in rows]
    assert result["chosen_input_ids"] == [ids(tokenizer, row["chosen"], special=False) for row in rows]
    assert result["rejected_input_ids"] == [ids(tokenizer, row["rejected"], special=False) for row in rows]


@pytest.mark.parametrize("family", PAIRED_FAMILIES)
def test_prompts_keep_their_end_and_completions_their_start(real_host, tokenizer, family):
    rows = build_preference_rows(ROWS)
    config = make_config(family, dataset_num_proc=1, max_prompt_length=5, max_completion_length=7)
    result = prepare_dataset(family, dataset_of(rows), tokenizer, config)
    assert result["prompt_input_ids"] == [ids(tokenizer, row["prompt"])[-5:] for row in rows]
    assert result["chosen_input_ids"] == [ids(tokenizer, row["chosen"], special=False)[:7] for row in rows]
    assert result["rejected_input_ids"] == [ids(tokenizer, row["rejected"], special=False)[:7] for row in rows]


def test_kto_tokenizes_prompt_and_completion_and_keeps_the_label(real_host, tokenizer):
    rows = build_unpaired_rows(ROWS)
    result = prepare_dataset("kto", dataset_of(rows), tokenizer, in_process("kto"))
    assert sorted(result.column_names) == ["completion_input_ids", "label", "prompt_input_ids"]
    assert result["prompt_input_ids"] == [ids(tokenizer, row["prompt"]) for row in rows]
    assert result["completion_input_ids"] == [ids(tokenizer, row["completion"], special=False) for row in rows]
    assert result["label"] == [row["label"] for row in rows]
    assert {True, False} <= set(result["label"])


def test_reward_puts_the_prompt_in_front_of_each_side(real_host, tokenizer):
    rows = build_preference_rows(ROWS)
    result = prepare_dataset("reward", dataset_of(rows), tokenizer, in_process("reward"))
    for side in ("chosen", "rejected"):
        expected = [ids(tokenizer, row["prompt"]) + ids(tokenizer, row[side], special=False) for row in rows]
        assert result[f"input_ids_{side}"] == expected
        assert result[f"attention_mask_{side}"] == [[1] * len(row) for row in expected]
    assert "prompt" not in result.column_names


def test_reward_without_a_prompt_column_scores_each_side_alone_and_truncates(real_host, tokenizer):
    rows = [{"chosen": row["chosen"], "rejected": row["rejected"]} for row in build_preference_rows(ROWS)]
    config = make_config("reward", dataset_num_proc=1, max_length=12)
    result = prepare_dataset("reward", dataset_of(rows), tokenizer, config)
    assert result["input_ids_chosen"] == [ids(tokenizer, row["chosen"])[:12] for row in rows]
    assert result["input_ids_rejected"] == [ids(tokenizer, row["rejected"])[:12] for row in rows]


def test_prm_labels_only_the_last_token_of_each_step(real_host, tokenizer):
    rows = build_stepwise_rows(ROWS)
    result = prepare_dataset("prm", dataset_of(rows), tokenizer, in_process("prm"))
    assert sorted(result.column_names) == ["attention_mask", "input_ids", "labels"]
    for row, input_ids, labels in zip(rows, result["input_ids"], result["labels"]):
        prompt = ids(tokenizer, row["prompt"])
        steps = [ids(tokenizer, step + "\n", special=False) for step in row["completions"]]
        assert input_ids == prompt + [token for step in steps for token in step]
        assert len(labels) == len(input_ids)
        step_ends = list(itertools.accumulate([len(prompt)] + [len(step) for step in steps]))[1:]
        assert [position + 1 for position, label in enumerate(labels) if label != IGNORE_INDEX] == step_ends
        assert [labels[end - 1] for end in step_ends] == [1 if label else 0 for label in row["labels"]]
    assert {0, 1} <= {label for labels in result["labels"] for label in labels}


def test_prm_truncates_ids_and_labels_together(real_host, tokenizer):
    rows = build_stepwise_rows(ROWS)
    result = prepare_dataset("prm", dataset_of(rows), tokenizer, make_config("prm", dataset_num_proc=1, max_length=20))
    full = prepare_dataset("prm", dataset_of(rows), tokenizer, in_process("prm"))
    assert result["input_ids"] == [row[:20] for row in full["input_ids"]]
    assert result["labels"] == [row[:20] for row in full["labels"]]


def test_prm_refuses_steps_and_labels_of_different_lengths(real_host, tokenizer):
    rows = [{"prompt": "Why?", "completions": ["One.", "Two."], "labels": [True]}]
    with pytest.raises(ValueError, match="2 completion steps but 1 labels"):
        prepare_dataset("prm", dataset_of(rows), tokenizer, in_process("prm"))


# ---- streaming ----

FAMILY_ROWS = {
    "sft": lambda n: [{"text": row["text"]} for row in build_sft_rows(n)],
    "dpo": build_preference_rows,
    "cpo": build_preference_rows,
    "orpo": build_preference_rows,
    "reward": build_preference_rows,
    "kto": build_unpaired_rows,
    "prm": build_stepwise_rows,
}


def test_every_family_has_rows_to_stream():
    assert set(FAMILY_ROWS) == set(DATASET_NUM_PROC_LAYER)


@pytest.mark.parametrize("family", FAMILIES)
def test_streaming_gets_no_num_proc_and_the_same_tokens(real_host, tokenizer, family):
    import datasets

    rows = FAMILY_ROWS[family](ROWS)
    sized = prepare_dataset(family, dataset_of(rows), tokenizer, in_process(family))
    config = make_config(family, dataset_num_proc=2)
    with spy_pools() as log:
        streamed = prepare_dataset(family, dataset_of(rows).to_iterable_dataset(), tokenizer, config)
        streamed_rows = list(streamed)
    assert isinstance(streamed, datasets.IterableDataset)
    assert log.process_pools() == []
    assert [{name: row[name] for name in sized.column_names} for row in streamed_rows] == sized.to_list()


# ---- train_on_responses_only ----


def tokenized_chat(tokenizer, n_rows: int):
    import datasets

    texts = [row["text"] for row in build_sft_rows(n_rows)]
    return datasets.Dataset.from_dict(
        {"input_ids": [encoding.ids for encoding in tokenizer.encode_batch(texts)]}
    ), texts


def fake_trainer(tokenizer, train, eval_split=None):
    return types.SimpleNamespace(train_dataset=train, eval_dataset=eval_split, processing_class=tokenizer)


def test_default_markers_are_the_chat_format_roles():
    assert (chat_templates.DEFAULT_INSTRUCTION_PART, chat_templates.DEFAULT_RESPONSE_PART) == (
        INSTRUCTION_PART,
        RESPONSE_PART,
    )


def test_wrapper_masks_everything_before_the_response(real_host, tokenizer):
    train, texts = tokenized_chat(tokenizer, ROWS)
    trainer = chat_templates.train_on_responses_only(fake_trainer(tokenizer, train), num_proc=1)
    for text, input_ids, labels in zip(texts, trainer.train_dataset["input_ids"], trainer.train_dataset["labels"]):
        head = ids(tokenizer, text[: text.index(RESPONSE_PART) + len(RESPONSE_PART)])
        assert input_ids[: len(head)] == head
        assert labels[: len(head)] == [IGNORE_INDEX] * len(head)
        assert labels[len(head) :] == input_ids[len(head) :] and len(labels) > len(head)


@pytest.fixture
def large_rows(real_host):
    """A row count the zoo auto-sizes, skipping where auto-sizing would stay in-process (then serial looks the same)."""
    # Enough for 2 batched workers even with a closure of up to 1 MiB to weigh.
    rows = max(
        real_host.ZOO_MIN_ROWS_FOR_MULTIPROC,
        2 * (real_host.AUTO_MIN_ROWS_PER_BATCHED_WORKER + real_host.AUTO_ROWS_PER_CLOSURE_MIB),
    )
    if real_host.get_dataset_num_proc(None, rows=rows, batched=True) is None:
        pytest.skip("this host auto-sizes in-process, so serial and auto cannot be told apart here")
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("serial", [0, 1])
def test_a_serial_request_on_a_large_split_builds_no_pool(tokenizer, large_rows, serial):
    train, _ = tokenized_chat(tokenizer, large_rows)
    with spy_pools() as log:
        chat_templates.train_on_responses_only(fake_trainer(tokenizer, train), num_proc=serial)
    assert log.process_pools() == []


@pytest.mark.slow
def test_a_streaming_train_split_does_not_hide_a_large_eval_split(tokenizer, large_rows):
    small, _ = tokenized_chat(tokenizer, ROWS)
    large, _ = tokenized_chat(tokenizer, large_rows)
    with spy_pools() as log:
        serial = chat_templates.train_on_responses_only(
            fake_trainer(tokenizer, small.to_iterable_dataset(), large), num_proc=1
        )
    assert log.process_pools() == []
    assert len(serial.eval_dataset["labels"]) == large_rows
    # The control: the same trainer with auto-sizing does build workers for the eval split, so the check above can fail.
    with spy_pools() as log:
        chat_templates.train_on_responses_only(
            fake_trainer(tokenizer, small.to_iterable_dataset(), large), num_proc=None
        )
    assert log.process_pools() and 1 not in log.process_pools()


@pytest.mark.slow
def test_the_hatch_wins_over_the_wrapper_request(tokenizer, large_rows, monkeypatch):
    small, _ = tokenized_chat(tokenizer, ROWS)
    monkeypatch.setenv("UNSLOTH_DATASET_NUM_PROC", "0")
    with spy_pools() as log:
        chat_templates.train_on_responses_only(fake_trainer(tokenizer, small), num_proc=2)
    assert log.process_pools() == []
    monkeypatch.setenv("UNSLOTH_DATASET_NUM_PROC", "2")
    with spy_pools() as log:
        masked = chat_templates.train_on_responses_only(fake_trainer(tokenizer, small), num_proc=1)
    assert log.process_pools() == [2]
    assert len(masked.train_dataset["labels"]) == ROWS


# ---- no policy at all ----

NO_POLICY_PROBE = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [{site!r}]
    sys.path.extend([{repo!r}, {purelib!r}])

    class Block:
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] == "unsloth_zoo":
                raise ModuleNotFoundError(f"No module named {{fullname!r}} (blocked)")
            return None

    sys.meta_path.insert(0, Block())
    import datasets
    datasets.disable_caching()
    import unsloth_num_proc
    from unsloth.trainers import make_config, prepare_dataset
    from tools.kits.pool_spy import spy_pools
    from tools.kits.sft_data import build_preference_rows, build_sft_rows
    from tools.kits.tokenizer_kit import build_tokenizer

    tokenizer = build_tokenizer()
    texts = [row["text"] for row in build_sft_rows(20)]
    pairs = build_preference_rows(20)
    with spy_pools() as log:
        sft = prepare_dataset("sft", datasets.Dataset.from_dict({{"text": texts}}), tokenizer, make_config("sft", dataset_num_proc=4))
        dpo = prepare_dataset("dpo", datasets.Dataset.from_list(pairs), tokenizer, make_config("dpo", dataset_num_proc=4))
    print(json.dumps({{
        "policy": unsloth_num_proc.load_policy() is not None,
        "configs": {{family: [make_config(family, dataset_num_proc=n).dataset_num_proc for n in (None, 1, 4)]
                     for family in ("sft", "dpo")}},
        "pools": log.process_pools(),
        "sft_ids": list(sft["input_ids"]),
        "texts": texts,
        "dpo_chosen": list(dpo["chosen_input_ids"]),
        "chosen": [row["chosen"] for row in pairs],
    }}))
    """
)


@pytest.mark.slow
def test_without_any_policy_every_family_stays_in_process(tmp_path, tokenizer):
    site = tmp_path / "site"
    shutil.copytree(REPO / "unsloth" / "unsloth", site / "unsloth", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "unsloth" / "dataset_num_proc.py").unlink()
    shutil.copy(REPO / "unsloth" / "unsloth_num_proc.py", site / "unsloth_num_proc.py")
    code = NO_POLICY_PROBE.format(site=str(site), repo=str(REPO), purelib=sysconfig.get_paths()["purelib"])
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["policy"] is False
    # The one answer without a policy (unsloth_num_proc): in-process, written None in every config.
    for values in seen["configs"].values():
        assert values == [None] * 3
    assert seen["pools"] == []
    assert seen["sft_ids"] == [ids(tokenizer, text) for text in seen["texts"]]
    assert seen["dpo_chosen"] == [ids(tokenizer, text, special=False) for text in seen["chosen"]]
