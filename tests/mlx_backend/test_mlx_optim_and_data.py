"""Schedules, warmup resolution, clipping arithmetic, optimizer names, and the tokenized/padded data view."""

from __future__ import annotations

import numpy as np
import pytest

from unsloth_zoo.mlx.optim import canonical_optimizer_name, learning_rates, resolve_warmup_steps


@pytest.mark.parametrize(
    ("kind", "warmup", "total", "expected"),
    [
        ("linear", 2, 6, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]),
        ("cosine", 0, 4, [1.0, 0.8535534, 0.5, 0.1464466, 0.0]),
        ("cosine", 1, 3, [0.0, 1.0, 0.5, 0.0]),
        ("constant", 3, 3, [1.0, 1.0, 1.0, 1.0]),
        ("constant_with_warmup", 2, 4, [0.0, 0.5, 1.0, 1.0, 1.0]),
    ],
)
def test_schedules_match_hugging_faces_curves(kind, warmup, total, expected):
    assert learning_rates(kind, 1.0, warmup, total) == pytest.approx(expected, abs=1e-6)


def test_schedule_scales_with_the_peak():
    assert learning_rates("linear", 2e-4, 0, 4) == pytest.approx([2e-4, 1.5e-4, 1e-4, 0.5e-4, 0.0])


@pytest.mark.parametrize(
    ("steps", "ratio", "total", "expected"),
    [(5, 0.0, 100, 5), (5, 0.5, 100, 5), (0, 0.1, 25, 3), (0.25, 0.0, 10, 3), (0, 0.0, 50, 0)],
    ids=["count", "count-beats-ratio", "ratio-rounds-up", "fraction-as-ratio", "none"],
)
def test_warmup_resolution(steps, ratio, total, expected):
    assert resolve_warmup_steps(steps, ratio, total) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("adamw", "adamw"),
        ("adamw_8bit", "adamw"),
        ("adamw_torch_fused", "adamw"),
        ("paged_adamw_32bit", "adamw"),
        ("adam", "adam"),
        ("sgd", "sgd"),
        ("adafactor", "adafactor"),
        ("lion_8bit", "lion"),
        ("paged_lion_32bit", "lion"),
    ],
)
def test_optimizer_names(name, expected):
    assert canonical_optimizer_name(name) == expected


