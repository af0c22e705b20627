"""Vision fine-tuning on MLX: tiny Qwen 2.5 VL and Gemma 3 models built from mlx-vlm's own classes, coloured squares
made here, trained for real through `SFTTrainer` with `UnslothVisionDataCollator`, then asked what they see."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from .conftest import REPO_ROOT, run_python

FAMILIES = ("qwen2_5_vl", "gemma3")
COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30)}
SIDES = {"qwen2_5_vl": 56, "gemma3": 32, "muse_glimmer": 56}
QUESTION = "What colour is this square?"
END_OF_TURN = {"qwen2_5_vl": "<|im_end|>", "gemma3": "<end_of_turn>"}


def square(family: str, colour: str) -> Any:
    from PIL import Image

    return Image.new("RGB", (SIDES[family], SIDES[family]), COLOURS[colour])


def conversation(family: str, colour: str) -> Dict[str, Any]:
    return {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": QUESTION}, {"type": "image", "image": square(family, colour)}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]},
        ]
    }


def rows(family: str, repeats: int = 4) -> List[Dict[str, Any]]:
    return [conversation(family, colour) for colour in COLOURS] * repeats


@pytest.fixture(scope="session")
def vision_dirs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    from tools.kits.tiny_vlm_model import BUILDERS

    root = tmp_path_factory.mktemp("tiny-vlm")
    return {family: BUILDERS[family](root / family) for family in FAMILIES}


def load(vision_dirs: Dict[str, Path], family: str, lora: bool = True, **kwargs: Any) -> tuple:
    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(vision_dirs[family]), **kwargs)
    if lora:
        model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, random_state=3407)
    return model, processor


def vision_config(tmp_path: Path, **overrides: Any) -> Any:
    from trl import SFTConfig

    values: Dict[str, Any] = {
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "warmup_steps": 0,
        "max_steps": 40,
        "learning_rate": 5e-3,
        "logging_steps": 1,
        "seed": 3407,
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "save_strategy": "no",
        "remove_unused_columns": False,
        "dataset_text_field": "",
        "dataset_kwargs": {"skip_prepare_dataset": True},
        "max_length": 256,
    }
    values.update(overrides)
    return SFTConfig(**values)


def vision_trainer(model: Any, processor: Any, family: str, tmp_path: Path, **overrides: Any) -> Any:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    return SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows(family),
        args=vision_config(tmp_path, **overrides),
    )


def answer(model: Any, processor: Any, family: str, colour: str) -> str:
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(square(family, colour), text, add_special_tokens=False, return_tensors="pt").to("cuda")
    output = model.generate(**inputs, max_new_tokens=8, use_cache=True)
    return processor.decode(output[0, inputs["input_ids"].shape[1] :].tolist(), skip_special_tokens=True)


@pytest.fixture(scope="module", params=FAMILIES)
def trained(request: pytest.FixtureRequest, vision_dirs: Dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """One model per family trained for 40 steps on the four squares: (family, model, processor, trainer)."""
    from unsloth import FastVisionModel

    family = request.param
    model, processor = load(vision_dirs, family)
    FastVisionModel.for_training(model)
    # The MLX trainer's own shuffle, as these 40 steps were measured with (the unset order is now CUDA Unsloth's).
    folder = tmp_path_factory.mktemp(f"train-{family}")
    trainer = vision_trainer(model, processor, family, folder, dataset_order="default")
    trainer.train()
    FastVisionModel.for_inference(model)
    return family, model, processor, trainer


def batch_logits(model: Any, processor: Any, family: str, colour: str, image: str | None = None) -> np.ndarray:
    """Logits of the whole conversation about `colour`, shown the square of `image` (its own colour by default)."""
    import mlx.core as mx

    from unsloth.mlx.vision.backend import causal_logits, process_conversation

    text = processor.apply_chat_template(conversation(family, colour)["messages"], tokenize=False)
    features = process_conversation(processor, text, [square(family, image or colour)])
    ids = mx.array([features.pop("input_ids")])
    pixels = mx.array(features.pop("pixel_values"))
    return np.array(causal_logits(model, ids, pixels, {name: mx.array(value) for name, value in features.items()}))


# ---- the collator's rows ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_mask_covers_exactly_the_answer(vision_dirs, family) -> None:
    from unsloth.trainer import UnslothVisionDataCollator
    from unsloth.mlx.vision.backend import image_token_id

    model, processor = load(vision_dirs, family, lora=False)
    row = UnslothVisionDataCollator(model, processor).encode(conversation(family, "green"))
    trained_text = processor.decode(row.ids[row.mask].tolist())
    assert trained_text == f"It is green.{END_OF_TURN[family]}\n"
    image_positions = row.ids == image_token_id(processor, model)
    assert image_positions.sum() == 4 and not (row.mask & image_positions).any()
    assert row.features["pixel_values"].shape[0] >= 1
    everything = UnslothVisionDataCollator(model, processor, completion_only_loss=False).encode(
        conversation(family, "green")
    )
    assert (everything.mask == ~image_positions).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_answer_of_a_longer_conversation_trains(vision_dirs, family) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, family, lora=False)
    messages = conversation(family, "red")["messages"] + [
        {
            "role": "user",
            "content": [{"type": "text", "text": "And now?"}, {"type": "image", "image": square(family, "blue")}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Now it is blue."}]},
    ]
    row = UnslothVisionDataCollator(model, processor).encode({"messages": messages})
    end = END_OF_TURN[family]
    assert processor.decode(row.ids[row.mask].tolist()) == f"It is red.{end}\nNow it is blue.{end}\n"
    assert row.features["pixel_values"].shape[0] == (2 if family == "gemma3" else 32)


def test_the_collator_batch_is_what_hugging_face_collators_return(vision_dirs) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl", lora=False)
    batch = UnslothVisionDataCollator(model, processor)(rows("qwen2_5_vl", 1)[:2])
    assert set(batch) == {"input_ids", "attention_mask", "labels", "pixel_values", "image_grid_thw"}
    assert batch["input_ids"].shape == batch["labels"].shape and batch["image_grid_thw"].shape == (2, 3)
    kept = batch["labels"][0][batch["labels"][0] != -100]
    assert processor.decode(kept.tolist()) == "It is red.<|im_end|>\n"


def test_images_from_the_rows_images_column_and_a_local_file(vision_dirs, tmp_path) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl", lora=False)
    path = tmp_path / "red.png"
    square("qwen2_5_vl", "red").save(path)
    collator = UnslothVisionDataCollator(model, processor)
    in_part = collator.encode(conversation("qwen2_5_vl", "red"))
    from_file = conversation("qwen2_5_vl", "red")
    from_file["messages"][0]["content"][1] = {"type": "image", "image": str(path)}
    from_column = conversation("qwen2_5_vl", "red")
    from_column["messages"][0]["content"][1] = {"type": "image"}
    from_column["images"] = [square("qwen2_5_vl", "red")]
    for other in (collator.encode(from_file), collator.encode(from_column)):
        assert (other.ids == in_part.ids).all()
        assert np.array_equal(other.features["pixel_values"], in_part.features["pixel_values"])


def test_formatting_func_makes_the_messages_and_the_trainer_reads_the_collator(vision_dirs, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    raw = [{"image": square("qwen2_5_vl", colour), "colour": colour} for colour in COLOURS]

    def to_messages(row: Dict[str, Any]) -> List[Dict[str, Any]]:
        return conversation("qwen2_5_vl", row["colour"])["messages"]

    collator = UnslothVisionDataCollator(model, processor, formatting_func=to_messages, max_seq_length=40)
    trainer = SFTTrainer(
        model=model, tokenizer=processor, data_collator=collator, train_dataset=raw, args=vision_config(tmp_path)
    )
    direct = UnslothVisionDataCollator(model, processor).encode(conversation("qwen2_5_vl", "blue"))
    # The collator's max_seq_length wins: the 42-token row loses its last two tokens, never the image.
    assert len(direct.ids) == 42
    assert (trainer.train_rows.source_rows[2] == direct.ids[:40]).all()
    assert (trainer.train_rows.masks[2] == direct.mask[:40]).all()
    assert trainer.data_collator is collator and collator.max_seq_length == 40


@pytest.mark.parametrize(
    "option, value",
    [("num_proc", 2), ("force_match", False), ("resize_dimension", 1), ("last_response_only", True)],
)
def test_collator_options_mlx_cannot_honour_are_refused(vision_dirs, option, value) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl", lora=False)
    with pytest.raises(NotImplementedError, match=f"cannot honour {option}={value!r}"):
        UnslothVisionDataCollator(model, processor, **{option: value})
    with pytest.raises(TypeError, match="unexpected keyword argument.*no_such_option"):
        UnslothVisionDataCollator(model, processor, no_such_option=1)
    assert UnslothVisionDataCollator(model, processor, num_proc=None, train_on_responses_only=False)


def test_bad_rows_get_one_clear_message(vision_dirs, tmp_path) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl", lora=False)
    collator = UnslothVisionDataCollator(model, processor, max_seq_length=12)
    with pytest.raises(ValueError, match="longer than max_seq_length=12, and cutting it would cut the image"):
        collator.encode(conversation("qwen2_5_vl", "red"))
    question_only = {"messages": conversation("qwen2_5_vl", "red")["messages"][:1]}
    with pytest.raises(ValueError, match="no assistant answer to train on"):
        UnslothVisionDataCollator(model, processor).encode(question_only)
    with pytest.raises(ValueError, match="needs each row to be"):
        UnslothVisionDataCollator(model, processor).encode({"text": "no messages"})
    lost = conversation("qwen2_5_vl", "red")
    lost["messages"][0]["content"][1] = {"type": "image", "image": str(tmp_path / "missing.png")}
    with pytest.raises(ValueError, match="give a PIL image or a local file"):
        UnslothVisionDataCollator(model, processor).encode(lost)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("audio", "qwen2_5_vl checkpoint has no audio tower"), ("video", "video part.*images and audio only")],
)
def test_an_audio_or_video_part_is_refused_by_name_not_dropped(vision_dirs, kind, reason) -> None:
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl", lora=False)
    row = conversation("qwen2_5_vl", "red")
    row["messages"][0]["content"].append({"type": kind, kind: np.zeros(160, dtype=np.float32)})
    with pytest.raises(NotImplementedError, match=reason):
        UnslothVisionDataCollator(model, processor).encode(row)


# ---- the trainer ------------------------------------------------------------------------------------------------


def test_training_lowers_the_loss_and_reads_the_images(trained) -> None:
    family, model, processor, trainer = trained
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5]) / 3, losses
    # Four colours, one question: only a model that sees the image can answer each one right.
    assert {colour: answer(model, processor, family, colour) for colour in COLOURS} == {
        colour: f"It is {colour}." for colour in COLOURS
    }


def test_the_right_image_makes_the_answer_likelier(trained) -> None:
    """A lost or swapped image would leave the colour word no likelier with its own square than with another's."""
    family, model, processor, _ = trained
    from unsloth.trainer import UnslothVisionDataCollator

    collator = UnslothVisionDataCollator(model, processor)
    for colour, other in (("red", "blue"), ("green", "yellow")):
        ids = collator.encode(conversation(family, colour)).ids
        other_ids = collator.encode(conversation(family, other)).ids
        # The first token where the two answers differ is the colour word; the position before predicts it.
        position = int(np.flatnonzero(ids[: len(other_ids)] != other_ids[: len(ids)])[0]) - 1
        own = batch_logits(model, processor, family, colour)[0, position]
        swapped = batch_logits(model, processor, family, colour, image=other)[0, position]
        target = int(ids[position + 1])
        own_margin = own[target] - np.log(np.exp(own - own.max()).sum()) - own.max()
        swapped_margin = swapped[target] - np.log(np.exp(swapped - swapped.max()).sum()) - swapped.max()
        assert own_margin > swapped_margin + 1.0, (colour, own_margin, swapped_margin)


