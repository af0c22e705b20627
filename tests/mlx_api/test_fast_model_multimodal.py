"""`FastModel` on a multimodal checkpoint (a config with a vision tower: tiny Gemma 3 and Gemma 4 built from
mlx-vlm's own classes) loads it with its tower and returns the processor, as CUDA Unsloth's FastModel does; the Gemma
text notebooks' text-only training then runs on that vision model; a text checkpoint stays an mlx-lm model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from .conftest import run_python

# Gemma 4's processor builds its audio feature extractor as the real checkpoint does, and transformers warns so.
pytestmark = pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")
FAMILIES = ("gemma3", "gemma4")
# Each family's turn markers, as its chat template writes them.
TURNS = {
    "gemma3": ("<start_of_turn>user\n", "<end_of_turn>\n", "<start_of_turn>model\n"),
    "gemma4": ("<|turn>user\n", "<turn|>\n", "<|turn>model\n"),
}
TEMPLATES = {"gemma3": "gemma-3", "gemma4": "gemma-4"}
FACTS = [("What colour is the kettle?", "The kettle is red."), ("Where do bees go?", "Bees go to the hive.")]


@pytest.fixture(scope="module")
def multimodal_dirs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    from tools.kits.tiny_vlm_model import BUILDERS

    root = tmp_path_factory.mktemp("tiny-multimodal")
    return {family: BUILDERS[family](root / family) for family in FAMILIES}


def text_rows(family: str, copies: int = 8) -> List[Dict[str, str]]:
    user, end, model = TURNS[family]
    return [{"text": f"{user}{q}{end}{model}{a}{end}"} for q, a in FACTS] * copies


def text_config(tmp_path: Path, **overrides: Any) -> Any:
    from trl import SFTConfig

    values: Dict[str, Any] = {
        "dataset_text_field": "text",
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "warmup_steps": 0,
        "max_steps": 12,
        "learning_rate": 5e-3,
        "logging_steps": 1,
        "seed": 3407,
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "save_strategy": "no",
    }
    values.update(overrides)
    return SFTConfig(**values)


def notebook_peft(model: Any) -> Any:
    from unsloth import FastModel

    return FastModel.get_peft_model(
        model,
        finetune_vision_layers=False,
        finetune_language_layers=True,
        finetune_attention_modules=True,
        finetune_mlp_modules=True,
        r=8,
        lora_alpha=8,
        lora_dropout=0,
        bias="none",
        random_state=3407,
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_a_multimodal_checkpoint_loads_with_its_tower_and_processor(multimodal_dirs, family) -> None:
    from unsloth import FastModel
    from unsloth.mlx.vision.backend import vision_tower

    model, processor = FastModel.from_pretrained(str(multimodal_dirs[family]), max_seq_length=2048)
    assert vision_tower(model) is not None
    assert hasattr(processor, "image_processor")
    # FastModel's default is 4-bit: the language model is quantized, the tower is not.
    assert any(type(m).__name__ == "QuantizedLinear" for _, m in model.language_model.named_modules())
    assert not any(type(m).__name__ == "QuantizedLinear" for _, m in vision_tower(model).named_modules())


@pytest.mark.parametrize("family", FAMILIES)
def test_text_only_rows_train_on_the_vision_model_with_responses_only(multimodal_dirs, family, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth import FastModel
    from unsloth.chat_templates import train_on_responses_only

    model, processor = FastModel.from_pretrained(str(multimodal_dirs[family]), max_seq_length=2048, load_in_4bit=True)
    model = notebook_peft(model)
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        train_dataset=text_rows(family),
        eval_dataset=None,
        args=text_config(tmp_path, max_steps=24),
    )
    user, _, answer = TURNS[family]
    trainer = train_on_responses_only(trainer, instruction_part=user, response_part=answer)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 24 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 2, losses


def test_the_text_call_is_the_language_models_and_image_calls_are_unchanged(multimodal_dirs) -> None:
    import mlx.core as mx

    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(multimodal_dirs["gemma3"]), load_in_4bit=False)
    tokens = mx.array([[2, 5, 9, 11, 4]])
    own = model.language_model(tokens).logits
    assert np.allclose(np.asarray(model(tokens)), np.asarray(own))
    assert type(model).__module__ == "mlx_vlm.models.gemma3.gemma3"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_text_notebook_cells_run_after_text_training(multimodal_dirs, family, tmp_path) -> None:
    """get_chat_template, the text rows the Gemma 3 / Gemma 4 text notebooks format, responses-only training, then
    generate and the adapter's save and reload through FastModel."""
    from trl import SFTTrainer

    from unsloth import FastModel
    from unsloth.chat_templates import get_chat_template, train_on_responses_only

    model, tokenizer = FastModel.from_pretrained(str(multimodal_dirs[family]), max_seq_length=2048)
    model = notebook_peft(model)
    tokenizer = get_chat_template(tokenizer, chat_template=TEMPLATES[family])
    convos = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in FACTS] * 8
    texts = [tokenizer.apply_chat_template(c, tokenize=False).removeprefix("<bos>") for c in convos]
    trainer = SFTTrainer(
        model=model,
        tokenizer=tokenizer,
        train_dataset=[{"text": text} for text in texts],
        args=text_config(tmp_path, max_steps=30),
    )
    user, _, answer = TURNS[family]
    trainer = train_on_responses_only(trainer, instruction_part=user, response_part=answer)
    trainer.train()
    messages = [{"role": "user", "content": [{"type": "text", "text": FACTS[0][0]}]}]
    # NumPy tensors: this venv has no torch, which transformers' processors need for "pt".
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_tensors="np", return_dict=True
    )
    prompt = inputs["input_ids"].shape[1]
    output = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert tokenizer.decode(output[0, prompt:].tolist(), skip_special_tokens=True).startswith("The kettle is")
    model.save_pretrained(str(tmp_path / "lora"), tokenizer)
    reloaded, _ = FastModel.from_pretrained(str(tmp_path / "lora"), max_seq_length=2048, load_in_4bit=True)
    again = reloaded.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert again[0].tolist() == output[0].tolist()


