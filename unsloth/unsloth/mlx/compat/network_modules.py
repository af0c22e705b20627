# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The speech notebooks' codec modules that only a git clone or a pip install over the network provides.

A finder placed after the real ones (an installed or cloned module always wins) turns the bare "No module named
'sparktts'" of a notebook cell into an error naming the codec, where it comes from, and why MLX has no stand-in.
`importlib.util.find_spec` probes still get None.
"""

from __future__ import annotations

import importlib.machinery
import sys
from typing import Any, Dict, Optional

from .vllm_stand_in import _probing

# Top-level module -> what provides it and how the notebook fetches it, and what MLX has in its place.
NETWORK_MODULES: Dict[str, str] = {
    "sparktts": (
        "Spark TTS's BiCodec tokenizer, from SparkAudio's repository (the notebook's "
        "`git clone https://github.com/SparkAudio/Spark-TTS` and `sys.path.append('Spark-TTS')`); mlx-audio's "
        "MLX BiCodec is not checked against it, so it does not stand in"
    ),
    "outetts": (
        "Oute TTS's DAC interface and prompt processor, from OuteTTS's repository (the notebook's "
        "`git clone https://github.com/edwko/OuteTTS` and `sys.path.append('OuteTTS')`); mlx-audio's MLX DAC is "
        "not checked against it, so it does not stand in"
    ),
    "dac": (
        "the DAC codec Oute TTS encodes with (`pip install descript-audio-codec descript-audiotools`); mlx-audio's "
        "MLX DAC is not checked against it, so it does not stand in"
    ),
    "xcodec2": (
        "Llasa's XCodec2 codec (`pip install xcodec2==0.1.5` with torchtune and vector_quantize_pytorch, and the "
        "HKUST-Audio/xcodec2 checkpoint); mlx-audio has no XCodec2"
    ),
}


def missing_message(name: str) -> str:
    return f"No module named {name!r}: it is {NETWORK_MODULES[name]}. Fetching it needs the network"


class NetworkModuleFinder:
    """Last on `sys.meta_path`: reached only when no real module was found, and silent to `find_spec` probes."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in NETWORK_MODULES or _probing():
            return None
        raise ModuleNotFoundError(missing_message(fullname), name=fullname)

    def invalidate_caches(self) -> None:
        return None


_FINDER = NetworkModuleFinder()


def install_network_module_finder() -> None:
    """Put the finder at the end of `sys.meta_path`; idempotent."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
