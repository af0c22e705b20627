"""Gemma 3n through mlx-vlm with its towers, as its notebooks load it (`FastModel.from_pretrained`): text, audio and
image rows train. Checked on a tiny Gemma 3n (`tools/kits/tiny_vlm_gemma3n.py`) carrying mlx-vlm's vision tower at
full size (it builds it so whatever the config says) beside a tiny language model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

# Gemma 3n's feature extractor builds 128 mel filters as the real checkpoints do, and transformers warns so.
pytestmark = pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")

SYSTEM = {"role": "system", "content": [{"type": "text", "text": "You are an assistant that transcribes speech."}]}
# Each answer's tone, and a length in samples at 16 kHz that is not a whole number of audio tokens (160 ms each).
TONES = {"red": (220.0, 7000), "green": (440.0, 9000), "blue": (880.0, 5500), "yellow": (1760.0, 8200)}
IMAGE_SIDE = 256
FACTS = [("What colour is the kettle?", "The kettle is red."), ("Where do bees go?", "Bees go to the hive.")]


def waveform(colour: str) -> List[float]:
    frequency, samples = TONES[colour]
    return (0.3 * np.sin(2 * np.pi * frequency * np.arange(samples) / 16000)).astype(np.float32).tolist()


def user_turn(colour: str) -> Dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "audio", "audio": waveform(colour)}, {"type": "text", "text": "Hear?"}],
    }


def conversation(colour: str) -> Dict[str, Any]:
    answer = {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]}
    return {"messages": [SYSTEM, user_turn(colour), answer]}


@pytest.fixture(scope="module")
def gemma3n_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_gemma3n import build_tiny_gemma3n

    # 512 pixels, the smallest side the tower's fusion adapter takes, keeps each image forward to a minute or so.
    return build_tiny_gemma3n(tmp_path_factory.mktemp("tiny-gemma3n"), image_side=IMAGE_SIDE)


def sft_config(tmp_path: Path, **overrides: Any) -> Any:
    from trl import SFTConfig

    values: Dict[str, Any] = {
        "per_device_train_batch_size": 4,
        "max_steps": 8,
        "learning_rate": 5e-3,
        "warmup_steps": 0,
        "logging_steps": 1,
        "seed": 3407,
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "save_strategy": "no",
    }
    return SFTConfig(**{**values, **overrides})


def _hand_written_loss(model: Any, processor: Any, rows: list, **overrides: Any) -> float:
    """Mean answer loss, each row alone through mlx-vlm's own Gemma 3n call given its embeddings, the text tokens'
    scaled by the square root of the width as its language model and Hugging Face's scale them; `overrides` replace
    (or, given None, drop) the row's features."""
    import mlx.core as mx

    from unsloth.trainer import UnslothVisionDataCollator

    collator = UnslothVisionDataCollator(model, processor)
    width = model.config.text_config.hidden_size
    text_vocab = model.config.text_config.vocab_size_per_layer_input
    total, count = 0.0, 0
    for row in rows:
        encoded = collator.encode(row)
        ids = mx.array(encoded.ids[None, :])
        features = {name: mx.array(value) for name, value in encoded.features.items()}
        features = {name: value for name, value in {**features, **overrides}.items() if value is not None}
        own = model.get_input_embeddings(ids, **features)
        embeds = mx.where((ids < text_vocab)[..., None], own.inputs_embeds * width**0.5, own.inputs_embeds)
        logits = model(ids, inputs_embeds=embeds, per_layer_inputs=own.per_layer_inputs).logits
        logits = np.array(logits[0].astype(mx.float32), dtype=np.float64)[:-1]
        targets = encoded.ids[1:]
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = -log_probs[np.arange(len(targets)), targets]
        total += float(picked[encoded.mask[1:]].sum())
        count += int(encoded.mask[1:].sum())
    return total / count


def test_fast_model_loads_the_towers_and_the_text_embeddings_are_scaled_as_the_language_models(gemma3n_dir) -> None:
    import mlx.core as mx

    from unsloth import FastModel, FastVisionModel
    from unsloth.mlx.vision.backend import gemma3n_embeddings

    model, processor = FastModel.from_pretrained(str(gemma3n_dir), load_in_4bit=False)
    assert type(model).__module__ == "mlx_vlm.models.gemma3n.gemma3n"
    assert model.vision_tower is not None and model.audio_tower is not None
    assert type(processor).__name__ == "Gemma3nProcessor"
    vision_model, _ = FastVisionModel.from_pretrained(str(gemma3n_dir), load_in_4bit=False)
    assert vision_model.vision_tower is not None and vision_model.audio_tower is not None
    ids = mx.array([[2, 5, 9, 11, 4, 40]])
    own = model.language_model(ids).logits
    embeds, per_layer = gemma3n_embeddings(model, ids, None, {})
    rebuilt = model.language_model(None, inputs_embeds=embeds, per_layer_inputs=per_layer).logits
    assert float(mx.abs(own - rebuilt).max()) < 1e-5
    # mlx-vlm 0.7.10's own call leaves text embeddings unscaled; when it stops, gemma3n_embeddings can go.
    unscaled = model.get_input_embeddings(ids).inputs_embeds
    assert float(mx.abs(unscaled - model.language_model.model.embed_tokens(ids)).max()) == 0.0
    prompt = processor.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
    inputs = processor.tokenizer(prompt, add_special_tokens=False, return_tensors="np")
    output = model.generate(input_ids=inputs["input_ids"], max_new_tokens=4, do_sample=False)
    assert np.asarray(output).shape[1] > inputs["input_ids"].shape[1]


