"""DeepSeek-OCR through mlx-vlm, as its notebooks load it (`FastVisionModel.from_pretrained`): an image row trains.
Checked on a tiny DeepSeek-OCR (`tools/kits/tiny_vlm_deepseekocr.py`) carrying mlx-vlm's SAM encoder at full size
(it builds it so whatever the config says) beside a tiny language model, at the processor's 512-pixel "Tiny" base."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

IMAGE_TOKENS = 73  # 8 rows of 8 views and a newline, then the view separator


@pytest.fixture(scope="module")
def deepseekocr_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_deepseekocr import build_tiny_deepseekocr

    return build_tiny_deepseekocr(tmp_path_factory.mktemp("tiny-deepseekocr"))


class SamOnce:
    """mlx-vlm's SAM encoder, run once per distinct image: the trainer's call and the reference call below read the
    same pixels, and the encoder (frozen, full size) is the test's whole cost."""

    def __init__(self, sam: Any) -> None:
        self.sam = sam
        self.seen: List[Tuple[Any, Any]] = []

    def __call__(self, pixels: Any) -> Any:
        import mlx.core as mx

        for given, features in self.seen:
            if given.shape == pixels.shape and bool(mx.array_equal(given, pixels)):
                return features
        self.seen.append((pixels, self.sam(pixels)))
        return self.seen[-1][1]


def image_row(
    colour: Tuple[int, int, int], side: int = 64, answer: str = "It is red.", images: int = 1
) -> Dict[str, Any]:
    from PIL import Image

    square = Image.new("RGB", (side, side), colour)
    question = {
        "role": "user",
        "content": [*[{"type": "image", "image": square}] * images, {"type": "text", "text": "Colour?"}],
    }
    return {"messages": [question, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]}


def load_tiny(folder: Path) -> Tuple[Any, Any]:
    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(folder), max_seq_length=256, load_in_4bit=False)
    # mlx-vlm 0.7.10's processor keeps its own template (content parts rendered as text); the checkpoint's is taken.
    processor.chat_template = processor.tokenizer.chat_template
    return model, processor


def own_call_logits(model: Any, processor: Any, row: Dict[str, Any]) -> Tuple[Any, np.ndarray]:
    """mlx-vlm's own DeepSeek-OCR call on the processor's own batch of one row: its logits, and the row's ids."""
    text = processor.apply_chat_template(row["messages"], tokenize=False)
    image = row["messages"][0]["content"][0]["image"]
    batch = processor(text=[text], images=[image], inference_mode=False, base_size=512)
    own = model(batch["input_ids"], batch["images"], images_seq_mask=batch["images_seq_mask"],
                images_spatial_crop=batch["images_spatial_crop"]).logits  # fmt: skip
    return own, np.array(batch["input_ids"])[0]


def sft_config(tmp_path: Path, batch: int, **fields: Any) -> Any:
    from trl import SFTConfig

    return SFTConfig(
        per_device_train_batch_size=batch,
        max_steps=1,
        output_dir=str(tmp_path / "out"),
        report_to="none",
        save_strategy="no",
        remove_unused_columns=False,
        dataset_text_field="",
        max_length=256,
        dataset_kwargs={"skip_prepare_dataset": True},
        **fields,
    )


def with_lora(model: Any) -> Any:
    from unsloth import FastVisionModel

    return FastVisionModel.get_peft_model(
        model, finetune_vision_layers=False, r=8, lora_alpha=16, target_modules="all-linear", random_state=3407
    )


def answer_loss(logits: Any, ids: np.ndarray, mask: np.ndarray) -> float:
    """Mean next-token loss over the masked targets, in float64."""
    import mlx.core as mx

    values = np.array(logits[0].astype(mx.float32), dtype=np.float64)[:-1]
    targets = ids[1:]
    shifted = values - values.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-log_probs[np.arange(len(targets)), targets][mask[1:]].mean())


