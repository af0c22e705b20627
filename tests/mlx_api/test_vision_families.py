"""Every vision family mlx-vlm ships either trains (checked on a tiny model of its own mlx-vlm architecture: the
trainer's loss equals a hand-written forward through mlx-vlm's model call, training lowers it, and the reloaded
adapter answers) or is refused by name with its reason; and LoRA never breaks a vision model's generate."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import numpy as np
import pytest

from unsloth.mlx.vision.backend import (
    IMAGES_REFUSED,
    REFUSED,
    TOWER_CALL_LIMITS,
    trainable_families,
    vision_families,
)

# Gemma 4's processor builds its audio feature extractor with 128 mel filters over a 512-point FFT, as the real
# checkpoints do, and transformers warns that some filters are empty.
pytestmark = pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")

# Families checked in a module of their own, as their tower is full size whatever the config says: a tiny model
# of theirs still takes minutes per image forward on two CPU cores, too slow for the eight steps below.
OWN_MODULES = {"gemma3n": "test_vision_gemma3n.py", "deepseekocr": "test_vision_deepseekocr.py"}
IMAGE_FAMILIES = [
    family for family in trainable_families() if family not in IMAGES_REFUSED and family not in OWN_MODULES
]
COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30)}
QUESTION = "What colour is this square?"


def square(family: str, colour: str) -> Any:
    from PIL import Image

    from tools.kits.tiny_vlm_model import IMAGE_SIDES

    return Image.new("RGB", (IMAGE_SIDES[family], IMAGE_SIDES[family]), COLOURS[colour])


def conversation(family: str, colour: str, images: int = 1) -> Dict[str, Any]:
    squares = [{"type": "image", "image": square(family, colour)} for _ in range(images)]
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": QUESTION}, *squares]},
            {"role": "assistant", "content": [{"type": "text", "text": f"It is {colour}."}]},
        ]
    }


def prompt_inputs(processor: Any, image: Any, text: str) -> Dict[str, Any]:
    """The processor's arrays for one prompt and image, called by keyword: processors differ in positional order
    (mlx-vlm's PaddleOCR-VL takes the text first)."""
    from unsloth.mlx.vision.backend import process_conversation

    inputs = process_conversation(processor, text, [image])
    inputs["input_ids"] = np.asarray([inputs["input_ids"]])
    return inputs


@pytest.mark.parametrize("family", vision_families())
def test_each_mlx_vlm_vision_family_trains_here_or_is_refused_by_name(family) -> None:
    from tools.kits.tiny_vlm_model import BUILDERS

    from unsloth.mlx.vision.backend import check_family

    model = SimpleNamespace(config=SimpleNamespace(model_type=family))
    if family in REFUSED:
        with pytest.raises(NotImplementedError, match=f"does not train '{family}' .*: {re.escape(REFUSED[family])}"):
            check_family(model)
        return
    if family in OWN_MODULES:
        assert (Path(__file__).parent / OWN_MODULES[family]).is_file()
        assert check_family(model) == family
        return
    assert family in BUILDERS, (
        f"mlx-vlm has the vision family {family!r}: build it tiny in tools/kits/tiny_vlm_model.py so "
        "test_the_trainers_loss_is_mlx_vlms_own_forward checks it, or refuse it by name in vision/backend.py REFUSED"
    )
    assert check_family(model) == family


def test_the_trainable_families_are_derived_from_mlx_vlm() -> None:
    families = trainable_families()
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3"} <= set(families)
    assert set(families) <= set(vision_families()) and not set(families) & set(REFUSED)
    # A text-only family of mlx-vlm is not a vision family.
    assert "qwen3" not in vision_families() and "llama" not in vision_families()


def test_gemma3n_is_checked_in_its_own_module_as_mlx_vlm_builds_its_tower_at_full_size_whatever_the_config() -> None:
    """Built lazily, so nothing is computed: when mlx-vlm sizes its MobileNet-V5 tower by the config, this fails and
    Gemma 3n can join BUILDERS and the checks here."""
    from mlx.utils import tree_flatten
    from mlx_vlm.models.gemma3n.config import VisionConfig
    from mlx_vlm.models.gemma3n.vision import VisionModel

    def parameters(config: VisionConfig) -> int:
        return sum(weight.size for _, weight in tree_flatten(VisionModel(config).parameters()))

    tiny = VisionConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1, image_size=32)
    assert parameters(tiny) == parameters(VisionConfig()) == 294_126_912
    assert "gemma3n" in OWN_MODULES and "gemma3n" not in IMAGES_REFUSED


