"""`torch.cuda.current_device()` and `torch.cuda.set_device()` as notebooks call them, answered for MLX's one device."""

from __future__ import annotations

from ..conftest import run_python


def test_current_device_is_zero_and_set_device_accepts_only_it() -> None:
    found = run_python(
        "import json\n"
        "import unsloth\n"
        "import torch\n"
        "out = {'current': torch.cuda.current_device()}\n"
        "for device in (0, 'cuda', 'cuda:0', torch.device('cuda', 0)):\n"
        "    torch.cuda.set_device(device)\n"
        "try:\n"
        "    torch.cuda.set_device(1)\n"
        "except ValueError as error:\n"
        "    out['error'] = str(error)\n"
        "print(json.dumps(out))\n"
    )
    assert found == {"current": 0, "error": "set_device(1): MLX has a single device, 0"}
