"""Rule 5: the CUDA calls notebooks make through torch, answered by MLX once torch is imported on the MLX path.

Each case runs in a fresh interpreter: whether torch was imported before or after unsloth is the point.
"""

from __future__ import annotations

import os

from ..conftest import run_python

PROBE = """
import json, os, sys
{imports}
import mlx.core as mx
from transformers import AutoTokenizer
cuda = torch.cuda
report = {{"ours": cuda.mem_get_info.__module__}}
mx.synchronize()
before = cuda.memory_allocated()
block = mx.ones((1000, 1000), dtype=mx.float32)
mx.eval(block)
report["allocated_growth"] = cuda.memory_allocated() - before
report["peak_at_least_current"] = cuda.max_memory_allocated() >= cuda.memory_allocated()
cuda.reset_peak_memory_stats()
report["after_reset"] = [
    cuda.max_memory_allocated() >= cuda.memory_allocated(),
    cuda.max_memory_reserved() >= cuda.memory_reserved() >= cuda.memory_allocated(),
]
free, total = cuda.mem_get_info()
report["free_total"] = [free, total, total - mx.get_active_memory()]
del block
cuda.empty_cache()
cuda.synchronize()
report["cache_after_empty"] = mx.get_cache_memory()
report["count"] = cuda.device_count()
properties = cuda.get_device_properties(0)
report["properties"] = [properties.total_memory, properties.name]
x = torch.ones(3)
report["tensor_to"] = [
    x.to("cuda") is x, x.to(device="cuda") is x, x.to("cuda:0") is x,
    x.to(torch.device("cuda")) is x, x.to(0) is x, x.cuda() is x,
]
report["tensor_forwarded"] = [
    str(x.to("cuda", torch.float16).dtype), str(x.to(torch.float64).dtype),
    str(x.to("meta").device), x.to("cuda", copy=True) is x,
]
tokenizer = AutoTokenizer.from_pretrained({model_dir!r})
encoded = tokenizer(["the kettle"], return_tensors="pt")
report["encoding_to"] = [
    encoded.to("cuda") is encoded, encoded.to(device="cuda") is encoded, encoded["input_ids"].device.type,
]
report["encoding_meta"] = encoded.to("meta")["input_ids"].device.type
from unsloth.mlx.compat import torch_shims
before_again = torch.Tensor.to
torch_shims.apply_torch_shims(torch)
wrapped = torch.Tensor.to.__wrapped__
report["idempotent"] = torch.Tensor.to is before_again and not hasattr(wrapped, "__unsloth_mlx_shim__")
print(json.dumps(report))
"""

UNSLOTH_THEN_TORCH = "import unsloth\nassert 'torch' not in sys.modules\nimport torch"
TORCH_THEN_UNSLOTH = "import torch\nimport unsloth"


def _check(report: dict) -> None:
    assert report["ours"] == "unsloth.mlx.compat.memory"
    assert report["allocated_growth"] == 4_000_000  # 1000 * 1000 float32 values, in exact bytes
    assert report["peak_at_least_current"] and report["after_reset"] == [True, True]
    free, total, expected_free = report["free_total"]
    assert total == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # host memory on the CPU backend
    assert free == expected_free
    assert report["cache_after_empty"] == 0 and report["count"] == 1
    assert report["properties"][0] == total and report["properties"][1].endswith("(MLX CPU)")
    assert report["tensor_to"] == [True] * 6
    assert report["tensor_forwarded"] == ["torch.float16", "torch.float64", "meta", False]
    assert report["encoding_to"] == [True, True, "cpu"]
    assert report["encoding_meta"] == "meta"
    assert report["idempotent"]


def test_shims_installed_when_torch_is_imported_after_unsloth(tiny_model_dir) -> None:
    _check(run_python(PROBE.format(imports=UNSLOTH_THEN_TORCH, model_dir=str(tiny_model_dir))))


def test_shims_installed_at_once_when_torch_was_imported_first(tiny_model_dir) -> None:
    _check(run_python(PROBE.format(imports=TORCH_THEN_UNSLOTH, model_dir=str(tiny_model_dir))))


def test_gate_off_leaves_torch_alone() -> None:
    found = run_python(
        "import json, unsloth, torch\n"
        "shimmed = hasattr(torch.Tensor.to, '__unsloth_mlx_shim__')\n"
        "print(json.dumps({'module': torch.cuda.mem_get_info.__module__, 'shimmed': shimmed}))\n",
        gate="0",
    )
    assert found == {"module": "torch.cuda.memory", "shimmed": False}