@pytest.mark.parametrize(
    "family, encoders", [("deepseekocr", ("95,569,152",)), ("deepseekocr_2", ("94,979,328", "358,256,512"))]
)
def test_deepseek_ocr_encoders_are_built_at_full_size_whatever_the_config(family, encoders):
    """Built lazily from a config asking for one small vision layer, so nothing is computed: the counts are those of
    mlx-vlm's fixed SAM encoder (and DeepSeek-OCR 2's fixed Qwen2 encoder), which DeepSeek-OCR 2's refusal cites and
    DeepSeek-OCR's own module trains through."""
    import importlib

    from mlx.utils import tree_flatten

    text = {
        "model_type": "deepseek_v2", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
        "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 0, "v_head_dim": 16, "qk_nope_head_dim": 0,
    }  # fmt: skip
    vision = {"model_type": "vision", "layers": 1, "hidden_size": 1024, "intermediate_size": 64}
    module = importlib.import_module(f"mlx_vlm.models.{family}")
    config = module.ModelConfig.from_dict(
        {
            "model_type": family,
            "text_config": text,
            "vision_config": vision | ({"width": {"qwen2-0-5b": {"dim": 896}}} if family == "deepseekocr_2" else {}),
            "projector_config": {"projector_type": "linear", "input_dim": 2048, "n_embed": 64},
        }
    )
    model = module.Model(config)
    towers = [model.sam_model] + ([model.vision_model] if family == "deepseekocr_2" else [])
    counts = [f"{sum(weight.size for _, weight in tree_flatten(tower.parameters())):,}" for tower in towers]
    assert tuple(counts) == encoders
    if family in OWN_MODULES:
        assert family not in REFUSED and (Path(__file__).parent / OWN_MODULES[family]).is_file()
    else:
        assert all(f"{count} parameters" in REFUSED[family] for count in counts), REFUSED[family]


def test_a_model_type_mlx_vlm_has_no_vision_module_for_is_refused() -> None:
    from unsloth.mlx.vision.backend import check_family

    with pytest.raises(NotImplementedError, match="'not_a_family' is not one in mlx-vlm 0.7.10"):
        check_family(SimpleNamespace(config=SimpleNamespace(model_type="not_a_family")))


def _hand_written_loss(model: Any, processor: Any, family: str, rows: list) -> float:
    """Mean next-token loss of the answers, each row alone through mlx-vlm's own model call (Gemma 3: its own
    embedding and language model with the causal mask, as its call masks images both ways)."""
    import mlx.core as mx

    from unsloth.trainer import UnslothVisionDataCollator

    collator = UnslothVisionDataCollator(model, processor)
    total, count = 0.0, 0
    for row in rows:
        encoded = collator.encode(row)
        ids = mx.array(encoded.ids[None, :])
        features = {name: mx.array(value) for name, value in encoded.features.items()}
        pixels = features.pop("pixel_values")
        if family == "gemma3":
            embeds = model.get_input_embeddings(ids, pixels, mx.ones(ids.shape, dtype=mx.int32)).inputs_embeds
            logits = model.language_model(ids, inputs_embeds=embeds, mask=None).logits
        else:
            logits = model(ids, pixels, mask=None, **features).logits
        logits = np.array(logits[0].astype(mx.float32), dtype=np.float64)[:-1]
        targets = encoded.ids[1:]
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        picked = -log_probs[np.arange(len(targets)), targets]
        total += float(picked[encoded.mask[1:]].sum())
        count += int(encoded.mask[1:].sum())
    return total / count


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    from tools.kits.tiny_vlm_model import BUILDERS

    root = tmp_path_factory.mktemp("tiny-vlm-families")
    return {family: BUILDERS[family](root / family) for family in trainable_families() if family in BUILDERS}


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_the_trainers_loss_is_mlx_vlms_own_forward_and_training_answers_after_reload(
    family, family_dirs, tmp_path
) -> None:
    from trl import SFTConfig, SFTTrainer

    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, random_state=3407)
    rows = [conversation(family, colour) for colour in COLOURS]
    expected = _hand_written_loss(model, processor, family, rows)
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows,
        args=SFTConfig(
            # Every row in one batch, which a family whose tower keeps fewer rows or images right runs in parts.
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
            max_length=256,
        ),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    # The first step's loss is computed before any update, on every row at once (right-padded).
    assert abs(losses[0] - expected) < 1e-5, (losses[0], expected)
    assert losses[-1] < losses[0] * 0.8, losses
    model.save_pretrained(str(tmp_path / "adapter"), tokenizer=processor)
    reloaded, processor = FastVisionModel.from_pretrained(str(tmp_path / "adapter"))
    FastVisionModel.for_inference(reloaded)
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = prompt_inputs(processor, square(family, "red"), text)
    output = reloaded.generate(**inputs, max_new_tokens=6)
    assert output.shape[1] > inputs["input_ids"].shape[1]
    assert processor.decode(output[0, inputs["input_ids"].shape[1] :].tolist(), skip_special_tokens=True).strip()


