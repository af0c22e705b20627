"""Rule 1: what `unsloth` exports on the MLX path, that importing it never imports torch, and the helpers themselves."""

from __future__ import annotations

import logging
import os
import warnings

import pytest

from .conftest import run_python

EXPORTS = [
    "FastLanguageModel",
    "FastModel",
    "UnslothTrainer",
    "UnslothTrainingArguments",
    "MLXTrainer",
    "MLXTrainingConfig",
    "get_chat_template",
    "train_on_responses_only",
    "is_bfloat16_supported",
    "memory_stats",
    "mem_get_info",
    "reset_peak_memory_stats",
    "empty_cache",
    "get_gpu_memory_stats",
    "clear_gpu_memory",
    "RawTextDataLoader",
    "TextPreprocessor",
    "FastVisionModel",
    "UnslothVisionDataCollator",
]


def test_import_unsloth_exports_the_mlx_api_without_importing_torch() -> None:
    found = run_python(
        "import json, sys\n"
        "import unsloth\n"
        "after_import = sorted(name for name in ('torch', 'transformers', 'mlx_lm', 'trl') if name in sys.modules)\n"
        f"names = {EXPORTS!r}\n"
        "resolved = [name for name in names if getattr(unsloth, name, None) is not None]\n"
        "from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig\n"
        "print(json.dumps({'after_import': after_import, 'resolved': resolved,\n"
        "    'trainer_subclass': issubclass(unsloth.UnslothTrainer, MLXTrainer),\n"
        "    'args_subclass': issubclass(unsloth.UnslothTrainingArguments, MLXTrainingConfig),\n"
        "    'torch_after_names': 'torch' in sys.modules}))\n"
    )
    assert found["after_import"] == []
    assert found["resolved"] == EXPORTS
    assert found["trainer_subclass"] and found["args_subclass"]
    assert found["torch_after_names"] is False


def test_gate_off_leaves_unsloth_as_it_was() -> None:
    found = run_python(
        "import json, sys\n"
        "import unsloth, unsloth.chat_templates as ct\n"
        "ct._is_mlx_trainer(object())\n"
        "print(json.dumps({'on': unsloth._ON_MLX, 'mlx_loaded': 'mlx' in sys.modules,\n"
        "    'has_trainer': hasattr(unsloth, 'UnslothTrainer')}))\n",
        gate="0",
    )
    assert found == {"on": False, "mlx_loaded": False, "has_trainer": False}


def test_memory_helpers_count_exact_bytes() -> None:
    import mlx.core as mx

    from unsloth.mlx.compat import memory

    mx.synchronize()
    before = memory.memory_allocated()
    block = mx.ones((1000, 1000), dtype=mx.float32)
    mx.eval(block)
    assert memory.memory_allocated() - before == 4_000_000  # 1000 * 1000 float32 values
    assert memory.max_memory_allocated() >= memory.memory_allocated()
    memory.reset_peak_memory_stats()
    assert memory.max_memory_allocated() >= memory.memory_allocated() > 0
    assert memory.max_memory_reserved() >= memory.memory_reserved() >= memory.memory_allocated()
    free, total = memory.mem_get_info()
    assert total == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # the CPU backend reports host memory
    assert free == total - mx.get_active_memory()
    del block
    memory.empty_cache()
    assert mx.get_cache_memory() == 0
    assert memory.get_device_properties().total_memory == total
    assert memory.device_count() == 1


def test_is_bfloat16_supported_on_the_cpu_backend() -> None:
    from unsloth import is_bfloat16_supported

    assert is_bfloat16_supported() is True


def test_from_pretrained_extends_context_and_get_peft_model_counts_lora_parameters(load_public, caplog) -> None:
    from mlx.utils import tree_flatten

    caplog.set_level(logging.WARNING)
    model, tokenizer = load_public(max_seq_length=4096)
    assert model.max_seq_length == 4096  # past the tiny llama's 512 positions, by RoPE scaling
    assert "512 positions; RoPE scaling (linear, factor 8)" in caplog.text
    assert tokenizer("Hi", add_special_tokens=False)["input_ids"]  # the Hugging Face tokenizer, callable
    from unsloth import FastLanguageModel

    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16)
    trainable = sum(array.size for _, array in tree_flatten(model.trainable_parameters()))
    # Per block, r * (in + out) over q 64->64, k 64->32, v 64->32, o 64->64, gate and up 64->128, down 128->64
    # is 8 * (128 + 96 + 96 + 128 + 192 + 192 + 192) = 8192; the tiny llama has two blocks.
    assert trainable == 16_384
    assert model.layers[0].self_attn.q_proj.scale == pytest.approx(2.0)


def test_get_peft_model_rslora_scales_by_square_root_of_rank(load_public) -> None:
    from unsloth import FastLanguageModel

    model, _ = load_public()
    model = FastLanguageModel.get_peft_model(model, r=16, lora_alpha=8, use_rslora=True)
    assert model.layers[0].self_attn.q_proj.scale == pytest.approx(8 / 4)


def test_model_loading_refuses_what_would_change_the_model(load_public, tiny_model_dir) -> None:
    from unsloth import FastLanguageModel

    with pytest.raises(NotImplementedError, match=r"does not support quantize_everything"):
        FastLanguageModel.from_pretrained(str(tiny_model_dir), quantize_everything=True)
    model, _ = load_public()
    with pytest.raises(NotImplementedError, match=r"use_dora=True"):
        FastLanguageModel.get_peft_model(model, r=8, use_dora=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FastLanguageModel.from_pretrained(
            str(tiny_model_dir), token="hf_secret", device_map="sequential", load_in_4bit=False, trust_remote_code=True
        )
    expected = "FastLanguageModel.from_pretrained: trust_remote_code has no effect on MLX and is ignored"
    assert [str(item.message) for item in caught] == [expected]


def test_get_chat_template_renders_zephyr_with_the_eos_closing_each_turn(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    _, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, "zephyr")
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert (
        tokenizer.apply_chat_template(messages, tokenize=False) == "<|user|>\nHi<|eos|>\n<|assistant|>\nHello<|eos|>\n"
    )
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>\nHi<|eos|>\n<|assistant|>\n"
    sharegpt = {"role": "from", "content": "value", "user": "human", "assistant": "gpt"}
    tokenizer = get_chat_template(tokenizer, "chatml", mapping=sharegpt, map_eos_token=False)
    text = tokenizer.apply_chat_template(
        [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}], tokenize=False
    )
    assert text == "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
    tokenizer = get_chat_template(tokenizer, "zephyr", system_message="Be brief.")
    with_system = tokenizer.apply_chat_template(messages[:1], tokenize=False)
    assert with_system == "<|system|>\nBe brief.<|eos|>\n<|user|>\nHi<|eos|>\n"
    own_system = [{"role": "system", "content": "Be kind."}, *messages[:1]]
    own_text = tokenizer.apply_chat_template(own_system, tokenize=False)
    assert own_text == "<|system|>\nBe kind.<|eos|>\n<|user|>\nHi<|eos|>\n"
    with pytest.raises(ValueError, match=r"choose one of .*chatml"):
        get_chat_template(tokenizer, "vicuna-9")
