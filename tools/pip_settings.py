"""pip's own settings (`pip config list`), read once and handed to uv, so both installers take packages from one place.

nox installs with uv when uv is beside it (`dev.py` puts it there): about a tenth of pip's CPU time per venv. uv reads no
pip configuration, so a machine whose pip is told where its wheels, indexes, certificates and caps live (a wheel
folder holding CPU torch, a local mirror, a torch cap) would send uv elsewhere; this module carries those settings
over as uv's environment variables. Standard library only: the noxfile imports it before any session exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Mapping

# `pip config list` prints `<where>.<option>='<value>'`; <where> is `global`, `install`, `:env:` and so on.
_LINE = re.compile(r"^(?P<where>[^=]*?)\.(?P<option>[a-z-]+)=(?P<value>.*)$")
# pip's option to uv's variable. pip splits a list at spaces; uv splits these at spaces too, but for find-links.
UV_VARIABLES = {
    "index-url": "UV_INDEX_URL",
    "extra-index-url": "UV_EXTRA_INDEX_URL",
    "find-links": "UV_FIND_LINKS",
    "constraint": "UV_CONSTRAINT",
    "cert": "SSL_CERT_FILE",
}
# pip looks in every index for the best version; uv, by default, only in the first index that has the package.
SAME_RESOLUTION = {"UV_INDEX_STRATEGY": "unsafe-best-match"}
COMMA_SEPARATED = {"UV_FIND_LINKS"}


def parse(listing: str) -> dict[str, str]:
    """Option to value from `pip config list`; an environment variable (`:env:`) wins over a file, as in pip."""
    found: dict[str, tuple[bool, str]] = {}
    for line in listing.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            continue
        from_environment = match["where"] == ":env:"
        value = match["value"].strip().strip("'\"")
        option = match["option"]
        # A later file overrides an earlier one (pip lists them in that order); no file overrides the environment.
        if from_environment or not found.get(option, (False, ""))[0]:
            found[option] = (from_environment, value)
    return {option: value for option, (_, value) in found.items()}


def uv_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """The uv variables that make uv install what pip, with these settings, would install."""
    environment = dict(SAME_RESOLUTION)
    for option, variable in UV_VARIABLES.items():
        if settings.get(option):
            values = settings[option].split()
            environment[variable] = ("," if variable in COMMA_SEPARATED else " ").join(values)
    return environment


def local_wheel_folders(settings: Mapping[str, str]) -> list[Path]:
    """The folders among pip's find-links (URLs and missing folders left out)."""
    entries = (entry.removeprefix("file://") for entry in settings.get("find-links", "").split())
    return [Path(entry) for entry in entries if Path(entry).is_dir()]


def read(python: str = sys.executable) -> dict[str, str]:
    """This interpreter's pip settings; none when pip is missing or cannot say."""
    try:
        listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    except OSError:
        return {}
    return parse(listing)
