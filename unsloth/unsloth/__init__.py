# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""unsloth: trainer configs and dataset preparation sized by the dataset worker-count policy.

On an MLX host (as the zoo's gate decides) it also carries the public trainer API, `FastLanguageModel`,
`UnslothTrainer`, `UnslothTrainingArguments` and friends, from `unsloth.mlx`; that path never imports torch.
"""

import contextlib as _contextlib
import warnings as _warnings

__version__ = "2026.12.0"

# Beside an older zoo, its SFT map site is patched to size through the policy; nothing here may fail the import.
with _contextlib.suppress(Exception):
    from .zoo_compat import patch_older_zoo

    patch_older_zoo()

# The MLX switch must not fail the import either, but a broken setup is reported rather than hidden.
try:
    from .mlx.activation import activate as _activate_mlx, gate_reason as _gate_reason

    _ON_MLX = _activate_mlx()
    _MLX_GATE_REASON = _gate_reason()
except Exception as _error:
    _ON_MLX = False
    _MLX_GATE_REASON = f"switching to it failed: {_error!r}"
    _warnings.warn(f"unsloth could not switch to the MLX backend: {_error!r}", RuntimeWarning, stacklevel=2)

# Off MLX, an installed trl gets its dataset maps sized by the policy, patched when the program imports it.
if not _ON_MLX:
    try:
        from .trl_patch import install as _install_trl_patch

        _install_trl_patch()
    except Exception as _error:
        _warnings.warn(f"unsloth could not watch for trl: {_error!r}", RuntimeWarning, stacklevel=2)

from .mlx import FAMILY_ENTRY_POINTS as _FAMILY_ENTRY_POINTS  # noqa: E402

_MLX_EXPORTS = {
    "FastLanguageModel": "unsloth.mlx",
    "FastModel": "unsloth.mlx",
    "UnslothTrainer": "unsloth.mlx",
    "UnslothTrainingArguments": "unsloth.mlx",
    "MLXTrainer": "unsloth_zoo.mlx",
    "MLXTrainingConfig": "unsloth_zoo.mlx",
    "is_bfloat16_supported": "unsloth.mlx",
    "memory_stats": "unsloth.mlx",
    "mem_get_info": "unsloth.mlx",
    "reset_peak_memory_stats": "unsloth.mlx",
    "empty_cache": "unsloth.mlx",
    "get_chat_template": "unsloth.chat_templates",
    "train_on_responses_only": "unsloth.chat_templates",
    "get_gpu_memory_stats": "unsloth.mlx.compat.memory",
    "clear_gpu_memory": "unsloth.mlx.compat.memory",
    "RawTextDataLoader": "unsloth.mlx.training.raw_text",
    "TextPreprocessor": "unsloth.mlx.training.raw_text",
    "FastVisionModel": "unsloth.mlx.vision.model",
    "FastSentenceTransformer": "unsloth.mlx",
    "UnslothVisionDataCollator": "unsloth.mlx.vision.model",
    "PatchDPOTrainer": "unsloth.mlx",
    "PatchFastRL": "unsloth.mlx",
    "to_sharegpt": "unsloth.chat_templates",
    "standardize_sharegpt": "unsloth.chat_templates",
    "standardize_data_formats": "unsloth.chat_templates",
    "apply_chat_template": "unsloth.chat_templates",
    "is_bf16_supported": "unsloth.mlx.compat.memory",
    **{_name: "unsloth.mlx" for _name in _FAMILY_ENTRY_POINTS},
}
# Pure-Python helpers the RL notebooks import, the same on every backend.
_EVERYWHERE = {
    "check_python_modules": "unsloth.rl_environments",
    "create_locked_down_function": "unsloth.rl_environments",
    "execute_with_time_limit": "unsloth.rl_environments",
}


def __getattr__(name):
    # Loaded on first use, so `import unsloth` stays cheap and never pulls in mlx_lm or transformers.
    if name in _EVERYWHERE or (_ON_MLX and name in _MLX_EXPORTS):
        import importlib

        value = getattr(importlib.import_module(_EVERYWHERE.get(name) or _MLX_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _MLX_EXPORTS:
        from .mlx.activation import missing_name_error

        raise missing_name_error(name, _MLX_GATE_REASON)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