def test_hugging_face_callbacks_see_the_vision_training(vision_dirs, recorder, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows("qwen2_5_vl", 1),
        args=vision_config(tmp_path, max_steps=2),
        callbacks=[recorder],
    )
    trainer.train()
    names = recorder.names()
    assert names[0] == "on_train_begin" and names[-1] == "on_train_end" and names.count("on_step_end") == 2


def test_processing_class_and_processor_are_the_processor(vision_dirs, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    _, other = load(vision_dirs, "qwen2_5_vl", lora=False)
    collator = UnslothVisionDataCollator(model, processor)
    common = {"model": model, "data_collator": collator, "train_dataset": rows("qwen2_5_vl", 1)}
    given = SFTTrainer(processing_class=processor, args=vision_config(tmp_path), **common)
    assert given.processor is processor and given.processing_class is processor
    explicit = SFTTrainer(processing_class=other, args=vision_config(tmp_path), **common)
    assert explicit.processor is other and explicit.processing_class is other
    from_collator = SFTTrainer(args=vision_config(tmp_path), **common)
    assert from_collator.processor is processor and from_collator.tokenizer is processor.tokenizer


def test_completion_only_loss_in_the_config_steers_the_collator(vision_dirs, tmp_path) -> None:
    model, processor = load(vision_dirs, "qwen2_5_vl")
    answers_only = vision_trainer(model, processor, "qwen2_5_vl", tmp_path, completion_only_loss=True)
    everything = vision_trainer(model, processor, "qwen2_5_vl", tmp_path, completion_only_loss=False)
    assert answers_only.train_rows.masks[0].sum() < everything.train_rows.masks[0].sum()


def test_an_eval_dataset_is_refused_by_name(vision_dirs, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "qwen2_5_vl")
    with pytest.raises(NotImplementedError, match="without an eval_dataset"):
        SFTTrainer(
            model=model,
            tokenizer=processor,
            data_collator=UnslothVisionDataCollator(model, processor),
            train_dataset=rows("qwen2_5_vl", 1),
            eval_dataset=rows("qwen2_5_vl", 1),
            args=vision_config(tmp_path),
        )


class RecordingStreamer:
    """The two calls `generate` makes on a Hugging Face streamer, written down."""

    def __init__(self) -> None:
        self.pieces: List[List[int]] = []
        self.ended = False

    def put(self, ids: Any) -> None:
        self.pieces.append(np.asarray(ids).reshape(-1).tolist())

    def end(self) -> None:
        self.ended = True


# ---- the model --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_switches_choose_the_layers(vision_dirs, family) -> None:
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.lora import vision_lora_settings

    def paths(**switches: bool) -> tuple:
        model, _ = load(vision_dirs, family, lora=False)
        FastVisionModel.get_peft_model(model, r=4, lora_alpha=8, **switches)
        return vision_lora_settings(model).paths

    everything = paths()
    vision_only = paths(finetune_language_layers=False)
    language_only = paths(finetune_vision_layers=False)
    attention_only = paths(finetune_mlp_modules=False)
    mlp_only = paths(finetune_attention_modules=False)
    assert vision_only and all(path.startswith("vision_tower.") for path in vision_only)
    assert language_only and all(path.startswith("language_model.") for path in language_only)
    assert sorted(vision_only + language_only) == sorted(everything)
    assert attention_only and all("attn" in path for path in attention_only)
    assert mlp_only and not any("attn" in path for path in mlp_only)
    assert sorted(attention_only + mlp_only) == sorted(everything)
    with pytest.raises(ValueError, match="leave nothing to train"):
        paths(finetune_vision_layers=False, finetune_language_layers=False)


def test_print_trainable_parameters_counts_the_lora_against_every_weight(vision_dirs, capsys) -> None:
    from mlx.utils import tree_flatten

    model, _ = load(vision_dirs, "qwen2_5_vl")
    model.print_trainable_parameters()
    arrays = dict(tree_flatten(model.parameters()))
    lora = sum(array.size for name, array in arrays.items() if ".lora_" in name)
    printed = re.fullmatch(
        r"trainable params: ([\d,]+) \|\| all params: ([\d,]+) \|\| trainable%: [\d.]+\n", capsys.readouterr().out
    )
    assert printed, "PEFT's one line"
    trainable, total = (int(group.replace(",", "")) for group in printed.groups())
    # Every weight counts, LoRA's included (and arrays a module keeps outside its parameters, as rope frequencies).
    assert trainable == lora > 0 and total >= sum(array.size for array in arrays.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_the_forward_pass_is_causal(vision_dirs, family) -> None:
    """Training must not see later tokens: changing the answer leaves the logits before it as they were."""
    import mlx.core as mx

    from unsloth.mlx.vision.backend import causal_logits, process_conversation

    model, processor = load(vision_dirs, family, lora=False)
    outputs = []
    for colour in ("red", "blue"):
        messages = conversation(family, "red")["messages"]
        messages[1] = {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]}
        features = process_conversation(
            processor, processor.apply_chat_template(messages, tokenize=False), [square(family, "red")]
        )
        ids = features.pop("input_ids")
        pixels = mx.array(features.pop("pixel_values"))
        extras = {name: mx.array(value) for name, value in features.items()}
        outputs.append((ids, np.array(causal_logits(model, mx.array([ids]), pixels, extras))[0]))
    (first_ids, first), (second_ids, second) = outputs
    same = next(index for index, (a, b) in enumerate(zip(first_ids, second_ids)) if a != b)
    assert np.abs(first[:same] - second[:same]).max() < 1e-4
    assert np.abs(first[same:] - second[same : len(first)]).max() > 1e-3


def test_generation_is_the_training_forward_pass_greedily(trained) -> None:
    """Each generated token is the argmax of the same causal pass training runs (mlx-vlm's own prompt pass is not)."""
    import mlx.core as mx

    from unsloth.mlx.vision.backend import causal_logits, process_conversation

    family, model, processor, _ = trained
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    streamer = RecordingStreamer()
    inputs = processor(square(family, "blue"), text, add_special_tokens=False)
    generated = model.generate(**inputs, max_new_tokens=4, streamer=streamer)
    # As TextStreamer expects: the prompt first, then each new token alone, then end().
    prompt, *new = streamer.pieces
    assert prompt == inputs["input_ids"][0].tolist() and streamer.ended
    assert all(len(piece) == 1 for piece in new) and sum(new, []) == generated[0, len(prompt) :].tolist()
    features = process_conversation(processor, text, [square(family, "blue")])
    ids = list(features.pop("input_ids"))
    pixels = mx.array(features.pop("pixel_values"))
    extras = {name: mx.array(value) for name, value in features.items()}
    for _ in range(4):
        ids.append(int(np.argmax(np.array(causal_logits(model, mx.array([ids]), pixels, extras))[0, -1])))
    assert generated[0].tolist() == ids


def test_generate_refuses_what_it_cannot_do_and_samples_when_asked(vision_dirs) -> None:
    model, processor = load(vision_dirs, "gemma3", lora=False)
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = dict(processor(square("gemma3", "red"), text, add_special_tokens=False))
    two = np.concatenate([np.asarray(inputs["input_ids"])] * 2)
    with pytest.raises(NotImplementedError, match=r"one prompt at a time, got input_ids of shape \(2, "):
        model.generate(**{**inputs, "input_ids": two}, max_new_tokens=2)
    with pytest.raises(NotImplementedError, match="does not support repetition_penalty"):
        model.generate(**inputs, max_new_tokens=2, repetition_penalty=1.2)
    with pytest.raises(NotImplementedError, match="does not support no_such_option"):
        model.generate(**inputs, max_new_tokens=2, no_such_option="x")
    greedy = {tuple(model.generate(**inputs, max_new_tokens=6)[0].tolist()) for _ in range(3)}
    import mlx.core as mx

    mx.random.seed(0)
    sampled = {tuple(model.generate(**inputs, max_new_tokens=6, do_sample=True)[0].tolist()) for _ in range(3)}
    assert len(greedy) == 1 and len(sampled) > 1


def test_adapter_and_merged_model_reload_with_the_same_logits(trained, tmp_path) -> None:
    from unsloth import FastVisionModel

    family, model, processor, _ = trained
    expected = batch_logits(model, processor, family, "yellow")
    model.save_pretrained(str(tmp_path / "lora_model"))
    processor.save_pretrained(str(tmp_path / "lora_model"))
    assert {"adapters.safetensors", "adapter_config.json"} <= {
        path.name for path in (tmp_path / "lora_model").iterdir()
    }
    reloaded, reloaded_processor = FastVisionModel.from_pretrained(str(tmp_path / "lora_model"))
    FastVisionModel.for_inference(reloaded)
    assert np.abs(batch_logits(reloaded, reloaded_processor, family, "yellow") - expected).max() < 1e-4
    model.save_pretrained_merged(str(tmp_path / "merged"), processor, save_method="merged_16bit")
    merged, merged_processor = FastVisionModel.from_pretrained(str(tmp_path / "merged"))
    FastVisionModel.for_inference(merged)
    assert np.abs(batch_logits(merged, merged_processor, family, "yellow") - expected).max() < 1e-3
    assert answer(merged, merged_processor, family, "yellow") == "It is yellow."
    with pytest.raises(NotImplementedError, match="mxfp4"):
        model.save_pretrained_merged(str(tmp_path / "mx"), processor, save_method="mxfp4")


def test_checkpoints_and_the_output_folder_reload_as_vision_adapters(vision_dirs, tmp_path) -> None:
    from unsloth import FastVisionModel

    model, processor = load(vision_dirs, "gemma3")
    trainer = vision_trainer(model, processor, "gemma3", tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    trainer.train()
    FastVisionModel.for_inference(model)
    expected = batch_logits(model, processor, "gemma3", "red")
    for folder in (tmp_path / "out" / "checkpoint-2", tmp_path / "out"):
        assert json.loads((folder / "adapter_config.json").read_text())["unsloth_vision"] is True
        reloaded, reloaded_processor = FastVisionModel.from_pretrained(str(folder))
        FastVisionModel.for_inference(reloaded)
        assert np.abs(batch_logits(reloaded, reloaded_processor, "gemma3", "red") - expected).max() < 1e-4


def test_load_in_4bit_quantizes_the_language_model_and_trains(vision_dirs, tmp_path) -> None:
    import mlx.nn as nn

    model, processor = load(vision_dirs, "qwen2_5_vl", load_in_4bit=True)
    q_proj = model.language_model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.linear, nn.QuantizedLinear)
    assert not any(isinstance(module, nn.QuantizedLinear) for _, module in model.vision_tower.named_modules())
    trainer = vision_trainer(model, processor, "qwen2_5_vl", tmp_path, max_steps=6)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < losses[0], losses


# ---- as a notebook runs it --------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_vision_notebook_script_runs_from_a_hub_id(family, tmp_path) -> None:
    script = REPO_ROOT / "examples" / "mlx_vision_notebook.py"
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{str(script)!r}, '--family', {family!r}, '--output-dir', {str(tmp_path / 'out')!r},"
        " '--max-steps', '40']\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    found = run_python(code, timeout=600)
    losses = found["losses"]
    assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5]) / 3, losses
    assert found["answers"] == {colour: f"It is {colour}." for colour in COLOURS}
    assert found["reloaded_red"] == "It is red."


