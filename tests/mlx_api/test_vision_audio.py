"""Gemma 4 trains on audio as its audio notebooks do (conversation parts `{"type": "audio", "audio": waveform}`,
`UnslothVisionDataCollator`, `SFTTrainer`): checked on a tiny Gemma 4 with an audio tower, whose first loss is
mlx-vlm's own model call and whose reloaded adapter answers an audio prompt; a model without an audio tower, and a
row with more clips than one call keeps, are refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

# Gemma 4's processor builds its audio feature extractor with 128 mel filters over a 512-point FFT, as the real
# checkpoints do, and transformers warns that some filters are empty.
pytestmark = pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")

SYSTEM = {"role": "system", "content": [{"type": "text", "text": "You are an assistant that transcribes speech."}]}
# Each answer's tone, and a length in samples at 16 kHz that is not a whole number of audio tokens (40 ms each).
TONES = {"red": (220.0, 7000), "green": (440.0, 9000), "blue": (880.0, 5500), "yellow": (1760.0, 8200)}


def waveform(colour: str) -> List[float]:
    """A tone as datasets stores a decoded clip after `map`: a list of floats."""
    frequency, samples = TONES[colour]
    return (0.3 * np.sin(2 * np.pi * frequency * np.arange(samples) / 16000)).astype(np.float32).tolist()


def user_turn(colour: str, as_array: bool = False) -> Dict[str, Any]:
    """The notebook's user turn; its inference cells hold the clip as the numpy array datasets decodes."""
    clip = np.asarray(waveform(colour), dtype=np.float32) if as_array else waveform(colour)
    return {"role": "user", "content": [{"type": "audio", "audio": clip}, {"type": "text", "text": "Hear?"}]}


def conversation(colour: str) -> Dict[str, Any]:
    answer = {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]}
    return {"messages": [SYSTEM, user_turn(colour), answer]}


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import build_tiny_gemma4

    return build_tiny_gemma4(tmp_path_factory.mktemp("tiny-gemma4-audio"), audio=True)


def _hand_written_loss(model: Any, processor: Any, rows: list) -> float:
    """Mean next-token loss of the answers, each row alone through mlx-vlm's own Gemma 4 call with its audio."""
    import mlx.core as mx

    from unsloth.trainer import UnslothVisionDataCollator

    collator = UnslothVisionDataCollator(model, processor)
    total, count = 0.0, 0
    for row in rows:
        encoded = collator.encode(row)
        assert "input_features" in encoded.features, sorted(encoded.features)
        features = {name: mx.array(value) for name, value in encoded.features.items()}
        logits = model(mx.array(encoded.ids[None, :]), None, mask=None, **features).logits
        logits = np.array(logits[0].astype(mx.float32), dtype=np.float64)[:-1]
        targets = encoded.ids[1:]
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = -log_probs[np.arange(len(targets)), targets]
        total += float(picked[encoded.mask[1:]].sum())
        count += int(encoded.mask[1:].sum())
    return total / count


def test_audio_rows_train_with_mlx_vlms_own_loss_and_the_reloaded_adapter_answers_audio(audio_dir, tmp_path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from trl import SFTConfig, SFTTrainer

    from unsloth import FastModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(audio_dir), max_seq_length=512, load_in_4bit=False)
    # The 12B notebook's switches: LoRA on the language model and the audio tower.
    model = FastModel.get_peft_model(
        model, finetune_vision_layers=False, finetune_audio_layers=True, r=8, lora_alpha=16, random_state=3407
    )
    rows = [conversation(colour) for colour in TONES]
    expected = _hand_written_loss(model, processor, rows)
    trainer = SFTTrainer(
        model=model,
        train_dataset=rows,
        processing_class=processor.tokenizer,
        data_collator=UnslothVisionDataCollator(model, processor),
        args=SFTConfig(
            # Every clip in one batch, which runs as one call per clip.
            per_device_train_batch_size=len(rows),
            max_steps=8,
            learning_rate=5e-3,
            warmup_steps=0,
            logging_steps=1,
            seed=3407,
            output_dir=str(tmp_path / "out"),
            report_to="none",
            save_strategy="no",
            remove_unused_columns=False,
            dataset_text_field="",
            dataset_kwargs={"skip_prepare_dataset": True},
            max_length=512,
        ),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    # The first step's loss is computed before any update, on every row at once (right-padded).
    assert abs(losses[0] - expected) < 1e-5, (losses[0], expected)
    assert losses[-1] < losses[0] * 0.8, losses
    tower = {name: value for name, value in tree_flatten(model.trainable_parameters()) if name.startswith("audio_")}
    assert tower and any(float(mx.abs(value).max()) > 0 for name, value in tower.items() if "lora_b" in name)
    model.save_pretrained(str(tmp_path / "adapter"))
    processor.save_pretrained(str(tmp_path / "adapter"))
    reloaded, processor = FastModel.from_pretrained(str(tmp_path / "adapter"))
    # The notebook's inference cell: the processor renders and encodes the audio prompt itself.
    inputs = processor.apply_chat_template(
        [SYSTEM, user_turn("red", as_array=True)],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    ).to("cuda")
    assert "input_features" in inputs
    output = reloaded.generate(**inputs, max_new_tokens=6, do_sample=False)
    prompt_length = inputs["input_ids"].shape[1]
    assert output.shape[1] > prompt_length
    assert processor.decode(output[0, prompt_length:].tolist(), skip_special_tokens=True).strip()


def test_a_gemma4_without_an_audio_tower_refuses_audio_parts_by_name(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import build_tiny_gemma4

    from unsloth import FastModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(build_tiny_gemma4(tmp_path / "no-audio")))
    with pytest.raises(
        NotImplementedError, match="gemma4 checkpoint has no audio tower .its config has no audio_config"
    ):
        UnslothVisionDataCollator(model, processor).encode(conversation("red"))


def test_a_row_with_two_clips_is_refused_by_name_as_one_call_keeps_one(audio_dir) -> None:
    from unsloth import FastModel
    from unsloth.mlx.vision.backend import tower_call_groups
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(audio_dir))
    row = conversation("red")
    row["messages"][1]["content"].append({"type": "audio", "audio": waveform("blue")})
    features = UnslothVisionDataCollator(model, processor).encode(row).features
    with pytest.raises(NotImplementedError, match="at most 1 audio clips per row .a row of this batch has 2.*padding"):
        tower_call_groups(model, [features])
    # One clip per row: a call per clip, and a row without audio joins the call before it.
    single = {"input_features": features["input_features"][:1]}
    assert tower_call_groups(model, [single, single, {}, single]) == [[0], [1, 2], [3]]