def test_schedule_lookup_runs_on_mlx_step_counters():
    import mlx.core as mx

    from unsloth_zoo.mlx.optim import build_schedule

    schedule = build_schedule([0.0, 0.5, 1.0])
    assert [schedule(mx.array(step, mx.uint64)).item() for step in (0, 1, 2, 9)] == [0.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize(
    ("mode", "expected_a", "expected_b"),
    [
        ("global_norm", [0.5970223, 0.7960298], [0.0597022, 0.0796030]),  # both scaled by 1 / 5.0249378
        ("per_tensor_norm", [0.6, 0.8], [0.3, 0.4]),  # only the tensor over the bound is scaled
        ("value", [0.45, 0.45], [0.3, 0.4]),
        ("none", [3.0, 4.0], [0.3, 0.4]),
    ],
)
def test_clip_arithmetic(mode, expected_a, expected_b):
    import mlx.core as mx

    from unsloth_zoo.mlx.optim import clip_gradients

    grads = {"a": mx.array([3.0, 4.0]), "b": mx.array([0.3, 0.4])}
    clipped, norm = clip_gradients(grads, mode, max_norm=1.0, max_value=0.45)
    assert norm.item() == pytest.approx(5.0249378)
    assert np.array(clipped["a"]).tolist() == pytest.approx(expected_a, rel=1e-5)
    assert np.array(clipped["b"]).tolist() == pytest.approx(expected_b, rel=1e-5)


def test_text_rows_get_eos_once_and_are_truncated(tiny_model_dir):
    from unsloth_zoo.mlx import load_model
    from unsloth_zoo.mlx.data import EncodeRows, tokenize_dataset

    _, tokenizer = load_model(tiny_model_dir)
    eos = tokenizer.eos_token_id
    plain = tokenizer.encode("a small test")
    encode = EncodeRows(tokenizer, "text", None, max_seq_length=64, append_eos=True)
    rows = tokenize_dataset([{"text": "a small test"}, {"text": "a small test<|eos|>"}], encode)
    assert rows[0].tolist() == plain + [eos]
    assert rows[1].tolist() == plain + [eos]  # already ends in EOS: not doubled

    short = tokenize_dataset(
        [{"text": "a small test"}], EncodeRows(tokenizer, "text", None, max_seq_length=2, append_eos=True)
    )
    assert short[0].tolist() == plain[:2]
    no_eos = tokenize_dataset(
        [{"text": "a small test"}], EncodeRows(tokenizer, "text", None, max_seq_length=64, append_eos=False)
    )
    assert no_eos[0].tolist() == plain


def test_formatting_func_and_pre_tokenized_rows(tiny_model_dir):
    from unsloth_zoo.mlx import load_model
    from unsloth_zoo.mlx.data import EncodeRows, tokenize_dataset

    _, tokenizer = load_model(tiny_model_dir)
    rows = [{"question": "why", "answer": "because"}]
    encode = EncodeRows(tokenizer, "text", lambda row: f"Q: {row['question']} A: {row['answer']}", 64, True)
    assert tokenize_dataset(rows, encode)[0].tolist() == tokenizer.encode("Q: why A: because") + [
        tokenizer.eos_token_id
    ]

    ids_only = tokenize_dataset([{"input_ids": [7, 8, 9, 10]}], EncodeRows(tokenizer, "text", None, 3, True))
    assert ids_only[0].tolist() == [7, 8, 9]
    with pytest.raises(KeyError, match="formatting_func"):
        tokenize_dataset([{"prompt": "x"}], EncodeRows(tokenizer, "text", None, 8, True))


def test_batches_depend_only_on_seed_and_epoch():
    from unsloth_zoo.mlx.data import epoch_batches

    lengths = np.array([5, 1, 4, 2, 3])
    sequential = epoch_batches(lengths, 2, "sequential", 0, 0)
    assert [batch.tolist() for batch in sequential] == [[0, 1], [2, 3], [4]]
    first = [batch.tolist() for batch in epoch_batches(lengths, 2, "default", 7, 0)]
    assert first == [batch.tolist() for batch in epoch_batches(lengths, 2, "default", 7, 0)]
    assert sorted(sum(first, [])) == [0, 1, 2, 3, 4]
    other_epochs = [
        [batch.tolist() for batch in epoch_batches(lengths, 2, "default", 7, epoch)] for epoch in range(1, 6)
    ]
    assert any(order != first for order in other_epochs)
    by_length = [sorted(batch.tolist()) for batch in epoch_batches(lengths, 2, "length", 7, 0)]
    assert sorted(by_length) == [[0], [1, 3], [2, 4]]  # lengths (1, 2), (3, 4) and (5) share batches


def test_padding_keeps_real_lengths():
    from unsloth_zoo.mlx.data import TokenizedRows, pad_batch

    rows = TokenizedRows([[5, 6, 7], [8], [9, 10]])
    tokens, lengths = pad_batch(rows, [0, 1, 2], pad_id=0)
    assert tokens.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert lengths.tolist() == [3, 1, 2]
    # The model sees width - 1 positions, so that is what the multiple rounds: 1 position -> 4, width 5.
    wide, _ = pad_batch(rows, [1, 2], pad_id=0, multiple=4)
    assert wide.tolist() == [[8, 0, 0, 0, 0], [9, 10, 0, 0, 0]]
    exact, _ = pad_batch(TokenizedRows([[1] * 9]), [0], pad_id=0, multiple=4)
    assert exact.shape == (1, 9)


def test_masked_loss_ignores_padding(tiny_model_dir):
    import mlx.core as mx

    from unsloth_zoo.mlx import load_model
    from unsloth_zoo.mlx.loss import masked_cross_entropy

    model, _ = load_model(tiny_model_dir)
    alone, alone_count = masked_cross_entropy(model, mx.array([[5, 6, 7, 8]]), mx.array([4]))
    padded, padded_count = masked_cross_entropy(model, mx.array([[5, 6, 7, 8, 0, 0]]), mx.array([4]))
    garbage, _ = masked_cross_entropy(model, mx.array([[5, 6, 7, 8, 300, 301]]), mx.array([4]))
    assert (alone_count.item(), padded_count.item()) == (3, 3)
    assert padded.item() == pytest.approx(alone.item(), rel=1e-5)
    assert garbage.item() == pytest.approx(alone.item(), rel=1e-5)


def test_a_small_eval_split_of_an_auto_config_is_tokenized_in_process(load_tiny, config, monkeypatch):
    import datasets

    from tools.kits.pool_spy import spy_pools
    from unsloth_zoo.mlx.trainer import MLXTrainer

    monkeypatch.delenv("UNSLOTH_DATASET_NUM_PROC", raising=False)
    args = config()
    model, tokenizer = load_tiny(lora=True)
    rows = datasets.Dataset.from_list([{"text": f"row {i} is short"} for i in range(8)])
    datasets.disable_caching()
    try:
        with spy_pools() as log:
            MLXTrainer(model, tokenizer, rows, rows, args=args)
    finally:
        datasets.enable_caching()
    assert log.process_pools() == []  # 8 rows never get workers, whatever auto resolved to in the config
