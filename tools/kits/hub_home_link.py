"""One Hub cache path for every notebook replay of a test session, with each replay's own folder behind it.

huggingface_hub, transformers and datasets read HF_HOME once, at import, so a warm interpreter that imports them
before the replays (tools/kits/warm_python.py) reads one path for all of them. That path is a symbolic link, pointed
at the next replay's own cache before it starts; replays run one at a time, so each sees only the models its setup
built and writes only into its own folder, as with a cold start per replay.

    home = HubHomeLink(tmp); WarmPython(modules, env={**os.environ, **home.environment()})
    home.point_at(workdir / "hf-home"); server.run(...)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict


class HubHomeLink:
    """`link` is the HF_HOME every replay's preloaded modules read; `point_at(folder)` hands it to the next replay."""

    def __init__(self, folder: Path) -> None:
        self.link = Path(folder) / "hf-home"
        self.point_at(Path(folder) / "between-replays")  # what the imports themselves write lands here

    def environment(self) -> Dict[str, str]:
        """The variables the server imports with and every replay starts with (its setup then names the folder
        behind the link as HF_HOME, for what it imports itself)."""
        return {"HF_HOME": str(self.link), "HF_HUB_OFFLINE": "1"}

    def point_at(self, target: Path) -> None:
        """Point the link at `target` in one step (a new link renamed over the old), creating `target`."""
        Path(target).mkdir(parents=True, exist_ok=True)
        fresh = self.link.with_name(self.link.name + ".next")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(Path(target).resolve(), target_is_directory=True)
        os.replace(fresh, self.link)
