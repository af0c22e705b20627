"""vLLM's calls on MLX: `fast_inference=True`, `from vllm import SamplingParams`, `model.fast_generate`,
`model.save_lora` and `model.load_lora`, on the tiny llama with real mlx_lm batched sampling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_python

VLLM_KEYWORDS = {"fast_inference": True, "max_lora_rank": 32, "gpu_memory_utilization": 0.9}


def load_fast(tiny_model_dir: Path, lora: bool = True) -> tuple:
    from unsloth import FastLanguageModel

    with pytest.warns(RuntimeWarning, match="max_lora_rank, gpu_memory_utilization have no effect on MLX"):
        model, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir), max_seq_length=128, **VLLM_KEYWORDS)
    if lora:
        model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
    return model, tokenizer


def draw_adapter(model: Any, seed: int, size: float = 0.5) -> None:
    """Non-zero `lora_b`, so the adapter really changes the model's outputs."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    drawn = [
        (name, mx.random.normal(array.shape) * size)
        for name, array in tree_flatten(model.trainable_parameters())
        if name.endswith("lora_b")
    ]
    model.load_weights(drawn, strict=False)


def greedy(max_tokens: int = 8) -> Any:
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


PROMPTS = ["The kettle is", "Bees carry pollen to", "The river bends"]


def test_vllm_reads_as_absent_until_imported_and_trl_keeps_saying_so() -> None:
    found = run_python(
        "import importlib.util, importlib.metadata, json, unsloth\n"
        "before = importlib.util.find_spec('vllm') is None\n"
        "try:\n    importlib.metadata.version('vllm'); version = 'found'\n"
        "except importlib.metadata.PackageNotFoundError:\n    version = 'absent'\n"
        "from vllm import SamplingParams\n"
        "from vllm.lora.request import LoRARequest\n"
        "trl = None\n"
        "if importlib.util.find_spec('trl.import_utils') is not None:\n"
        "    from trl.import_utils import is_vllm_available\n"
        "    trl = is_vllm_available()\n"
        "print(json.dumps({'before': before, 'version': version, 'name': SamplingParams.__name__, 'trl': trl,\n"
        "                  'lora': LoRARequest.__name__}))"
    )
    assert found["before"] is True
    assert found["version"] == "absent"
    assert found["name"] == "SamplingParams" and found["lora"] == "LoRARequest"
    assert found["trl"] in (None, False)


def test_without_the_mlx_path_there_is_no_vllm_stand_in() -> None:
    found = run_python(
        "import json, unsloth\ntry:\n    import vllm; result = 'imported'\n"
        "except ImportError:\n    result = 'refused'\nprint(json.dumps({'result': result}))",
        gate="0",
    )
    assert found == {"result": "refused"}


def test_sampling_params_map_onto_mlx_lm_terms() -> None:
    from vllm import SamplingParams

    sampling = SamplingParams(min_p=0.1, top_p=1.0, top_k=-1, seed=3407, stop="</s>", max_tokens=20).sampling(16)
    assert (sampling.top_k, sampling.top_p, sampling.min_p, sampling.seed) == (0, 1.0, 0.1, 3407)
    assert sampling.stop == ("</s>",) and sampling.max_tokens == 20
    assert SamplingParams(top_k=50).sampling(16).top_k == 50
    with pytest.raises(NotImplementedError, match="logprobs=5"):
        SamplingParams(logprobs=5)
    with pytest.raises(TypeError):
        SamplingParams(not_a_field=1)


def test_fast_generate_answers_in_vllms_shape_for_a_batch(tiny_model_dir: Path) -> None:
    model, tokenizer = load_fast(tiny_model_dir)
    outputs = model.fast_generate(PROMPTS, sampling_params=greedy(6), lora_request=None)
    assert [output.prompt for output in outputs] == PROMPTS
    for output in outputs:
        completion = output.outputs[0]
        assert isinstance(completion.text, str)
        assert 1 <= len(completion.token_ids) <= 6
        assert completion.finish_reason in ("stop", "length")
    single = model.fast_generate(PROMPTS[0], sampling_params=greedy(6))
    assert single[0].outputs[0].text == outputs[0].outputs[0].text