def _sft_config(output_dir: Path, batch: int) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        per_device_train_batch_size=batch,
        max_steps=1,
        logging_steps=1,
        output_dir=str(output_dir),
        report_to="none",
        save_strategy="no",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=512,
    )


# A family with a test module of its own (OWN_MODULES) is checked there, on its full-size tower.
IMAGE_LIMITED = sorted(
    family for family, limit in TOWER_CALL_LIMITS.items() if limit.images is not None and family not in OWN_MODULES
)


@pytest.mark.parametrize("family", IMAGE_LIMITED)
def test_a_batch_with_more_images_than_one_tower_call_keeps_has_the_whole_batchs_loss(
    family, family_dirs, tmp_path
) -> None:
    from trl import SFTTrainer

    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    limit = TOWER_CALL_LIMITS[family].images
    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    # Rows of one and two images, twice the limit in all, so the batch runs as at least two calls.
    counts = [1, 2, 2, 1] if limit == 3 else [1] * (2 * limit)
    rows = [conversation(family, colour, images) for colour, images in zip(COLOURS, counts)]
    expected = _hand_written_loss(model, processor, family, rows)
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=rows,
        args=_sft_config(tmp_path / "out", len(rows)),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert abs(losses[0] - expected) < 1e-5, (losses[0], expected)


