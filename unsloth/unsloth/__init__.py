# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""unsloth: trainer configs and dataset preparation sized by the dataset worker-count policy."""

__version__ = "2026.12.0"
with __import__("contextlib").suppress(Exception): from .zoo_compat import patch_older_zoo; patch_older_zoo()  # an older zoo's SFT map then sizes by the policy; nothing here may fail the import
