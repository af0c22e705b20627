"""`packing=True`: rows packed by best-fit decreasing as TRL's bfd strategy packs them, each row attending only to
itself, so the loss on packed rows equals the unpacked loss; models whose layers would leak one row into the next
are refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import QUESTIONS, chat_text

TEXTS = [chat_text(question, answer) for question, answer in QUESTIONS]


def test_best_fit_decreasing_fills_the_fullest_bin_that_fits() -> None:
    from unsloth.mlx.training.packing import best_fit_decreasing

    # Longest first: 7 opens bin 0 (room 3), 6 opens bin 1 (room 4), 4 fits only bin 1 (room 0), 3 goes to bin 0
    # (room 0), 2 opens bin 2 (room 8), 1 joins bin 2.
    assert best_fit_decreasing([3, 7, 2, 6, 4, 1], 10) == [[1, 0], [3, 4], [2, 5]]
    with pytest.raises(ValueError, match=r"rows \[1\] are longer than max_seq_length=5"):
        best_fit_decreasing([3, 7], 5)


def _rows(tokenizer) -> list:
    return [np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int32) for text in TEXTS]


def _unpacked_loss(model, rows, masks=None) -> float:
    """The token-weighted mean over every row's targets, each row run alone (the reference)."""
    import mlx.core as mx

    from unsloth_zoo.mlx.loss import masked_cross_entropy

    from unsloth.mlx.chat.responses_only import response_masked_cross_entropy

    total, count = 0.0, 0.0
    for index, row in enumerate(rows):
        tokens, lengths = mx.array(row[None, :]), mx.array([len(row)])
        if masks is None:
            loss, targets = masked_cross_entropy(model, tokens, lengths)
        else:
            weights = mx.array(masks[index][None, :].astype(np.float32))
            loss, targets = response_masked_cross_entropy(model, tokens, lengths, weights)
        total += float(loss) * float(targets)
        count += float(targets)
    return total / count


def _packed_loss(model, rows, capacity, masks=None) -> tuple:
    import mlx.core as mx

    from unsloth_zoo.mlx.data import TokenizedRows

    from unsloth.mlx.training.packing import PackedTrainRows, packed_cross_entropy
    from unsloth.mlx.training.train_data import TrainRows

    train_rows = TrainRows(TokenizedRows(rows))
    if masks is not None:
        train_rows.set_masks(masks)
    packed = PackedTrainRows(train_rows, capacity)
    width = int(packed.lengths.max())
    tokens = np.zeros((len(packed), width), dtype=np.int32)
    for slot in range(len(packed)):
        row = packed[slot]
        tokens[slot, : len(row)] = row
    segments, weights = packed.take_read_segments(width)
    loss, targets = packed_cross_entropy(model, mx.array(tokens), mx.array(segments), mx.array(weights))
    return float(loss), len(packed)


@pytest.mark.parametrize("architecture", [None, "qwen3", "gemma2", "gemma3_text"])
def test_the_packed_loss_is_the_unpacked_loss(tmp_path: Path, architecture) -> None:
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model
    from unsloth import FastLanguageModel

    folder = build_tiny_mlx_model(tmp_path / "model", architecture=architecture, tokenizer_cache_dir=tmp_path / "tok")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    rows = _rows(tokenizer)
    capacity = 3 * max(len(row) for row in rows)
    packed, sequences = _packed_loss(model, rows, capacity)
    assert sequences < len(rows)
    assert abs(packed - _unpacked_loss(model, rows)) < 1e-5
    # Responses only: the same masks, packed or not.
    masks = [np.arange(len(row)) >= len(row) // 2 for row in rows]
    packed_masked, _ = _packed_loss(model, rows, capacity, masks)
    assert abs(packed_masked - _unpacked_loss(model, rows, masks)) < 1e-5


def test_rows_seeing_each_other_would_change_the_loss(load_public) -> None:
    """The check above can fail: a plain causal pass over the same packed sequence gives another loss."""
    import mlx.core as mx

    from unsloth_zoo.mlx.loss import masked_cross_entropy

    model, tokenizer = load_public()
    rows = _rows(tokenizer)
    joined = np.concatenate(rows)[None, :]
    leaked, _ = masked_cross_entropy(model, mx.array(joined), mx.array([joined.shape[1]]))
    assert abs(float(leaked) - _unpacked_loss(model, rows)) > 1e-3


def test_sft_config_packing_trains_packed_rows_with_the_unpacked_loss(load_public, tmp_path: Path) -> None:
    from trl import SFTConfig

    from unsloth.mlx.training.packing import PackedTrainRows

    model, tokenizer = load_public(lora=True)
    losses = {}
    for packing in (False, True):
        args = SFTConfig(
            output_dir=str(tmp_path / f"out-{packing}"),
            per_device_train_batch_size=len(TEXTS),
            max_steps=1,
            learning_rate=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            max_seq_length=256,
            packing=packing,
        )
        trainer = UnslothTrainer(
            model=model, tokenizer=tokenizer, train_dataset=[{"text": t} for t in TEXTS], args=args
        )
        assert isinstance(trainer.train_rows, PackedTrainRows) == packing
        trainer.train()
        losses[packing] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(trainer.train_rows) < len(TEXTS)
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)


def test_a_model_with_convolution_layers_is_refused_naming_sft_config(tmp_path: Path, load_public) -> None:
    import mlx.core as mx
    from mlx_lm.models import lfm2

    from trl import SFTConfig

    _, tokenizer = load_public()
    args = lfm2.ModelArgs(
        model_type="lfm2",
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        norm_eps=1e-5,
        conv_bias=False,
        conv_L_cache=3,
        block_dim=32,
        block_multiple_of=16,
        block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=False,
        block_ff_dim=64,
        full_attn_idxs=[1],
    )
    model = lfm2.Model(args)
    mx.eval(model.parameters())
    config = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, packing=True, max_seq_length=64)
    with pytest.raises(NotImplementedError, match=r"^SFTConfig\(packing=True\) cannot pack rows for this model: its "):
        UnslothTrainer(model=model, tokenizer=tokenizer, train_dataset=[{"text": TEXTS[0]}], args=config)


def test_eval_packing_is_refused_naming_the_class_the_user_built() -> None:
    from trl import SFTConfig

    with pytest.raises(NotImplementedError, match=r"^SFTConfig cannot train with eval_packing=True"):
        SFTConfig(output_dir="unused", eval_packing=True)
