"""Smoke-test an install made from the built wheels, as a user meets it: `nox -s build` runs it in fresh venvs.

`--expect zoo`: both wheels are installed, the policy comes from `unsloth_zoo` and its CLI prints a decision record.
`--expect twin`: only unsloth's wheel (`--no-deps`), the zoo is absent and the policy comes from unsloth's copy.
Standard library only, and run from outside the checkout so nothing but the installed files can answer.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence, TextIO

EXPECTED_POLICY = {"zoo": "unsloth_zoo.dataset_num_proc", "twin": "unsloth.dataset_num_proc"}


def check_install(expect: str) -> List[str]:
    """What is wrong with this interpreter's install, as messages; empty when it is what `expect` says."""
    problems = []
    zoo_present = importlib.util.find_spec("unsloth_zoo") is not None
    if zoo_present != (expect == "zoo"):
        problems.append(f"unsloth_zoo is {'present' if zoo_present else 'absent'}, expected the {expect} install")
    import unsloth
    import unsloth_num_proc

    for module in (unsloth, unsloth_num_proc):
        if "site-packages" not in Path(str(module.__file__)).parts:
            problems.append(f"{module.__name__} was imported from {module.__file__}, not from the installed wheel")
    policy = unsloth_num_proc.load_policy()
    name = getattr(policy, "__name__", None)
    if name != EXPECTED_POLICY[expect]:
        problems.append(f"the policy came from {name}, expected {EXPECTED_POLICY[expect]}")
    record = _cli_record(EXPECTED_POLICY[expect])
    if not isinstance(record, dict) or "value" not in record:
        problems.append(f"`python -m {EXPECTED_POLICY[expect]} --json` printed no decision record: {record!r}")
    return problems


def _cli_record(module: str) -> object:
    result = subprocess.run([sys.executable, "-m", module, "--json"], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return f"exit {result.returncode}: {result.stderr.strip()}"
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        return result.stdout


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[TextIO] = None) -> int:
    """0 when the install is as expected, 1 with one line per problem otherwise."""
    stdout = stdout or sys.stdout
    parser = argparse.ArgumentParser(prog="wheel_smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--expect", choices=sorted(EXPECTED_POLICY), required=True)
    options = parser.parse_args(argv)
    problems = check_install(options.expect)
    versions = {name: _version(name) for name in ("unsloth", "unsloth_zoo")}
    stdout.write(f"{options.expect} install: unsloth {versions['unsloth']}, unsloth_zoo {versions['unsloth_zoo']}\n")
    for problem in problems:
        stdout.write(f"FAIL: {problem}\n")
    if not problems:
        stdout.write(
            f"ok: import unsloth, the policy from {EXPECTED_POLICY[options.expect]}, its CLI's --json record\n"
        )
    return 1 if problems else 0


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    sys.exit(main())
