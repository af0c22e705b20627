# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""unsloth: trainer configs and dataset preparation sized by the dataset worker-count policy."""

__version__ = "2026.12.0"
