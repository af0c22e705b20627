"""The shared fixtures: cgroup trees, the corpus, the corpus tokenizers and the chat SFT rows."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tools.kits import sft_data, tokenizer_kit

REPO_ROOT = Path(__file__).resolve().parent.parent
CGROUPS = REPO_ROOT / "shared" / "cgroups"
CORPUS = REPO_ROOT / "shared" / "corpus"
TREE_NAMES = ["hybrid", "this_machine", "v1_slurm_job", "v2_leaf", "v2_over_high", "v2_systemd_slice"]
V2_FILES = ["cpu.max", "memory.max", "memory.high", "memory.current", "memory.stat", "memory.events"]
V1_MEMORY_FILES = ["memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "memory.oom_control"]
V1_CPU_FILES = ["cpu.cfs_quota_us", "cpu.cfs_period_us"]
V1_UNLIMITED = 9223372036854771712
ROUND_TRIP_TEXTS = [
    "Why is the sky blue?",
    "  two leading spaces, a tab\there, and a trailing newline\n",
    "Crème brûlée, naïve café, Übermaß, 日本語のテキスト, emoji 🙂🚀",
    "numbers 3.14159 and 1,000,000 and code: def f(x): return x ** 2",
    "",
]


# ---- cgroup trees: shape ----


def proc_cgroup_lines(tree: Path) -> list[tuple[str, str]]:
    """(controllers, path) pairs from a tree's proc_self_cgroup; v2 has empty controllers."""
    lines = (tree / "proc_self_cgroup").read_text().splitlines()
    return [(fields[1], fields[2]) for fields in (line.split(":", 2) for line in lines if line)]


def v2_hierarchy(tree: Path) -> Path:
    root = tree / "root"
    return root if (root / "cgroup.controllers").exists() else root / "unified"


