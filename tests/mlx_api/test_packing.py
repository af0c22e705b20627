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


def _llama(vocabulary: int, hidden: int = 64, layers: int = 2):
    """An mlx-lm llama with LoRA adapters on a frozen base, its LoRA B non-zero so every adapter has a gradient."""
    import mlx.core as mx
    from mlx_lm.models import llama
    from mlx_lm.tuner.utils import linear_to_lora_layers

    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=2 * hidden,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        vocab_size=vocabulary,
        tie_word_embeddings=True,
    )
    mx.random.seed(0)
    model = llama.Model(args)
    model.freeze()
    linear_to_lora_layers(model, layers, {"rank": 4, "scale": 2.0, "dropout": 0.0})
    for _, module in model.named_modules():
        if hasattr(module, "lora_b"):
            module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    mx.eval(model.parameters())
    return model


def _packed_batch(vocabulary: int, width: int):
    """Two packed sequences of three and two rows (then padding), with uneven target weights."""
    import mlx.core as mx

    tokens = mx.random.randint(0, vocabulary, (2, width), key=mx.random.key(1))
    cuts = [[0, width // 4, width // 2, width - 3], [0, width // 3, width - 5]]
    segments = np.zeros((2, width), dtype=np.int32)
    for row, edges in enumerate(cuts):
        for number, (start, end) in enumerate(zip(edges, edges[1:]), start=1):
            segments[row, start:end] = number
    weights = mx.random.uniform(shape=(2, width), key=mx.random.key(2)) * mx.array(segments > 0)
    return tokens, mx.array(segments), weights


def _whole_logits_packed_loss(model, tokens, segments, weights):
    """The packed loss as it was before the chunked head: every sequence's whole logits at once."""
    import mlx.core as mx
    import mlx.nn as nn

    from unsloth.mlx.training.packing import _BlockMask, block_causal_mask

    total, count = mx.array(0.0), mx.array(0.0)
    for row in range(tokens.shape[0]):
        seen = segments[row, :-1]
        masks = [_BlockMask(block_causal_mask(seen))] * len(model.layers)
        logits = model(tokens[row : row + 1, :-1], cache=masks).astype(mx.float32)
        keep = ((segments[row, 1:] == seen) * (seen > 0) * weights[row, 1:])[None, :]
        total = total + (nn.losses.cross_entropy(logits, tokens[row : row + 1, 1:]) * keep).sum()
        count = count + keep.sum()
    return total / count, count


def _value_and_grads(model, loss, *args):
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    (value, _), grads = nn.value_and_grad(model, loss)(model, *args)
    mx.eval(value, grads)
    return value.item(), dict(tree_flatten(grads))


def test_the_packed_loss_and_gradients_are_the_whole_logits_ones() -> None:
    import mlx.core as mx

    from unsloth.mlx.training.packing import packed_cross_entropy

    model = _llama(300)
    batch = _packed_batch(300, 48)
    chunked = _value_and_grads(model, packed_cross_entropy, *batch)
    whole = _value_and_grads(model, _whole_logits_packed_loss, *batch)
    assert chunked[0] == pytest.approx(whole[0], abs=1e-5)
    assert chunked[1].keys() == whole[1].keys() and len(chunked[1]) == 2 * 7 * 2
    for name, value in chunked[1].items():
        assert mx.abs(value - whole[1][name]).max().item() <= 1e-5, name


def test_a_large_vocabulary_packed_step_peaks_far_lower_than_the_whole_logits() -> None:
    import mlx.core as mx

    from unsloth.mlx.training.packing import packed_cross_entropy

    model = _llama(131072, hidden=32, layers=1)
    batch = _packed_batch(131072, 257)
    peaks = {}
    for name, loss in (("whole", _whole_logits_packed_loss), ("chunked", packed_cross_entropy)):
        _value_and_grads(model, loss, *batch)
        mx.reset_peak_memory()
        _value_and_grads(model, loss, *batch)
        peaks[name] = mx.get_peak_memory()
    # One sequence's 256 positions of float32 logits are 128 MiB, and a step holds several; a chunk's are 16 MiB.
    assert peaks["chunked"] < peaks["whole"] / 2, {name: peak / 2**20 for name, peak in peaks.items()}
