"""The vision loss takes its language model's head a chunk of positions at a time through mlx-vlm's own call, and
gives the loss and gradients of the whole logits."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from .test_vision import FAMILIES, load, rows, vision_dirs  # noqa: F401  (the session fixture)


def _batch(model: Any, processor: Any, family: str) -> tuple:
    """Two collator-encoded conversations as the trainer's step sees them: tokens, lengths, masks, image features."""
    import mlx.core as mx

    from unsloth_zoo.mlx.data import TokenizedRows

    from unsloth.mlx.vision.collator import UnslothVisionDataCollator
    from unsloth.mlx.vision.training import VisionTrainRows

    encoded = [UnslothVisionDataCollator(model, processor).encode(row) for row in rows(family, repeats=1)[:2]]
    train_rows = VisionTrainRows(
        TokenizedRows([row.ids for row in encoded]), [row.mask for row in encoded], [row.features for row in encoded]
    )
    width = max(len(row.ids) for row in encoded)
    tokens = np.zeros((2, width), dtype=np.int32)
    for slot in range(2):
        row = train_rows[slot]
        tokens[slot, : len(row)] = row
    weights = mx.array(train_rows.take_read_masks(width))
    features = train_rows.read_features(train_rows.last_read, width)
    lengths = mx.array([len(row.ids) for row in encoded])
    return mx.array(tokens), lengths, weights, features, train_rows.token_features


def _whole_logits_loss(model, tokens, lengths, weights, features: Dict[str, Any], token_features) -> Any:
    """The vision loss as it was before the chunked head: mlx-vlm's whole logits, then cross-entropy."""
    import mlx.core as mx
    import mlx.nn as nn

    from unsloth.mlx.vision.backend import causal_logits

    extras = {name: value[:, :-1] if name in token_features else value for name, value in features.items()}
    pixel_values = extras.pop("pixel_values", None)
    logits = causal_logits(model, tokens[:, :-1], pixel_values, extras).astype(mx.float32)
    keep = (mx.arange(tokens.shape[1] - 1)[None, :] < (lengths[:, None] - 1)) * weights[:, 1:]
    return (nn.losses.cross_entropy(logits, tokens[:, 1:]) * keep).sum() / keep.sum(), keep.sum()


# Muse Glimmer's call scales its logits and softcaps them whatever its attributes say, after the head.
SPLIT_FAMILIES = (*FAMILIES, "muse_glimmer")


@pytest.fixture(scope="module")
def split_dirs(vision_dirs, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:  # noqa: F811
    from tools.kits.tiny_vlm_model import BUILDERS

    return {**vision_dirs, "muse_glimmer": BUILDERS["muse_glimmer"](tmp_path_factory.mktemp("tiny-vlm") / "muse")}


@pytest.mark.parametrize("family", SPLIT_FAMILIES)
def test_the_vision_loss_and_gradients_are_the_whole_logits_ones(split_dirs, family, monkeypatch) -> None:
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from unsloth_zoo.mlx import chunked_loss

    from unsloth.mlx.vision.training import vision_loss

    model, processor = load(split_dirs, family)
    # Seven positions a chunk, so a row's targets span several chunks.
    monkeypatch.setattr(
        chunked_loss, "CHUNK_ELEMENTS", 7 * int(model.language_model.model.embed_tokens.weight.shape[0])
    )
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape, key=mx.random.key(1)) * 0.05
    batch = _batch(model, processor, family)
    results = []
    for loss in (vision_loss, _whole_logits_loss):
        (value, _), grads = nn.value_and_grad(model, loss)(model, *batch)
        mx.eval(value, grads)
        results.append((value.item(), dict(tree_flatten(grads))))
    # The head was split from the call, not given the whole logits.
    assert getattr(model.language_model, chunked_loss._CALL_VERDICT_ATTRIBUTE) >= 0
    (chunked, chunked_grads), (whole, whole_grads) = results
    assert chunked == pytest.approx(whole, abs=1e-5)
    assert chunked_grads.keys() == whole_grads.keys() and chunked_grads
    for name, value in chunked_grads.items():
        assert mx.abs(value - whole_grads[name]).max().item() <= 1e-5, name