def levels(hierarchy: Path, path: str) -> list[Path]:
    """The process's cgroup directory and each ancestor up to and including the hierarchy root."""
    parts = [part for part in path.split("/") if part]
    return [hierarchy.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def test_every_wanted_tree_exists():
    assert sorted(p.name for p in CGROUPS.iterdir() if p.is_dir()) == TREE_NAMES


@pytest.mark.parametrize("name", TREE_NAMES)
def test_tree_has_its_top_level_files(name):
    tree = CGROUPS / name
    provenance = (tree / "PROVENANCE").read_text()
    assert provenance.strip() and provenance.count("\n") == 1
    assert (tree / "root").is_dir()
    expected = json.loads((tree / "expected.json").read_text())
    assert sorted(expected) == ["cpu_limit", "memory_free_bytes", "oom_kill"]
    assert expected["cpu_limit"] is None or isinstance(expected["cpu_limit"], float)
    assert expected["memory_free_bytes"] is None or type(expected["memory_free_bytes"]) is int
    assert expected["oom_kill"] is None or type(expected["oom_kill"]) is int


@pytest.mark.parametrize("name", TREE_NAMES)
def test_tree_holds_the_files_of_its_cgroup_version(name):
    tree = CGROUPS / name
    checked = 0
    for controllers, path in proc_cgroup_lines(tree):
        if controllers == "":
            hierarchy = v2_hierarchy(tree)
            assert (hierarchy / "cgroup.controllers").is_file()
            if "memory" not in (hierarchy / "cgroup.controllers").read_text().split():
                continue
            # A real host's top cgroup has no limit files; a namespaced container's "/" does.
            below_root = levels(hierarchy, path)[:-1] or [hierarchy]
            for level in below_root:
                assert sorted(f for f in V2_FILES if (level / f).is_file()) == sorted(V2_FILES), level
                checked += 1
        elif controllers in ("memory", "cpu,cpuacct", "cpu"):
            wanted = V1_MEMORY_FILES if controllers == "memory" else V1_CPU_FILES
            for level in levels(tree / "root" / controllers, path):
                assert sorted(f for f in wanted if (level / f).is_file()) == sorted(wanted), level
                checked += 1
    assert checked > 0


def test_v1_cpu_symlinks_point_at_the_comounted_directory():
    for name in ("v1_slurm_job", "hybrid"):
        root = CGROUPS / name / "root"
        assert (root / "cpu").is_symlink() and (root / "cpu").resolve() == (root / "cpu,cpuacct").resolve()


def test_this_machine_is_a_capture_of_a_hybrid_host():
    tree = CGROUPS / "this_machine"
    assert "Captured" in (tree / "PROVENANCE").read_text()
    lines = dict(proc_cgroup_lines(tree))
    assert lines[""] == "/" and lines["memory"].startswith("/")
    assert not (tree / "root" / "cgroup.controllers").exists()
    assert (tree / "root" / "unified" / "cgroup.controllers").is_file()


# ---- cgroup trees: a small independent reader cross-checks the hand arithmetic in expected.json ----


def read_number(file: Path) -> int | None:
    text = file.read_text().strip()
    return None if text == "max" or int(text) in (-1, V1_UNLIMITED) else int(text)


def read_key(file: Path, key: str) -> int:
    return next(int(line.split()[1]) for line in file.read_text().splitlines() if line.split()[0] == key)


def smallest(values: list) -> object:
    present = [value for value in values if value is not None]
    return min(present) if present else None


def v2_levels_with_controllers(tree: Path, path: str) -> list[Path]:
    """The v2 walk, or nothing when v2 holds neither the cpu nor the memory controller (hybrid hosts)."""
    hierarchy = v2_hierarchy(tree)
    enabled = (hierarchy / "cgroup.controllers").read_text().split()
    return levels(hierarchy, path) if {"cpu", "memory"} & set(enabled) else []


def reference_reading(tree: Path) -> dict:
    cpus, free, oom_kill = [], [], None
    for controllers, path in proc_cgroup_lines(tree):
        if controllers == "":
            for level in v2_levels_with_controllers(tree, path):
                if (level / "cpu.max").exists():
                    quota, period = (level / "cpu.max").read_text().split()
                    cpus.append(None if quota == "max" else int(quota) / int(period))
                if (level / "memory.current").exists():
                    used = int((level / "memory.current").read_text()) - read_key(
                        level / "memory.stat", "inactive_file"
                    )
                    for limit_file in ("memory.max", "memory.high"):
                        limit = read_number(level / limit_file)
                        free.append(None if limit is None else max(limit - used, 0))
                if level == levels(v2_hierarchy(tree), path)[0]:
                    oom_kill = read_key(level / "memory.events", "oom_kill")
        elif controllers == "memory":
            walk = levels(tree / "root" / "memory", path)
            for level in walk:
                used = int((level / "memory.usage_in_bytes").read_text()) - read_key(
                    level / "memory.stat", "total_inactive_file"
                )
                limit = read_number(level / "memory.limit_in_bytes")
                free.append(None if limit is None else max(limit - used, 0))
            oom_kill = read_key(walk[0] / "memory.oom_control", "oom_kill")
        elif controllers in ("cpu,cpuacct", "cpu"):
            for level in levels(tree / "root" / controllers, path):
                quota = read_number(level / "cpu.cfs_quota_us")
                cpus.append(None if quota is None else quota / int((level / "cpu.cfs_period_us").read_text()))
    return {"cpu_limit": smallest(cpus), "memory_free_bytes": smallest(free), "oom_kill": oom_kill}


@pytest.mark.parametrize("name", TREE_NAMES)
def test_expected_json_agrees_with_an_independent_reading(name):
    tree = CGROUPS / name
    assert reference_reading(tree) == json.loads((tree / "expected.json").read_text())


def test_expected_json_holds_the_hand_arithmetic():
    # 1.5 cpus; 2 GiB - (768 MiB - 128 MiB) = 2147483648 - 671088640.
    assert json.loads((CGROUPS / "v2_leaf" / "expected.json").read_text()) == {
        "cpu_limit": 1.5,
        "memory_free_bytes": 1476395008,
        "oom_kill": 0,
    }
    # app.slice memory.high 6 GiB - (3 GiB - 512 MiB) = 6442450944 - 2684354560; cpu from user-1000.slice.
    assert json.loads((CGROUPS / "v2_systemd_slice" / "expected.json").read_text())["memory_free_bytes"] == 3758096384
    # job_4242: 8 GiB - (5 GiB - 1 GiB); its quota 200000 over a 50000 period.
    assert json.loads((CGROUPS / "v1_slurm_job" / "expected.json").read_text())["memory_free_bytes"] == 4294967296


# ---- corpus ----


def test_corpus_is_a_few_tens_of_kilobytes_of_text():
    texts = sorted(CORPUS.glob("*.txt"))
    assert len(texts) >= 5
    assert 40_000 <= sum(path.stat().st_size for path in texts) <= 80_000
    assert (CORPUS / "README.md").read_text().count("\n") == 1


def test_split_sentences_keeps_decimals_and_splits_at_capitals():
    assert sft_data.split_sentences("It is 3.5 cm long.  Really? Yes!\nDone.") == [
        "It is 3.5 cm long.",
        "Really?",
        "Yes!",
        "Done.",
    ]


def test_parse_question_answers_reads_topics_and_pairs():
    text = "## cooking\n\nQ: Why salt?\nA: Taste.\n\n## everyday physics\nQ: Ice?\nA: Floats.\nQ: Dangling question\n"
    assert sft_data.parse_question_answers(text) == (
        sft_data.QuestionAnswer("cooking", "Why salt?", "Taste."),
        sft_data.QuestionAnswer("everyday_physics", "Ice?", "Floats."),
    )


def test_corpus_loads_five_topics_and_eighty_pairs():
    corpus = sft_data.load_corpus()
    assert corpus.topics == ("astronomy", "cooking", "everyday_physics", "gardening", "travel")
    assert len(corpus.pairs) == 80
    assert all(len(corpus.pairs_by_topic[topic]) == 16 for topic in corpus.topics)


# ---- tokenizers ----


@pytest.fixture(scope="module")
def tokenizer_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tokenizers")


@pytest.fixture(scope="module")
def small_tokenizer(tokenizer_cache):
    return tokenizer_kit.build_tokenizer(cache_dir=tokenizer_cache)


@pytest.fixture(scope="module")
def heavy_tokenizer(tokenizer_cache):
    return tokenizer_kit.build_heavy_tokenizer(cache_dir=tokenizer_cache)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_small_tokenizer_round_trips_text(small_tokenizer, text):
    assert small_tokenizer.decode(small_tokenizer.encode(text).ids) == text


def test_small_tokenizer_is_a_trained_bpe_within_the_requested_size(small_tokenizer):
    assert 1_000 < small_tokenizer.get_vocab_size() <= 8_000
    # A trained BPE spends one token on a frequent corpus word.
    assert small_tokenizer.encode(" the garden").tokens == ["\u0120the", "\u0120garden"]


@pytest.mark.parametrize(
    ("token", "token_id"), [("<|pad|>", 0), ("<|eos|>", 1), ("<|user|>", 2), ("<|assistant|>", 3), ("<|system|>", 4)]
)
def test_special_tokens_are_single_ids(small_tokenizer, heavy_tokenizer, token, token_id):
    assert small_tokenizer.encode(token).ids == [token_id]
    assert heavy_tokenizer.encode(token).ids == [token_id]
    assert small_tokenizer.encode(f"hi{token}there").ids.count(token_id) == 1


def test_chat_row_markers_survive_tokenization(small_tokenizer):
    text = sft_data.build_sft_rows(1)[0]["text"]
    ids = small_tokenizer.encode(text).ids
    assert ids[0] == 4 and ids[-1] == 1
    assert ids.count(2) == 1 and ids.count(3) == 1
    assert small_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_build_tokenizer_trains_once_then_loads_the_cache(tmp_path, monkeypatch):
    first = tokenizer_kit.build_tokenizer(1000, cache_dir=tmp_path)
    cached = list(tmp_path.glob("bpe-1000-*.json"))
    assert len(cached) == 1
    written_at = cached[0].stat().st_mtime_ns

    def refuse_to_train(*args, **kwargs):
        raise AssertionError("training ran although a cached tokenizer exists")

    monkeypatch.setattr(tokenizer_kit, "train_bpe_tokenizer", refuse_to_train)
    second = tokenizer_kit.build_tokenizer(1000, cache_dir=tmp_path)
    assert second.get_vocab() == first.get_vocab()
    assert cached[0].stat().st_mtime_ns == written_at
    with pytest.raises(AssertionError, match="training ran"):
        tokenizer_kit.build_tokenizer(1200, cache_dir=tmp_path)


def test_the_default_cache_lives_in_the_users_cache_folder_never_the_checkout(tmp_path):
    home = tmp_path / "home"
    assert tokenizer_kit.default_cache_dir({}, home) == home / ".cache" / "unsloth-mlx" / "tokenizers"
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert tokenizer_kit.default_cache_dir(xdg, home) == tmp_path / "xdg" / "unsloth-mlx" / "tokenizers"
    chosen = {**xdg, "UNSLOTH_TOKENIZER_CACHE": str(tmp_path / "chosen")}
    assert tokenizer_kit.default_cache_dir(chosen, home) == tmp_path / "chosen"


def test_build_tokenizer_without_a_cache_dir_writes_to_the_variables_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSLOTH_TOKENIZER_CACHE", str(tmp_path))
    tokenizer_kit.build_tokenizer(500)
    assert len(list(tmp_path.glob("bpe-500-*.json"))) == 1
    assert not tokenizer_kit.cache_path(None, "x").is_relative_to(REPO_ROOT)


def test_a_corrupt_cache_file_is_rebuilt(tmp_path):
    tokenizer_kit.build_tokenizer(600, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("bpe-600-*.json")
    cached.write_text("{ not json")
    assert tokenizer_kit.build_tokenizer(600, cache_dir=tmp_path).get_vocab_size() == 600
    assert json.loads(cached.read_text())["model"]["type"] == "BPE"


def test_load_tokenizer_reads_a_file_or_a_folder(small_tokenizer, tmp_path):
    small_tokenizer.save(str(tmp_path / "tokenizer.json"))
    from_folder = tokenizer_kit.load_tokenizer(tmp_path)
    from_file = tokenizer_kit.load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert from_folder.encode("Saturn's rings").ids == small_tokenizer.encode("Saturn's rings").ids
    assert from_file.get_vocab_size() == small_tokenizer.get_vocab_size()
    with pytest.raises(FileNotFoundError):
        tokenizer_kit.load_tokenizer(tmp_path / "missing")


def test_grow_bpe_state_adds_valid_merges_with_fresh_ids():
    state = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}}
    grown = tokenizer_kit.grow_bpe_state(state, 6, seed=1)["model"]
    assert sorted(grown["vocab"].values()) == [0, 1, 2, 3, 4, 5]
    assert grown["merges"][0] == ["a", "b"] and len(grown["merges"]) == 4
    for left, right in grown["merges"]:
        assert left in grown["vocab"] and right in grown["vocab"] and left + right in grown["vocab"]
    assert state["model"]["vocab"] == {"a": 0, "b": 1, "ab": 2}


