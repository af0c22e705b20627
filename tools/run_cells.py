"""Run a notebook-style script (`# %%` cells) cell by cell in one namespace, as a notebook kernel would, and
report each cell's outcome: a failing cell is recorded and the next cell still runs.

    python tools/run_cells.py examples/notebooks/llama3_2_conversational.py --json cells.json

Exit status 0 when every cell ran, 1 when some failed, 2 for a script that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import IO, List, Optional


def split_cells(source: str) -> List[dict]:
    """Each `# %%` block, with the title written after the marker; text before the first marker is dropped."""
    cells: List[dict] = []
    for line in source.splitlines(keepends=True):
        if line.startswith("# %%"):
            cells.append({"title": line[4:].strip(), "source": ""})
        elif cells:
            cells[-1]["source"] += line
    return cells


def run_cells(path: Path, out: IO[str]) -> List[dict]:
    namespace: dict = {"__name__": "__main__", "__file__": str(path)}
    results = []
    for index, cell in enumerate(split_cells(path.read_text(encoding="utf-8"))):
        try:
            exec(compile(cell["source"], f"{path.name} cell {index}", "exec"), namespace)
            outcome = {"cell": index, "title": cell["title"], "ok": True}
        except Exception as error:  # a notebook keeps going after a failed cell; so does this runner
            last = traceback.extract_tb(error.__traceback__)[-1]
            outcome = {
                "cell": index,
                "title": cell["title"],
                "ok": False,
                "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
                "where": f"{Path(last.filename).name}:{last.lineno}",
            }
        out.write(json.dumps(outcome) + "\n")
        out.flush()
        results.append(outcome)
    return results


def main(argv: Optional[List[str]] = None, out: IO[str] = sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--json", type=Path, help="also write every cell's outcome here")
    options = parser.parse_args(argv)
    if not options.script.is_file():
        print(f"no script at {options.script}", file=sys.stderr)
        return 2
    results = run_cells(options.script, out)
    if options.json is not None:
        options.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0 if all(result["ok"] for result in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
