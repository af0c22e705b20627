# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""One module per projector family; importing the package imports each, and each registers its families by
`model_type` (`..registry.register`), so adding a family is adding its module here."""

import importlib
import pkgutil

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    importlib.import_module(f"{__name__}.{_module.name}")