def test_heavy_tokenizer_is_large_and_still_round_trips(heavy_tokenizer):
    assert heavy_tokenizer.get_vocab_size() >= 50_000
    assert len(pickle.dumps(heavy_tokenizer)) >= 5_000_000
    for text in ROUND_TRIP_TEXTS:
        assert heavy_tokenizer.decode(heavy_tokenizer.encode(text).ids) == text
    text = sft_data.build_sft_rows(1)[0]["text"]
    assert pickle.loads(pickle.dumps(heavy_tokenizer)).encode(text).ids == heavy_tokenizer.encode(text).ids


def test_importing_the_kits_loads_neither_tokenizers_nor_datasets():
    code = "import sys, tools.kits.tokenizer_kit, tools.kits.sft_data; print(sorted({'tokenizers', 'datasets'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- SFT rows ----


def test_render_chat_matches_the_documented_layout():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."},
    ]
    assert sft_data.render_chat(messages) == "<|system|>\nBe brief.\n<|user|>\nHi?\n<|assistant|>\nHello.<|eos|>"
    assert sft_data.INSTRUCTION_PART == "<|user|>\n" and sft_data.RESPONSE_PART == "<|assistant|>\n"


def test_sft_rows_carry_the_markers_and_match_their_messages():
    rows = sft_data.build_sft_rows(300)
    for row in rows:
        assert [message["role"] for message in row["messages"]] == ["system", "user", "assistant"]
        assert row["text"] == sft_data.render_chat(row["messages"])
        assert row["text"].startswith("<|system|>\n") and row["text"].endswith("<|eos|>")
        assert row["text"].count(sft_data.INSTRUCTION_PART) == 1 and row["text"].count(sft_data.RESPONSE_PART) == 1
    assert len({row["text"] for row in rows}) > 200


