"""Record the worker count of every `multiprocess` pool built while the spy is active.

Every datasets release this project supports (3.4.1 to 5.2.0) builds its map pool through
`multiprocess.Pool` or `multiprocess.get_context(...).Pool`, and both construct
`multiprocess.pool.Pool`; a few non-map paths (`to_csv`, `to_json`, `to_sql`, `parallel_map`)
use the standard library's `multiprocessing.pool.Pool`, so the spy wraps both classes.

`python -m tools.kits.pool_spy --num-proc 2` runs a small real map and prints the pools it built.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class PoolCall:
    """One pool construction: the class actually built (`module.QualName`) and the `processes` it was asked for."""

    kind: str
    processes: int | None


class PoolLog(list[PoolCall]):
    """The pools built while a spy was active, in construction order."""

    def process_pools(self) -> list[int | None]:
        """`processes` of every process pool, leaving out thread pools (which spawn no worker process)."""
        return [call.processes for call in self if not call.kind.endswith(".ThreadPool")]


def processes_argument(init: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The `processes` value a call `init(*args, **kwargs)` passes, whether given by position, keyword or default."""
    bound = inspect.signature(init).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments["processes"]


def _pool_classes() -> list[type]:
    import multiprocessing.pool

    from multiprocess import pool as mp_pool

    return [mp_pool.Pool, multiprocessing.pool.Pool]


@contextlib.contextmanager
def spy_pools() -> Iterator[PoolLog]:
    """Wrap each pool class's `__init__` so every construction is logged, then put the originals back."""
    log = PoolLog()
    originals = {cls: cls.__dict__["__init__"] for cls in _pool_classes()}
    for cls, original in originals.items():
        cls.__init__ = _recording(original, log)
    try:
        yield log
    finally:
        for cls, original in originals.items():
            cls.__init__ = original


def _recording(original: Callable[..., None], log: PoolLog) -> Callable[..., None]:
    @functools.wraps(original)
    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        # Logged before calling through so a pool whose start fails is still seen.
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        log.append(PoolCall(kind, processes_argument(original, (self, *args), kwargs)))
        original(self, *args, **kwargs)

    return recording_init


def _double(batch: dict[str, list[int]]) -> dict[str, list[int]]:
    return {"doubled": [2 * value for value in batch["value"]]}


def _parse_num_proc(text: str) -> int | None:
    return None if text == "none" else int(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-proc", type=_parse_num_proc, default=None, help="an int, or 'none'")
    parser.add_argument("--rows", type=int, default=300)
    options = parser.parse_args(argv)

    import datasets

    dataset = datasets.Dataset.from_dict({"value": list(range(options.rows))})
    with spy_pools() as log:
        try:
            dataset.map(_double, batched=True, num_proc=options.num_proc, load_from_cache_file=False)
            outcome = "ok"
        except ValueError as error:
            outcome = f"ValueError: {error}"
    print(
        json.dumps(
            {
                "datasets": datasets.__version__,
                "num_proc": options.num_proc,
                "outcome": outcome,
                "pools": [asdict(call) for call in log],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