def test_a_text_checkpoint_stays_a_text_model(tiny_model_dir) -> None:
    from unsloth import FastModel

    model, tokenizer = FastModel.from_pretrained(str(tiny_model_dir), load_in_4bit=False)
    assert type(model).__module__.startswith("mlx_lm.models.")
    assert not hasattr(tokenizer, "image_processor")


def test_towers_of_a_family_vision_training_refuses_keep_the_text_model(tiny_model_dir, tmp_path, caplog) -> None:
    from unsloth import FastModel

    folder = shutil.copytree(tiny_model_dir, tmp_path / "llama-with-a-tower")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["vision_config"] = {"model_type": "siglip_vision_model", "hidden_size": 16}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    model, _ = FastModel.from_pretrained(str(folder), load_in_4bit=False)
    assert type(model).__module__ == "mlx_lm.models.llama"
    assert "'llama' is not among the vision families that train" in caplog.text


def test_text_only_loads_the_language_model_through_mlx_lm(multimodal_dirs) -> None:
    from unsloth_zoo.mlx.lora import lora_settings

    from unsloth import FastModel

    model, tokenizer = FastModel.from_pretrained(str(multimodal_dirs["gemma3"]), text_only=True)
    assert type(model).__module__ == "mlx_lm.models.gemma3"
    assert not hasattr(tokenizer, "image_processor")
    model = notebook_peft(model)
    targets = {key.rsplit(".", 1)[-1] for key in lora_settings(model).keys}
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_another_auto_model_is_refused_by_name(multimodal_dirs) -> None:
    from transformers import AutoModelForCausalLM

    from unsloth import FastModel

    with pytest.raises(NotImplementedError, match="auto_model=AutoModelForCausalLM"):
        FastModel.from_pretrained(str(multimodal_dirs["gemma4"]), auto_model=AutoModelForCausalLM)


def test_finetune_audio_layers_without_an_audio_tower_is_refused_by_name(multimodal_dirs) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(multimodal_dirs["gemma4"]), load_in_4bit=False)
    with pytest.raises(NotImplementedError, match="finetune_audio_layers=True: this checkpoint has no audio tower"):
        FastModel.get_peft_model(model, r=8, finetune_audio_layers=True)


IMAGE_CELL = """
import json
from PIL import Image
from transformers import TextStreamer
from unsloth import FastModel, get_chat_template
model, processor = FastModel.from_pretrained("unsloth/gemma-4-E2B-it", load_in_4bit=True)
processor = get_chat_template(processor, "gemma-4")
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}]
input_text = processor.apply_chat_template(messages, add_generation_prompt=True)
image = Image.new("RGB", (SIDE, SIDE), (220, 30, 30))
inputs = processor(image, input_text, add_special_tokens=False, return_tensors="pt").to("cuda")
result = model.generate(**inputs, streamer=TextStreamer(processor, skip_prompt=True), max_new_tokens=4,
    use_cache=True, temperature=1.0, top_p=0.95, top_k=64)
print(json.dumps({"prompt": int(inputs["input_ids"].shape[1]), "length": int(result.shape[1]),
    "pixels": list(inputs["pixel_values"].shape), "source": model.unsloth_base_model}))
"""


def test_the_gemma_4_vision_notebook_cell_generates_from_a_hub_id(multimodal_dirs, tmp_path, monkeypatch) -> None:
    from tools.kits.tiny_vlm_model import IMAGE_SIDES

    repository = tmp_path / "hf-home" / "hub" / "models--unsloth--gemma-4-E2B-it"
    revision = "0" * 40
    shutil.copytree(multimodal_dirs["gemma4"], repository / "snapshots" / revision)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(revision, encoding="utf-8")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = run_python(IMAGE_CELL.replace("SIDE", str(IMAGE_SIDES["gemma4"])), timeout=300)
    assert found["length"] > found["prompt"] and found["pixels"][0] == 1, found
    assert found["source"] == "unsloth/gemma-4-E2B-it"