def test_sft_rows_are_deterministic_and_prefix_stable():
    assert sft_data.build_sft_rows(100) == sft_data.build_sft_rows(100)
    assert sft_data.build_sft_rows(400)[:100] == sft_data.build_sft_rows(100)
    assert sft_data.build_sft_rows(100, seed=1) != sft_data.build_sft_rows(100)
    assert sft_data.build_sft_rows(0) == []
    with pytest.raises(ValueError):
        sft_data.build_sft_rows(-1)


def test_sft_rows_are_identical_in_another_process_with_another_hash_seed():
    code = "import json, tools.kits.sft_data as s; print(json.dumps(s.build_sft_rows(500, seed=7)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == sft_data.build_sft_rows(500, seed=7)


def test_twenty_thousand_rows_build():
    rows = sft_data.build_sft_rows(20_000)
    assert len(rows) == 20_000
    assert {len(row["text"]) for row in rows} != {len(rows[0]["text"])}


def test_sft_dataset_has_messages_and_text_columns():
    dataset = sft_data.build_sft_dataset(12)
    assert dataset.column_names == ["messages", "text"] and dataset.num_rows == 12
    assert dataset[5]["text"] == sft_data.build_sft_rows(12)[5]["text"]


def test_chat_template_renders_like_render_chat():
    jinja2 = pytest.importorskip("jinja2.sandbox")
    environment = jinja2.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = environment.from_string(sft_data.CHAT_TEMPLATE)
    for row in sft_data.build_sft_rows(50):
        assert template.render(messages=row["messages"]) == row["text"]


