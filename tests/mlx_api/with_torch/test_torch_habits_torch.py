"""Issue 46 item 5, with torch imported: an MLX model's dtype and devices are torch's, so notebook cells that build
torch tensors beside it (`torch.rand(..., device=p.device)`, `autocast(dtype=model.dtype)`) run."""

from __future__ import annotations


def test_parameters_and_dtype_speak_torch(load_public) -> None:
    import torch

    model, _ = load_public()
    parameter = next(model.parameters())
    assert parameter.device == torch.device("cpu") and isinstance(parameter.dtype, torch.dtype)
    assert torch.rand(3, device=parameter.device).device.type == "cpu"
    assert model.dtype in (torch.float32, torch.bfloat16, torch.float16)
    assert model.to(torch.bfloat16) is model and model.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in model.parameters() if p.dtype.is_floating_point)
    # The DeepSeek-OCR collator's habit: cast its pixel values to the model's dtype.
    assert torch.ones(2).to(model.dtype).dtype == torch.bfloat16
    dev = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    assert torch.zeros(2).to(dev).device == dev