def test_audio_rows_train_with_mlx_vlms_own_loss_and_the_reloaded_adapter_answers_audio(gemma3n_dir, tmp_path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from trl import SFTTrainer

    from unsloth import FastModel
    from unsloth.mlx.vision.backend import tower_call_groups
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(gemma3n_dir), max_seq_length=512, load_in_4bit=False)
    model = FastModel.get_peft_model(
        model, finetune_vision_layers=False, finetune_audio_layers=True, r=8, lora_alpha=16, random_state=3407
    )
    rows = [conversation(colour) for colour in TONES]
    expected = _hand_written_loss(model, processor, rows)
    collator = UnslothVisionDataCollator(model, processor)
    # Each clip fills its own fixed run of audio tokens, so a batch of clips is one call.
    assert tower_call_groups(model, [collator.encode(row).features for row in rows]) == [[0, 1, 2, 3]]
    overrides = {"remove_unused_columns": False, "dataset_text_field": "", "max_length": 512}
    trainer = SFTTrainer(
        model=model,
        train_dataset=rows,
        processing_class=processor.tokenizer,
        data_collator=collator,
        args=sft_config(tmp_path, dataset_kwargs={"skip_prepare_dataset": True}, **overrides),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert abs(losses[0] - expected) < 1e-5, (losses[0], expected)
    assert losses[-1] < losses[0] * 0.8, losses
    tower = {name: value for name, value in tree_flatten(model.trainable_parameters()) if name.startswith("audio_")}
    assert tower and any(float(mx.abs(value).max()) > 0 for name, value in tower.items() if "lora_b" in name)
    model.save_pretrained(str(tmp_path / "adapter"))
    processor.save_pretrained(str(tmp_path / "adapter"))
    reloaded, processor = FastModel.from_pretrained(str(tmp_path / "adapter"))
    inputs = processor.apply_chat_template(
        [SYSTEM, user_turn("red")], add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    ).to("cuda")
    assert "input_features" in inputs
    output = reloaded.generate(**inputs, max_new_tokens=6, do_sample=False)
    prompt_length = inputs["input_ids"].shape[1]
    assert output.shape[1] > prompt_length


def test_text_rows_train_in_4bit_with_the_text_notebooks_cells(gemma3n_dir, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth import FastModel
    from unsloth.chat_templates import get_chat_template, train_on_responses_only

    model, processor = FastModel.from_pretrained(str(gemma3n_dir), max_seq_length=512, load_in_4bit=True)
    # The Gemma 3n text notebook's cells: its chat template, LoRA on the language model, responses-only training.
    processor = get_chat_template(processor, "gemma-3n")
    model = FastModel.get_peft_model(model, finetune_vision_layers=False, r=8, lora_alpha=8, random_state=3407)
    chats = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in FACTS]
    rows = [{"text": processor.apply_chat_template(chat, tokenize=False)} for chat in chats] * 8
    config = sft_config(tmp_path, per_device_train_batch_size=2, max_steps=12, dataset_text_field="text")
    trainer = SFTTrainer(model=model, tokenizer=processor, train_dataset=rows, args=config)
    trainer = train_on_responses_only(
        trainer, instruction_part="<start_of_turn>user\n", response_part="<start_of_turn>model\n"
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 1, losses


def test_kv_shared_layers_make_mlx_vlms_cached_pass_differ_and_loading_says_so(caplog) -> None:
    """mlx-vlm's Gemma 3n reuses an earlier layer's keys and values in its last layers only when given a cache, as
    mlx-lm's does: training (uncached) fits a pass generation does not run, so a load with such layers warns."""
    import mlx.core as mx
    from mlx_vlm.models.gemma3n.config import TextConfig
    from mlx_vlm.models.gemma3n.language import LanguageModel

    from tools.kits.tiny_vlm_gemma3n import draw_correct_output_scales, gemma3n_text_config

    from unsloth_zoo.mlx.loading import warn_kv_shared_layers

    tokens = mx.array([[5, 17, 42, 9, 33, 8, 21, 64, 3, 11]])
    for shared in (0, 2):
        mx.random.seed(0)
        model = LanguageModel(TextConfig.from_dict(gemma3n_text_config(128, 128, layers=4, shared=shared)))
        draw_correct_output_scales(model)
        uncached = model(tokens).logits
        cached = model(tokens, cache=model.make_cache()).logits
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="unsloth_zoo.mlx.loading"):
            warn_kv_shared_layers(model)
        warned = [record.message for record in caplog.records if "reuse earlier layers' keys" in record.message]
        difference = float(mx.abs(cached - uncached).max())
        if shared:
            assert difference > 1e-3 and len(warned) == 1 and "2 layers" in warned[0], (difference, warned)
        else:
            assert difference < 1e-4 and not warned, (difference, warned)


def image_conversation(colour: str) -> Dict[str, Any]:
    from PIL import Image

    square = Image.new("RGB", (64, 64), {"red": (220, 30, 30), "blue": (30, 40, 220)}[colour])
    question = {"role": "user", "content": [{"type": "image", "image": square}, {"type": "text", "text": "Colour?"}]}
    return {"messages": [question, {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]}]}


