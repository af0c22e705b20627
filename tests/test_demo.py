"""The main job end to end, on small inputs: built-in rows, a user's JSONL file, a bad file."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import demo


@pytest.fixture(autouse=True)
def _no_hatch(monkeypatch):
    monkeypatch.delenv("UNSLOTH_DATASET_NUM_PROC", raising=False)


def _figures(text: str) -> dict:
    """The report's "label  value" lines (two or more spaces between) as a dict."""
    figures = {}
    for line in text.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            figures[parts[0]] = parts[1]
    return figures


def _decision_rows(text: str) -> str:
    """The "rows" line of the decision table (the report's own "rows" line comes later)."""
    return [line for line in text.splitlines() if line.startswith("rows ")][0].split()[-1]


def test_the_default_run_on_1000_rows_stays_in_process():
    out = io.StringIO()
    assert demo.main(["--rows", "1000"], stdout=out) == 0
    text = out.getvalue()
    figures = _figures(text)
    assert _decision_rows(text) == "1000"  # the map was sized knowing its rows
    assert figures["num_proc"].startswith("None") and figures["decided by"] in {"rows", "memory", "platform"}
    assert "over 1 process(es)" in figures["peak memory (tree RSS)"]
    assert figures["wall time"].endswith(" s") and float(figures["wall time"][:-2]) > 0


def test_the_default_20000_rows_stay_in_process_on_any_host():
    # The demo's map is batched into a fast tokenizer: 20,000 rows cannot give 2 workers 12,500 rows each.
    out = io.StringIO()
    assert demo.main([], stdout=out) == 0
    figures = _figures(out.getvalue())
    assert figures["num_proc"] == "None (in-process)" and figures["map kind"] == "a batched map"
    assert figures["decided by"] in {"rows", "memory", "platform"}
    assert "over 1 process(es)" in figures["peak memory (tree RSS)"]


@pytest.mark.slow
def test_80000_rows_get_the_policys_workers():
    import unsloth_num_proc

    if unsloth_num_proc.load_policy().get_dataset_num_proc(2, rows=80_000) != 2:
        pytest.skip("this host gives no map two forked workers")
    out = io.StringIO()
    assert demo.main(["--rows", "80000"], stdout=out) == 0
    text = out.getvalue()
    figures = _figures(text)
    assert _decision_rows(text) == "80000"
    workers = int(figures["num_proc"])
    assert workers >= 2 and figures["decided by"] in {"auto", "rows", "memory"}
    assert int(figures["peak memory (tree RSS)"].split()[-2]) > 1  # the workers really ran


def test_user_jsonl_and_serial_request(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"body": f"row number {i} says hello"}) for i in range(50)) + "\n")
    out = io.StringIO()
    assert demo.main(["--jsonl", str(path), "--text-field", "body", "--num-proc", "1"], stdout=out) == 0
    figures = _figures(out.getvalue())
    assert figures["rows"] == "50"
    assert figures["num_proc"].startswith("None") and figures["decided by"] == "request"
    assert "over 1 process(es)" in figures["peak memory (tree RSS)"]


def test_unreadable_jsonl_is_a_usage_error(tmp_path, capsys):
    assert demo.main(["--jsonl", str(tmp_path / "missing.jsonl")], stdout=io.StringIO()) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def _one_demo_line(capsys, *fragments: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("demo: ") and "Traceback" not in captured.err, captured.err
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_an_empty_jsonl_file_is_named(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert demo.main(["--jsonl", str(tmp_path / "empty.jsonl")], stdout=io.StringIO()) == 2
    _one_demo_line(capsys, "empty.jsonl", "no rows")


def test_a_jsonl_file_that_is_not_utf8_is_named(tmp_path, capsys):
    (tmp_path / "latin.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    assert demo.main(["--jsonl", str(tmp_path / "latin.jsonl")], stdout=io.StringIO()) == 2
    _one_demo_line(capsys, "latin.jsonl", "UTF-8")


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--rows", "0"], "--rows: 0 is below 1"),
        (["--rows", "many"], "--rows: 'many' is not an integer"),
        (["--max-length", "-1"], "--max-length: -1 is below 1"),
        (["--num-proc", "-2"], "--num-proc: -2 is below 0"),
        (["--colour"], "unrecognized arguments: --colour"),
    ],
)
def test_bad_flags_get_one_line_naming_the_flag(capsys, flags, fragment):
    assert demo.main(flags, stdout=io.StringIO()) == 2
    _one_demo_line(capsys, fragment)


@pytest.mark.parametrize("state", ["missing", "empty folder", "corrupt"])
def test_a_bad_tokenizer_is_named(tmp_path, capsys, state):
    folder = tmp_path / "tok"
    if state != "missing":
        folder.mkdir()
    if state == "corrupt":
        (folder / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    assert demo.main(["--rows", "10", "--tokenizer", str(folder)], stdout=io.StringIO()) == 2
    _one_demo_line(capsys, "no tokenizer file at" if state != "corrupt" else "not a tokenizer file", str(folder))


def test_an_over_long_row_is_warned_about_once_by_its_length(tmp_path, capsys):
    path = tmp_path / "long.jsonl"
    rows = [{"text": "short row"}, {"text": "hello world " * 90_000}, {"text": "another short row"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert demo.main(["--jsonl", str(path), "--max-length", "16"], stdout=io.StringIO()) == 0
    err = capsys.readouterr().err
    # The warning comes first, before the map's progress bar, and only once.
    assert err.startswith("demo: warning: row 2 of ") and err.count("demo:") == 1
    first = err.splitlines()[0]
    assert "long.jsonl" in first and "1,080,000 characters" in first and "16 tokens" in first


@pytest.mark.slow
def test_the_command_line_says_one_line_and_no_traceback(tmp_path):
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "tools.demo", "--rows", "10", "--tokenizer", str(tmp_path / "absent")]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"demo: no tokenizer file at {tmp_path / 'absent'}"]