def test_without_mlx_vlm_the_message_says_what_to_install(vision_dirs) -> None:
    code = (
        "import importlib.abc, json, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mlx_vlm' or name.startswith('mlx_vlm.'):\n"
        "            raise ImportError('No module named ' + repr(name))\n"
        "sys.meta_path.insert(0, Block())\n"
        "from unsloth import FastVisionModel\n"
        "try:\n"
        f"    FastVisionModel.from_pretrained({str(vision_dirs['qwen2_5_vl'])!r})\n"
        "except ImportError as error:\n"
        "    print(json.dumps({'error': str(error)}))\n"
    )
    found = run_python(code)
    assert (
        found["error"]
        == 'vision models on MLX need mlx_vlm: pip install "unsloth[mlx-vision]" (mlx-vlm==0.7.10 and Pillow)'
    )


def test_mlx_vlm_is_the_tested_release() -> None:
    from unsloth.mlx.vision.backend import TESTED_VERSION, installed_version

    assert installed_version() == TESTED_VERSION, "mlx-vlm moved: rerun tests/mlx_api/test_vision.py and re-pin"


def test_a_family_without_a_wired_forward_pass_is_refused_before_training() -> None:
    from types import SimpleNamespace

    from unsloth.mlx.vision.backend import check_family

    with pytest.raises(
        NotImplementedError, match="does not train 'llava' \\(mlx-vlm 0.7.10 can load it\\): its training"
    ):
        check_family(SimpleNamespace(config=SimpleNamespace(model_type="llava")))