def test_preference_rows_pair_an_answer_with_a_different_one():
    rows = sft_data.build_preference_rows(200)
    assert all(sorted(row) == ["chosen", "prompt", "rejected"] for row in rows)
    assert all(row["chosen"] != row["rejected"] and row["prompt"] for row in rows)
    assert sft_data.build_preference_rows(200) == rows


def test_unpaired_rows_have_both_labels():
    rows = sft_data.build_unpaired_rows(200)
    assert all(sorted(row) == ["completion", "label", "prompt"] for row in rows)
    assert {row["label"] for row in rows} == {True, False}


def test_stepwise_rows_label_every_step():
    rows = sft_data.build_stepwise_rows(200)
    for row in rows:
        assert sorted(row) == ["completions", "labels", "prompt"]
        assert len(row["completions"]) == len(row["labels"]) >= 1
        assert all(type(label) is bool for label in row["labels"])
    assert {label for row in rows for label in row["labels"]} == {True, False}


def test_read_jsonl_rows_takes_the_named_field(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"body": "first", "id": 1}\n\n{"body": "second"}\n', encoding="utf-8")
    assert sft_data.read_jsonl_rows(path, "body") == [{"text": "first"}, {"text": "second"}]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"body": "ok"}\n{"other": 1}\n', "mine.jsonl:2: expected an object with a string field 'body'"),
        ('{"body": "ok"}\nnot json\n', "mine.jsonl:2: not valid JSON"),
        ('["body"]\n', "mine.jsonl:1: expected an object"),
    ],
)
def test_read_jsonl_rows_names_the_bad_line(tmp_path, content, message):
    path = tmp_path / "mine.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        sft_data.read_jsonl_rows(path, "body")