def one_step_trainer(model: Any, processor: Any, row: Dict[str, Any], folder: Path) -> Any:
    """An SFTTrainer of one step on one row, as the vision notebooks build it."""
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    overrides = {"remove_unused_columns": False, "dataset_text_field": "", "max_length": 512}
    return SFTTrainer(
        model=model,
        train_dataset=[row],
        processing_class=processor.tokenizer,
        data_collator=UnslothVisionDataCollator(model, processor),
        args=sft_config(
            folder,
            per_device_train_batch_size=1,
            max_steps=1,
            dataset_kwargs={"skip_prepare_dataset": True},
            **overrides,
        ),
    )


def test_an_image_row_trains_one_step_through_the_full_size_vision_tower(gemma3n_dir, tmp_path) -> None:
    """One step on an image row: the trainer's loss is mlx-vlm's own call's on the tower's features, the image moves
    it, and LoRA learns. The tower runs once (about 60 s of CPU time here, at 256 pixels), in the trainer: mlx-vlm's
    `get_image_features` is observed there, its output kept and passed on unchanged. A text step comes first, so the
    one-off check of which head ends the call (two more calls, `unsloth_zoo.mlx.chunked_loss`) runs on text."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from unsloth import FastModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(gemma3n_dir), max_seq_length=512, load_in_4bit=False)
    # As the Gemma 3n Vision notebook: the tower is all convolutions, so its LoRA sits on the embedder after it.
    model = FastModel.get_peft_model(
        model, finetune_vision_layers=True, target_modules="all-linear", r=8, lora_alpha=16, random_state=3407
    )
    row = image_conversation("red")
    encoded = UnslothVisionDataCollator(model, processor).encode(row)
    assert encoded.features["pixel_values"].shape == (1, 3, IMAGE_SIDE, IMAGE_SIDE)
    assert int((encoded.ids == model.config.image_token_id).sum()) == 256
    text_row = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hello?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]},
        ]
    }
    one_step_trainer(model, processor, text_row, tmp_path / "text").train()
    untrained = dict(tree_flatten(model.trainable_parameters()))
    seen: List[Any] = []
    own = model.get_image_features

    def observed(*args: Any) -> Any:
        seen.append(own(*args))
        return seen[-1]

    model.get_image_features = observed
    image_trainer = one_step_trainer(model, processor, row, tmp_path / "image")
    image_trainer.train()
    del model.get_image_features
    loss = [entry["loss"] for entry in image_trainer.state.log_history if "loss" in entry][0]
    trained = dict(tree_flatten(model.trainable_parameters()))
    moved = {name for name, value in trained.items() if "lora_b" in name and bool((value != untrained[name]).any())}
    # The embedder's LoRA learns only from a gradient that flows through the image features.
    assert any(name.startswith("embed_vision.") for name in moved), sorted(moved)
    assert any(name.startswith("language_model.") for name in moved), sorted(moved)
    assert seen and seen[-1].shape == (1, 256, model.config.text_config.hidden_size)
    assert bool(mx.isfinite(seen[-1]).all())
    # The loss by hand with the weights the step started from, on the features the tower gave the trainer.
    model.update(tree_unflatten(list(untrained.items())))
    with_image = _hand_written_loss(model, processor, [row], cached_image_features=seen[-1])
    # Without pixels, mlx-vlm fills the image tokens with their own embeddings.
    without_image = _hand_written_loss(model, processor, [row], pixel_values=None)
    assert np.isfinite(loss) and abs(loss - with_image) < 1e-4, (loss, with_image, without_image)
    assert abs(with_image - without_image) > 1e-2, (with_image, without_image)
