"""Project tools: sync, drift, host matrix, demo, benchmark and pins; the kits tests share are in `tools.kits`.

The repository root holds the folder `unsloth/` (a distribution, not the package), which Python imports
as an empty namespace package while the root is on sys.path. Once this package is imported its modules
resolve through `tools.__path__`, so the root is taken off sys.path and `unsloth` means the installed package.
"""

import os as _os
import sys as _sys

_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_sys.path[:] = [entry for entry in _sys.path if _os.path.abspath(entry or _os.curdir) != _ROOT]
if getattr(_sys.modules.get("unsloth"), "__file__", "") is None:
    del _sys.modules["unsloth"]  # a namespace package made from the repository's unsloth/ folder
