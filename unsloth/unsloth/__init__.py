# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""unsloth: trainer configs and dataset preparation sized by the dataset worker-count policy."""

import contextlib as _contextlib

__version__ = "2026.12.0"

# Beside an older zoo, its SFT map site is patched to size through the policy; nothing here may fail the import.
with _contextlib.suppress(Exception):
    from .zoo_compat import patch_older_zoo

    patch_older_zoo()