def test_an_image_row_trains_one_step_with_the_loss_of_mlx_vlms_own_call(deepseekocr_dir, tmp_path) -> None:
    """One step on an image row: the trainer's loss is mlx-vlm's own DeepSeek-OCR call's on the processor's own batch
    (its [crops, global views] pair and `images_seq_mask`), the image moves that loss, and LoRA learns."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load_tiny(deepseekocr_dir)
    assert type(model).__module__ == "mlx_vlm.models.deepseekocr.deepseekocr"
    model = with_lora(model)
    model.sam_model = SamOnce(model.sam_model)
    row = image_row((220, 30, 30))
    collator = UnslothVisionDataCollator(model, processor)
    encoded = collator.encode(row)
    assert encoded.features["pixel_values"].shape == (1, 3, 512, 512)
    assert int(encoded.features["images_seq_mask"].sum()) == IMAGE_TOKENS
    untrained = dict(tree_flatten(model.trainable_parameters()))
    trainer = SFTTrainer(
        model=model,
        train_dataset=[row],
        processing_class=processor.tokenizer,
        data_collator=collator,
        args=sft_config(tmp_path, 1, learning_rate=5e-3, warmup_steps=0, logging_steps=1),
    )
    trainer.train()
    loss = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry][0]
    trained = dict(tree_flatten(model.trainable_parameters()))
    moved = [name for name, value in trained.items() if "lora_b" in name and bool((value != untrained[name]).any())]
    assert any(name.startswith("language_model.") for name in moved), sorted(moved)
    # The reference: the weights the step started from, the processor's own batch through mlx-vlm's own call.
    model.update(tree_unflatten(list(untrained.items())))
    own, ids = own_call_logits(model, processor, row)
    assert ids.tolist() == encoded.ids.tolist()
    expected = answer_loss(own, ids, encoded.mask)
    # Without pixels, mlx-vlm leaves the image tokens their own embeddings.
    without_image = answer_loss(model.language_model(mx.array(ids[None, :])).logits, ids, encoded.mask)
    assert len(model.sam_model.seen) == 1
    assert np.isfinite(loss) and abs(loss - expected) < 1e-4, (loss, expected, without_image)
    assert abs(expected - without_image) > 1e-2, (expected, without_image)


def test_the_hubs_config_naming_deepseek_vl_v2_loads_as_deepseek_ocr(deepseekocr_dir, tmp_path) -> None:
    """The Hub's DeepSeek-OCR config says deepseek_vl_v2; its architecture routes it to mlx-vlm's DeepSeek-OCR module."""
    import json
    import shutil

    from unsloth import FastVisionModel

    hub = shutil.copytree(deepseekocr_dir, tmp_path / "hub")
    config = json.loads((hub / "config.json").read_text(encoding="utf-8"))
    (hub / "config.json").write_text(json.dumps({**config, "model_type": "deepseek_vl_v2"}), encoding="utf-8")
    model, processor = FastVisionModel.from_pretrained(str(hub), load_in_4bit=False)
    assert type(model).__module__ == "mlx_vlm.models.deepseekocr.deepseekocr"
    assert type(processor).__name__ == "DeepseekOCRProcessor"


def test_an_image_over_640_pixels_is_refused_by_name_and_trains_resized(deepseekocr_dir) -> None:
    """Over 640 pixels a side, the processor also cuts local views, a path not checked here: refused, naming resize=."""
    from unsloth import FastVisionModel
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = FastVisionModel.from_pretrained(str(deepseekocr_dir), load_in_4bit=False)
    processor.chat_template = processor.tokenizer.chat_template
    row = image_row((30, 40, 220), side=700)
    with pytest.raises(NotImplementedError, match="local views.*resize=640"):
        UnslothVisionDataCollator(model, processor).encode(row)
    encoded = UnslothVisionDataCollator(model, processor, resize=640).encode(row)
    assert encoded.features["pixel_values"].shape == (1, 3, 512, 512)
    assert int(encoded.features["images_seq_mask"].sum()) == IMAGE_TOKENS


def test_a_row_with_more_images_than_one_tower_call_keeps_is_refused_by_name(deepseekocr_dir, tmp_path) -> None:
    from trl import SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load_tiny(deepseekocr_dir)
    args = sft_config(tmp_path, 2)
    rows = [image_row((220, 30, 30)), image_row((30, 30, 220), images=2)]
    # The trainer encodes its rows as it is built, so the refusal comes before the first step.
    with pytest.raises(NotImplementedError, match="DeepseekOCRProcessor on MLX takes one image per row .a row has 2"):
        collator = UnslothVisionDataCollator(model, processor)
        SFTTrainer(model=model, tokenizer=processor, data_collator=collator, train_dataset=rows, args=args)


def test_a_batch_run_in_parts_has_the_gradients_of_its_summed_row_losses(deepseekocr_dir) -> None:
    """Two rows of different images and answers (so a view given to the wrong row, or padding, would show) run as one
    call each; the batch's loss and LoRA gradients are those of each row through mlx-vlm's own call."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx.data import TokenizedRows, pad_batch

    from unsloth.mlx.vision.training import VisionTrainRows, vision_step
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load_tiny(deepseekocr_dir)
    model = with_lora(model)
    # LoRA's B starts at zero, which would leave every A's gradient zero too.
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    model.sam_model = SamOnce(model.sam_model)
    given = [image_row((220, 30, 30)), image_row((30, 30, 220), answer="It is blue, a deep and even blue.")]
    collator = UnslothVisionDataCollator(model, processor)
    encoded = [collator.encode(row) for row in given]
    rows = VisionTrainRows(
        TokenizedRows([row.ids for row in encoded]), [row.mask for row in encoded], [row.features for row in encoded]
    )
    tokens, lengths = pad_batch(rows, [0, 1], 0)
    loss, count, grads = vision_step(model, rows)(mx.array(tokens), mx.array(lengths))
    targets = sum(int(row.mask[1:].sum()) for row in encoded)

    def summed_row_losses(m: Any) -> Any:
        total = mx.array(0.0)
        for row, mine in zip(given, encoded):
            logits, ids = own_call_logits(m, processor, row)
            assert ids.tolist() == mine.ids.tolist()
            logits = logits[0, :-1].astype(mx.float32)
            log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            picked = mx.take_along_axis(log_probs, mx.array(ids[1:])[:, None], axis=-1)[:, 0]
            total = total - (picked * mx.array(mine.mask[1:].astype(np.float32))).sum()
        return total / targets

    expected_loss, expected = nn.value_and_grad(model, summed_row_losses)(model)
    assert len(model.sam_model.seen) == 2
    assert int(count.item()) == targets
    assert abs(loss.item() - expected_loss.item()) < 1e-5, (loss.item(), expected_loss.item())
    expected_grads = dict(tree_flatten(expected))
    got = dict(tree_flatten(grads))
    assert set(got) == set(expected_grads) and got
    worst = max(float(mx.abs(got[name] - expected_grads[name]).max().item()) for name in got)
    assert worst < 1e-6, worst
    assert max(float(mx.abs(value).max().item()) for value in got.values()) > 1e-4, "the gradients are not all zero"