# The E2B and E4B notebooks' target_modules: the language model's names and the audio tower's own.
NOTEBOOK_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "post"]
NOTEBOOK_TARGETS += ["linear_start", "linear_end", "embedding_projection", "ffw_layer_1", "ffw_layer_2", "output_proj"]


def _adapted(model: Any) -> List[str]:
    from mlx_lm.tuner.lora import LoRALinear

    return [path for path, module in model.named_modules() if isinstance(module, LoRALinear)]


def test_lora_reaches_the_audio_tower_as_the_audio_notebooks_ask(audio_dir) -> None:
    from unsloth import FastModel

    model, _ = FastModel.from_pretrained(str(audio_dir))
    FastModel.get_peft_model(model, finetune_vision_layers=False, target_modules=NOTEBOOK_TARGETS, r=4)
    adapted = _adapted(model)
    audio = {path.rsplit(".", 2)[-2] if path.endswith(".linear") else path.rsplit(".", 1)[-1] for path in adapted}
    assert {"post", "linear_start", "linear_end", "ffw_layer_1", "ffw_layer_2", "output_proj", "q_proj"} <= audio
    assert "embed_audio.embedding_projection" in adapted and not any(path.startswith("vision") for path in adapted)
    # The audio attention's relative position projection is held twice by mlx-vlm (once read by its weight), so a
    # LoRA around one holder would never be used: it stays as it is.
    assert not any("relative_k_proj" in path or "pos_proj" in path for path in adapted)
    model, _ = FastModel.from_pretrained(str(audio_dir))
    FastModel.get_peft_model(model, finetune_vision_layers=False, r=4)
    assert not any(path.startswith(("audio_tower", "embed_audio")) for path in _adapted(model)), "audio is opt-in"


def test_bad_audio_parts_get_one_clear_message(audio_dir) -> None:
    from unsloth import FastModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastModel.from_pretrained(str(audio_dir))
    with pytest.raises(ValueError, match="cutting it would cut the audio; raise max_seq_length or make the audio"):
        UnslothVisionDataCollator(model, processor, max_seq_length=12).encode(conversation("red"))
    resampled = conversation("red")
    resampled["messages"][1]["content"][0]["audio"] = {"array": waveform("red"), "sampling_rate": 44100}
    with pytest.raises(ValueError, match="sampled at 44100 Hz, but the processor reads 16000 Hz"):
        UnslothVisionDataCollator(model, processor).encode(resampled)
    a_file = conversation("red")
    a_file["messages"][1]["content"][0]["audio"] = "speech.mp3"
    with pytest.raises(ValueError, match="give its samples as a 1-D array at 16000 Hz"):
        UnslothVisionDataCollator(model, processor).encode(a_file)
    # A clip as `datasets.map` stores it (a list of floats) reaches generate's inputs too, without mlx-audio.
    inputs = processor.apply_chat_template([SYSTEM, user_turn("red")], tokenize=True, return_dict=True)
    assert inputs["input_features"].shape[-1] == 128
    video = conversation("red")
    video["messages"][1]["content"].append({"type": "video", "video": "clip.mp4"})
    with pytest.raises(NotImplementedError, match="video part: it trains on images and audio only"):
        UnslothVisionDataCollator(model, processor).encode(video)


def test_response_markers_train_only_the_answer_of_an_audio_row(audio_dir) -> None:
    """`train_on_responses_only` with the chat template's markers counts the answer's tokens only, with the audio
    placeholders before it expanded as the processor expands them."""
    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastVisionModel.from_pretrained(str(audio_dir))
    collator = UnslothVisionDataCollator(
        model, processor, train_on_responses_only=True, instruction_part="<|turn>user\n", response_part="<|turn>model\n"
    )
    encoded = collator.encode(conversation("green"))
    answer = processor.tokenizer.decode(encoded.ids[encoded.mask].tolist())
    assert answer.startswith("It is green.") and "Hear?" not in answer, answer
