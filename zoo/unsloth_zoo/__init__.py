# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Utilities shared by unsloth's trainers. Importing this package is cheap: submodules load on use."""

__version__ = "2026.12.0"
