"""vLLM's calls on a vision model, as the Qwen2.5-VL GRPO notebook makes them: `FastVisionModel(fast_inference=True)`,
`model.fast_generate` with vLLM's `{"prompt": ..., "multi_modal_data": {"image": ...}}` prompts, `model.save_lora`
in PEFT's layout and `model.load_lora`, on a tiny Qwen 2.5 VL decoding through mlx-vlm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest

FAMILY = "qwen2_5_vl"
COLOURS = {"red": (220, 30, 30), "blue": (30, 40, 220)}


def square(colour: str) -> Any:
    from PIL import Image

    return Image.new("RGB", (56, 56), COLOURS[colour])


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import BUILDERS

    return BUILDERS[FAMILY](tmp_path_factory.mktemp("tiny-vlm") / FAMILY)


def load_fast(vision_dir: Path, lora: bool = True) -> tuple:
    from unsloth import FastVisionModel

    with pytest.warns(RuntimeWarning, match="gpu_memory_utilization has no effect on MLX"):
        model, processor = FastVisionModel.from_pretrained(
            str(vision_dir), fast_inference=True, gpu_memory_utilization=0.8
        )
    if lora:
        model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, finetune_vision_layers=False)
    return model, processor


def draw_adapter(model: Any, seed: int) -> None:
    """Non-zero `lora_b`, so the adapter really changes the model's outputs."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    drawn = [
        (name, mx.random.normal(array.shape) * 2.0)
        for name, array in tree_flatten(model.trainable_parameters())
        if name.endswith("lora_b")
    ]
    model.load_weights(drawn, strict=False)


def question(processor: Any, text: str = "Which colour?") -> str:
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    return processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


def greedy(max_tokens: int = 6, **more: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **more)


def generated_ids(model: Any, processor: Any, text: str, image: Any, max_tokens: int = 6) -> List[int]:
    """The new ids of `model.generate` (mlx-vlm's loop, the vision notebooks' path), greedy, without EOS stops."""
    import numpy as np

    inputs = processor(images=[image], text=[text], add_special_tokens=False)
    prompt = np.asarray(inputs["input_ids"])
    extras = {name: np.asarray(value) for name, value in inputs.items() if name not in ("input_ids", "attention_mask")}
    out = model.generate(input_ids=prompt, max_new_tokens=max_tokens, do_sample=False, eos_token_id=[], **extras)
    return [int(token) for token in np.asarray(out)[0, prompt.shape[1] :]]


def test_fast_inference_gives_a_vision_model_vllms_calls(vision_dir: Path) -> None:
    from unsloth import FastVisionModel

    model, _ = load_fast(vision_dir, lora=False)
    assert callable(model.fast_generate) and callable(model.load_lora) and callable(model.save_lora)
    plain, _ = FastVisionModel.from_pretrained(str(vision_dir))
    # As on a text model: save_lora always (CUDA gives every LoRA model it), vLLM's generation only when asked for.
    assert callable(plain.save_lora) and not hasattr(plain, "fast_generate")


def test_a_multimodal_prompt_decodes_as_generate_does_in_vllms_shape(vision_dir: Path) -> None:
    model, processor = load_fast(vision_dir, lora=False)
    text = question(processor)
    image = square("red")
    outputs = model.fast_generate({"prompt": text, "multi_modal_data": {"image": image}}, greedy())
    assert len(outputs) == 1 and outputs[0].prompt == text and len(outputs[0].outputs) == 1
    completion = outputs[0].outputs[0]
    expected = generated_ids(model, processor, text, image)
    assert completion.token_ids == expected[: len(completion.token_ids)] and completion.token_ids
    assert completion.text == processor.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    assert completion.finish_reason in ("stop", "length")
    # The image reaches the model: another colour is another prompt's worth of features.
    assert outputs[0].prompt_token_ids != model.fast_generate(text, greedy())[0].prompt_token_ids


def test_several_prompts_with_n_samples_each(vision_dir: Path) -> None:
    from vllm import SamplingParams

    model, processor = load_fast(vision_dir, lora=False)
    prompts = [{"prompt": question(processor), "multi_modal_data": {"image": square(c)}} for c in COLOURS]
    outputs = model.fast_generate(prompts, SamplingParams(n=3, temperature=1.0, top_k=50, max_tokens=4, seed=0))
    assert [output.request_id for output in outputs] == ["0", "1"]
    assert all([c.index for c in output.outputs] == [0, 1, 2] for output in outputs)
    assert all(1 <= len(c.token_ids) <= 4 for output in outputs for c in output.outputs)


def test_lora_request_none_samples_the_base_and_a_loaded_adapter_samples_itself(
    vision_dir: Path, tmp_path: Path
) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    base, processor = load_fast(vision_dir, lora=False)
    text, image = question(processor), square("blue")
    prompt = {"prompt": text, "multi_modal_data": {"image": image}}
    before = base.fast_generate(prompt, greedy(8))[0].outputs[0].token_ids

    model, _ = load_fast(vision_dir)
    draw_adapter(model, seed=1)
    tuned = generated_ids(model, processor, text, image, max_tokens=8)
    folder = model.save_lora(str(tmp_path / "grpo_lora"))
    assert Path(folder) == tmp_path / "grpo_lora"
    weights = mx.load(str(tmp_path / "grpo_lora" / "adapter_model.safetensors"))
    assert weights and all(name.startswith("base_model.model.language_model.") for name in weights)
    assert {name.rsplit(".", 2)[-2] for name in weights} == {"lora_A", "lora_B"}
    config = json.loads((tmp_path / "grpo_lora" / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["peft_type"] == "LORA" and config["r"] == 8 and config["lora_alpha"] == 16

    # lora_request=None: the base model's answer, with the drawn adapter on the model all along.
    assert model.fast_generate(prompt, greedy(8))[0].outputs[0].token_ids == before
    assert tuned[: len(before)] != before
    own = dict(tree_flatten(model.trainable_parameters()))
    draw_adapter(model, seed=2)
    request = model.load_lora(str(tmp_path / "grpo_lora"))
    answered = model.fast_generate(prompt, greedy(8), lora_request=request)[0].outputs[0].token_ids
    assert answered == tuned[: len(answered)] and answered
    # The adapter drawn last is back in place after the call.
    after = dict(tree_flatten(model.trainable_parameters()))
    assert any(not mx.array_equal(after[name], own[name]).item() for name in own)


def test_what_fast_generate_cannot_honour_is_refused_by_name(vision_dir: Path, tmp_path: Path) -> None:
    model, processor = load_fast(vision_dir, lora=False)
    text = question(processor)
    with pytest.raises(NotImplementedError, match="multi_modal_data.*video"):
        model.fast_generate({"prompt": text, "multi_modal_data": {"video": [square("red")]}}, greedy())
    with pytest.raises(NotImplementedError, match="prompt_token_ids.*multi_modal_data"):
        model.fast_generate({"prompt_token_ids": [1, 2], "multi_modal_data": {"image": square("red")}}, greedy())
    with pytest.raises(ValueError, match=r"save_lora needs a LoRA model.*FastVisionModel\.get_peft_model"):
        model.save_lora(str(tmp_path / "none"))
    from vllm.lora.request import LoRARequest

    with pytest.raises(ValueError, match="lora_request needs a LoRA model"):
        model.fast_generate(text, greedy(), lora_request=LoRARequest("none", 1, str(tmp_path)))