@pytest.mark.parametrize("family", IMAGE_LIMITED)
def test_a_row_with_more_images_than_one_tower_call_keeps_is_refused_by_name(family, family_dirs, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    limit = TOWER_CALL_LIMITS[family].images
    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    trainer = SFTTrainer(
        model=model,
        tokenizer=processor,
        data_collator=UnslothVisionDataCollator(model, processor),
        train_dataset=[conversation(family, "red"), conversation(family, "blue", limit + 1)],
        args=_sft_config(tmp_path / "out", 2),
    )
    with pytest.raises(
        NotImplementedError, match=f"at most {limit} images per row .a row of this batch has {limit + 1}"
    ):
        trainer.train()


def _summed_row_losses(model: Any, rows: list) -> Any:
    """The summed next-token loss of each row's masked targets, each row alone through mlx-vlm's own model call."""
    import mlx.core as mx

    total = mx.array(0.0)
    for row in rows:
        ids = mx.array(row.ids[None, :])
        features = {name: mx.array(value) for name, value in row.features.items()}
        logits = model(ids, features.pop("pixel_values"), mask=None, **features).logits[0, :-1]
        log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        picked = mx.take_along_axis(log_probs, mx.array(row.ids[1:])[:, None], axis=-1)[:, 0]
        total = total - (picked * mx.array(row.mask[1:].astype(np.float32))).sum()
    return total


# Families whose image batches run in parts (Gemma 4's audio clips do: tests/mlx_api/test_vision_audio.py).
IMAGE_BATCHES_IN_PARTS = sorted(
    family for family, limit in TOWER_CALL_LIMITS.items() if (limit.rows or limit.images) and family not in OWN_MODULES
)


@pytest.mark.parametrize("family", sorted(set(TOWER_CALL_LIMITS) & set(OWN_MODULES)))
def test_a_limited_family_with_a_module_of_its_own_checks_its_parts_and_refusal_there(family) -> None:
    text = (Path(__file__).parent / OWN_MODULES[family]).read_text()
    assert "def test_a_row_with_more_images_than_one_tower_call_keeps_is_refused_by_name" in text
    assert "def test_a_batch_run_in_parts_has_the_gradients_of_its_summed_row_losses" in text


@pytest.mark.parametrize("family", IMAGE_BATCHES_IN_PARTS)
def test_a_batch_run_in_parts_has_the_gradients_of_its_summed_row_losses(family, family_dirs) -> None:
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx.data import TokenizedRows, pad_batch

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.training import VisionTrainRows, vision_step
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, random_state=3407)
    # LoRA's B starts at zero, which would leave every A's gradient zero too.
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    collator = UnslothVisionDataCollator(model, processor)
    encoded = [collator.encode(conversation(family, colour)) for colour in COLOURS]
    rows = VisionTrainRows(
        TokenizedRows([row.ids for row in encoded]), [row.mask for row in encoded], [row.features for row in encoded]
    )
    tokens, lengths = pad_batch(rows, list(range(len(encoded))), 0)
    loss, count, grads = vision_step(model, rows)(mx.array(tokens), mx.array(lengths))
    targets = sum(int(row.mask[1:].sum()) for row in encoded)
    expected_loss, expected = nn.value_and_grad(model, lambda m: _summed_row_losses(m, encoded) / targets)(model)
    assert int(count.item()) == targets
    assert abs(loss.item() - expected_loss.item()) < 1e-5, (loss.item(), expected_loss.item())
    expected_grads = dict(tree_flatten(expected))
    got = dict(tree_flatten(grads))
    assert set(got) == set(expected_grads) and got
    worst = max(float(mx.abs(got[name] - expected_grads[name]).max().item()) for name in got)
    assert worst < 1e-6, worst
    assert max(float(mx.abs(value).max().item()) for value in got.values()) > 1e-4, "the gradients are not all zero"


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_conversation_rows_without_a_collator_get_one_for_every_family(family, family_dirs) -> None:
    from unsloth import FastVisionModel
    from unsloth.mlx.vision.training import implied_collator

    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    collator = implied_collator(model, processor, None, [conversation(family, "red")])
    assert collator is not None and collator.processor is processor


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_the_processor_saves_itself_as_the_notebooks_call_it_and_keeps_its_state(family, family_dirs, tmp_path) -> None:
    from unsloth import FastVisionModel

    _, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    state = dict(vars(processor))
    processor.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "processor_config.json").is_file() or (
        tmp_path / "saved" / "preprocessor_config.json"
    ).is_file()
    assert vars(processor).keys() == state.keys() and all(vars(processor)[name] is state[name] for name in state)


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_one_list_of_images_per_text_reads_as_the_flat_list(family, family_dirs) -> None:
    """The Muse Glimmer notebooks pass `images=[[image]]`, as Hugging Face's processors take them."""
    from unsloth import FastVisionModel

    _, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    flat = processor(text=[text], images=[square(family, "red")], return_tensors="np")
    nested = processor(text=[text], images=[[square(family, "red")]], return_tensors="np")
    assert flat.keys() == nested.keys()
    for name in flat:
        np.testing.assert_array_equal(np.asarray(nested[name]), np.asarray(flat[name]), err_msg=name)


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_a_processor_naming_its_image_or_video_token_answers_its_id(family, family_dirs) -> None:
    """The Muse Glimmer notebooks print `processor.video_token_id`, which mlx-vlm's processor leaves out."""
    from unsloth import FastVisionModel

    _, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    for name in ("image_token", "video_token"):
        token = getattr(processor, name, None)
        if isinstance(token, str):
            assert getattr(processor, f"{name}_id") == processor.tokenizer.convert_tokens_to_ids(token), name


# ---- LoRA that keeps the model working -------------------------------------------------------------------------


def _gemma4_prompt() -> Any:
    import mlx.core as mx

    from tools.kits.tiny_vlm_model import GEMMA4_TOKENS

    tokens = [2, 3, GEMMA4_TOKENS["boi"], *[GEMMA4_TOKENS["image"]] * 4, GEMMA4_TOKENS["eoi"], 5, 6]
    mx.random.seed(1)
    return mx.array([tokens]), mx.random.uniform(shape=(1, 3, 32, 32))


