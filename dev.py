"""Bootstrap: `python3 dev.py demo` runs the main job, `python3 dev.py test` runs every default nox session.

Needs only python3: nox, and uv for nox's installs, go into .venv-nox on first use. `test` alone (or with `--lanes N`) runs the
sessions side by side through tools/ci_lanes.py; any other extra arguments go to nox as they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
TOOL_VENV = ROOT / ".venv-nox"
# `dev.py test` with only these runs the lanes; anything else is a nox command line.
LANES_OPTIONS = ("--lanes",)
# uv makes each session's venv in about a tenth of pip's CPU time; nox uses it when it is installed beside nox.
TOOLS = ["nox>=2024.3.2", "uv>=0.9"]
COMMANDS = {"test": [], "demo": ["-s", "demo"], "bench": ["-s", "bench"]}


def _nox_python() -> Path:
    python = TOOL_VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(TOOL_VENV)
    if subprocess.run([python, "-c", "import nox, uv"], capture_output=True).returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "--quiet", *TOOLS], check=True)
    return python


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python3 dev.py {{{','.join(COMMANDS)}}} [nox arguments...]", file=sys.stderr)
        return 2
    command, extra = argv[0], argv[1:]
    if command == "test" and (not extra or extra[0].startswith(LANES_OPTIONS)):
        from tools import ci_lanes

        return ci_lanes.main(extra, [str(_nox_python()), "-m", "nox"])
    return subprocess.run(
        [_nox_python(), "-m", "nox", "-f", ROOT / "noxfile.py", *COMMANDS[command], *extra]
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