def test_seed_max_tokens_and_n_are_honoured(tiny_model_dir: Path) -> None:
    from vllm import SamplingParams

    model, _ = load_fast(tiny_model_dir)
    params = SamplingParams(temperature=1.0, top_k=-1, min_p=0.05, seed=7, max_tokens=5, n=3)
    first = model.fast_generate(PROMPTS[:2], sampling_params=params)
    again = model.fast_generate(PROMPTS[:2], sampling_params=params)
    texts = [[sample.text for sample in output.outputs] for output in first]
    assert texts == [[sample.text for sample in output.outputs] for output in again]
    assert [len(output.outputs) for output in first] == [3, 3]
    assert all(len(sample.token_ids) <= 5 for output in first for sample in output.outputs)


def test_stop_strings_cut_the_text_with_or_without_the_stop(tiny_model_dir: Path) -> None:
    from vllm import SamplingParams

    model, _ = load_fast(tiny_model_dir)
    free = model.fast_generate(PROMPTS[0], sampling_params=greedy(24))[0].outputs[0].text
    assert len(free) >= 4, free
    stop = free[2:4]
    kept = SamplingParams(temperature=0.0, max_tokens=24, stop=[stop], include_stop_str_in_output=True)
    cut = SamplingParams(temperature=0.0, max_tokens=24, stop=[stop])
    with_stop = model.fast_generate(PROMPTS[0], sampling_params=kept)[0].outputs[0]
    without = model.fast_generate(PROMPTS[0], sampling_params=cut)[0].outputs[0]
    assert with_stop.text == free[: free.index(stop) + len(stop)]
    assert without.text == free[: free.index(stop)]
    assert with_stop.finish_reason == "stop" and with_stop.stop_reason == stop


def test_no_lora_request_samples_the_base_model(tiny_model_dir: Path) -> None:
    from unsloth import FastLanguageModel

    from unsloth.mlx.models.fast_inference import fast_generate

    base, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir), max_seq_length=128)
    model, _ = load_fast(tiny_model_dir)
    draw_adapter(model, seed=1)
    expected = [output.outputs[0].token_ids for output in fast_generate(base, tokenizer, PROMPTS, greedy(8))]
    off = [output.outputs[0].token_ids for output in model.fast_generate(PROMPTS, sampling_params=greedy(8))]
    assert off == expected


def test_save_lora_writes_peft_layout_and_load_lora_swaps_it_in(tiny_model_dir: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    model, _ = load_fast(tiny_model_dir)
    draw_adapter(model, seed=2)
    model.save_lora(str(tmp_path / "grpo_saved_lora"))
    config = json.loads((tmp_path / "grpo_saved_lora" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 8, 16.0)
    assert config["target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    with safe_open(str(tmp_path / "grpo_saved_lora" / "adapter_model.safetensors"), framework="numpy") as stream:
        keys = list(stream.keys())
        name = "base_model.model.model.layers.0.self_attn.q_proj"
        a, b = stream.get_tensor(f"{name}.lora_A.weight"), stream.get_tensor(f"{name}.lora_B.weight")
    assert len(keys) == 2 * 7 * 2
    assert a.shape == (8, 64) and b.shape == (64, 8)
    assert (b != 0).any()

    base = [output.outputs[0].token_ids for output in model.fast_generate(PROMPTS, sampling_params=greedy(8))]
    handle = model.load_lora(str(tmp_path / "grpo_saved_lora"))
    with_adapter = [o.outputs[0].token_ids for o in model.fast_generate(PROMPTS, greedy(8), lora_request=handle)]
    draw_adapter(model, seed=3)
    after_change = [o.outputs[0].token_ids for o in model.fast_generate(PROMPTS, greedy(8), lora_request=handle)]
    assert with_adapter == after_change
    assert with_adapter != base


def test_save_lora_without_lora_and_a_missing_adapter_are_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    model, _ = load_fast(tiny_model_dir, lora=False)
    with pytest.raises(ValueError, match="save_lora needs a LoRA model"):
        model.save_lora(str(tmp_path / "nothing"))
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(FileNotFoundError, match="holds no adapter_model.safetensors"):
        model.load_lora(str(tmp_path / "missing"))
