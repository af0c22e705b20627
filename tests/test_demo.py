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


def test_builtin_dataset_runs_and_reports_decision_and_figures():
    out = io.StringIO()
    assert demo.main(["--rows", "600"], stdout=out) == 0
    figures = _figures(out.getvalue())
    assert figures["rows"] == "600"
    assert figures["wall time"].endswith(" s") and float(figures["wall time"][:-2]) > 0
    assert figures["peak memory (tree RSS)"].split()[1] == "MiB"
    assert figures["decided by"] in {"auto", "memory", "platform"}
    assert figures["num_proc"] == "1" or int(figures["num_proc"]) >= 2  # config encoding: never None while forking


def test_user_jsonl_and_serial_request(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"body": f"row number {i} says hello"}) for i in range(50)) + "\n")
    out = io.StringIO()
    assert demo.main(["--jsonl", str(path), "--text-field", "body", "--num-proc", "1"], stdout=out) == 0
    figures = _figures(out.getvalue())
    assert figures["rows"] == "50"
    assert figures["num_proc"] == "1" and figures["decided by"] == "request"
    assert "over 1 process(es)" in figures["peak memory (tree RSS)"]


def test_unreadable_jsonl_is_a_usage_error(tmp_path, capsys):
    assert demo.main(["--jsonl", str(tmp_path / "missing.jsonl")], stdout=io.StringIO()) == 2
    assert "missing.jsonl" in capsys.readouterr().err
