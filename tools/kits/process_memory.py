"""Peak resident memory of this process and all its descendants together, sampled in a thread."""

from __future__ import annotations

import threading
from typing import Optional


class ProcessTreeMemory:
    """Context manager: `peak_bytes` is the largest summed RSS of the process tree seen while inside.

    RSS counts pages a forked worker still shares with its parent in both, so this is an upper bound.
    """

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def sample(self) -> int:
        import psutil

        me = psutil.Process()
        total, count = 0, 0
        for process in [me, *me.children(recursive=True)]:
            try:
                total += process.memory_info().rss
                count += 1
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if total > self.peak_bytes:
            self.peak_bytes = total
        self.peak_processes = max(self.peak_processes, count)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "ProcessTreeMemory":
        self.sample()
        self._thread = threading.Thread(target=self._run, name="process-tree-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
