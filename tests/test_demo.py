"""The main job end to end, on small inputs: built-in rows, a user's JSONL file, a bad file."""

from __future__ import annotations

import io
import json
import re

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
