"""Issue 46: a notebook's own torch modules (a codec, a reward model) moved to "cuda" on the MLX path stay usable.

Each case runs in a fresh interpreter with the shims installed: `Module.to("cuda")` once raised from the tensor shim.
"""

from __future__ import annotations

from ..conftest import run_python

PROBE = """
import json
import unsloth
import torch
codec = torch.nn.Sequential(torch.nn.Conv1d(1, 4, 3), torch.nn.GELU(), torch.nn.Linear(6, 2))
before = [parameter.detach().clone() for parameter in codec.parameters()]
report = {"to_cuda_is_self": codec.to("cuda") is codec}
report["to_device_keyword"] = codec.to(device=torch.device("cuda:0")) is codec
report["cuda"] = codec.cuda() is codec
codec.to("cuda", torch.float16)
report["to_cuda_half"] = str(next(codec.parameters()).dtype)
codec.to("cuda", dtype=torch.float32, non_blocking=True)
report["back_to_float"] = str(next(codec.parameters()).dtype)
report["same_values"] = all(torch.equal(a.half().float(), b) for a, b in zip(before, codec.parameters()))
waveform = torch.ones(1, 1, 8).to("cuda")
report["device_agrees"] = [str(next(codec.parameters()).device), str(codec(waveform).device)]
report["to_cpu"] = codec.to("cpu") is codec and next(codec.parameters()).device.type
report["half_buffers"] = str(torch.nn.BatchNorm1d(2).to("cuda", torch.float16).running_mean.dtype)
print(json.dumps(report))
"""


def test_a_torch_module_moved_to_cuda_stays_on_the_cpu_and_keeps_working() -> None:
    report = run_python(PROBE)
    assert report["to_cuda_is_self"] and report["to_device_keyword"] and report["cuda"]
    assert report["to_cuda_half"] == "torch.float16"
    assert report["back_to_float"] == "torch.float32" and report["same_values"]
    # Tensors sent to "cuda" stay on the CPU, so a module sent there must too, or a forward pass mixes devices.
    assert report["device_agrees"] == ["cpu", "cpu"]
    assert report["to_cpu"] == "cpu"
    assert report["half_buffers"] == "torch.float16"
