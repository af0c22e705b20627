"""tools/run_cells.py: cells share one namespace, a failing cell is reported and the next still runs, and the
exit status says whether every cell ran."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tools import run_cells

SCRIPT = '''"""Text before the first marker is not a cell."""
raise SystemExit("never run")
# %% [1] define
value = 2
# %% [2] fail
{}["missing"]
# %% [3] still runs, with the first cell's name
print(value * 21)
'''


def test_split_cells_keeps_titles_and_drops_the_preamble() -> None:
    cells = run_cells.split_cells(SCRIPT)
    assert [cell["title"] for cell in cells] == ["[1] define", "[2] fail", "[3] still runs, with the first cell's name"]
    assert "never run" not in "".join(cell["source"] for cell in cells)


def test_a_failed_cell_is_reported_and_the_rest_run(tmp_path: Path, capsys) -> None:
    script = tmp_path / "notebook.py"
    script.write_text(SCRIPT)
    out = io.StringIO()
    assert run_cells.main([str(script), "--json", str(tmp_path / "cells.json")], out=out) == 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["ok"] for line in lines] == [True, False, True]
    assert lines[1]["error"] == "KeyError: 'missing'"
    assert capsys.readouterr().out == "42\n"
    assert json.loads((tmp_path / "cells.json").read_text()) == lines


def test_every_cell_ran_exits_0_and_a_missing_script_exits_2(tmp_path: Path) -> None:
    script = tmp_path / "fine.py"
    script.write_text("# %% one\nx = 1\n")
    assert run_cells.main([str(script)], out=io.StringIO()) == 0
    assert run_cells.main([str(tmp_path / "absent.py")], out=io.StringIO()) == 2