def test_gemma4_lora_on_every_vision_linear_leaves_the_patch_embedder_and_generates() -> None:
    from mlx_lm.tuner.lora import LoRALinear

    from tools.kits.tiny_vlm_model import tiny_gemma4_model

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.backend import generate_tokens

    model = tiny_gemma4_model()
    ids, pixels = _gemma4_prompt()
    before = list(generate_tokens(model, ids, pixels, None, {}, 4, {"temperature": 0.0}))
    FastVisionModel.get_peft_model(model, r=4, finetune_vision_layers=True, target_modules="all-linear")
    modules = dict(model.named_modules())
    vision_lora = [
        path for path, module in modules.items() if path.startswith("vision_tower") and isinstance(module, LoRALinear)
    ]
    assert vision_lora, "the vision tower's attention and MLP linears are adapted"
    embedder = [path for path in modules if path.endswith("input_proj")]
    assert embedder and not any(isinstance(modules[path], LoRALinear) for path in embedder)
    # LoRA starts at zero, so the adapted model answers as the base did.
    assert list(generate_tokens(model, ids, pixels, None, {}, 4, {"temperature": 0.0})) == before


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_lora_on_every_linear_keeps_generate_working_and_the_merged_save_reloads(family, family_dirs, tmp_path) -> None:
    import mlx.core as mx
    from mlx_lm.tuner.lora import LoRALinear

    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(family_dirs[family]))
    FastVisionModel.get_peft_model(model, r=4, target_modules="all-linear")
    adapted = {path.split(".")[0] for path, module in model.named_modules() if isinstance(module, LoRALinear)}
    assert "language_model" in adapted and adapted - {"language_model"}, f"both towers are adapted: {adapted}"
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = prompt_inputs(processor, square(family, "blue"), text)
    output = model.generate(**inputs, max_new_tokens=3)
    assert output.shape[1] > inputs["input_ids"].shape[1]
    # A LoRA that is not zero, so the merged weights differ from the base's and must answer as the adapted model does.
    for _, module in model.named_modules():
        if isinstance(module, LoRALinear):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    adapted_answer = model.generate(**inputs, max_new_tokens=3)
    model.save_pretrained_merged(str(tmp_path / "merged"), processor)
    merged, processor = FastVisionModel.from_pretrained(str(tmp_path / "merged"))
    assert (merged.generate(**inputs, max_new_tokens=3) == adapted_answer).all()


# ---- checkpoints whose config names the wrong mlx-vlm module -------------------------------------------------------


def test_pixtral_as_the_hub_ships_it_loads_through_the_pixtral_module_and_answers(tmp_path) -> None:
    from PIL import Image

    from tools.kits.tiny_vlm_model import PIXTRAL_IMAGE_SIDE, build_tiny_pixtral_as_hub

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.backend import model_family

    folder = build_tiny_pixtral_as_hub(tmp_path / "pixtral")
    model, processor = FastVisionModel.from_pretrained(str(folder))
    assert model_family(model) == "pixtral" and type(processor).__name__ == "PixtralProcessor"
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = Image.new("RGB", (PIXTRAL_IMAGE_SIDE, PIXTRAL_IMAGE_SIDE), COLOURS["red"])
    inputs = processor(image, text, add_special_tokens=False, return_tensors="np")
    output = model.generate(**inputs, max_new_tokens=3)
    assert output.shape[1] > inputs["input_ids"].shape[1]
    from unsloth.mlx.vision.backend import check_family

    assert check_family(model) == "pixtral"


def test_mlx_vlms_own_loader_still_routes_that_config_to_llava(tmp_path) -> None:
    """Why the route exists; when this fails, mlx-vlm loads Pixtral itself and CONFIG_ROUTES can lose its row."""
    from mlx_vlm import load

    from tools.kits.tiny_vlm_model import build_tiny_pixtral_as_hub

    with pytest.raises(ValueError, match="Unsupported model type: pixtral"):
        load(str(build_tiny_pixtral_as_hub(tmp_path / "pixtral")))
