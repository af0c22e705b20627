"""The chunked log-probabilities: the whole-logits values and gradients, for each way mlx-lm families end."""

from __future__ import annotations

import logging
from typing import Any, Dict, Tuple

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import _get_classes

from unsloth_zoo.mlx.chunked_loss import output_head, token_scores
from unsloth_zoo.mlx.loss import masked_cross_entropy

VOCABULARY = 300

# Every family's fields in one config; each family's ModelArgs reads the ones it knows.
SHARED = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-5,
    "layer_norm_eps": 1e-5,
    "vocab_size": VOCABULARY,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "attention_bias": False,
    "mlp_bias": False,
    "logits_scaling": 4.0,
    "attention_multiplier": 0.25,
    "embedding_multiplier": 2.0,
    "residual_multiplier": 0.5,
    "logit_scale": 0.5,
    "query_pre_attn_scalar": 16.0,
}
FAMILIES = {
    "llama tied": {"model_type": "llama", "tie_word_embeddings": True},
    "llama lm_head": {"model_type": "llama", "tie_word_embeddings": False},
    "qwen3": {"model_type": "qwen3", "tie_word_embeddings": True},
    "gemma2 softcap": {"model_type": "gemma2", "final_logit_softcapping": 5.0},
    # mlx-lm's gemma3_text reads no final softcap, so the one in its config must not be applied.
    "gemma3_text": {"model_type": "gemma3_text", "final_logit_softcapping": 5.0, "sliding_window_pattern": 2},
    # Gemma 3's wrapper hands its call to a gemma3_text language model.
    "gemma3 wrapper": {
        "model_type": "gemma3",
        "text_config": {**SHARED, "model_type": "gemma3_text", "sliding_window_pattern": 2},
    },
    "granite scaling": {"model_type": "granite", "tie_word_embeddings": False},
    "cohere scale": {"model_type": "cohere"},
}


def build(config: Dict[str, Any], lora: bool = True) -> Any:
    config = {**SHARED, **config}
    model_class, args_class = _get_classes(config)
    mx.random.seed(0)
    model = model_class(args_class.from_dict(config))
    if lora:
        model.freeze()
        linear_to_lora_layers(model, 2, {"rank": 4, "scale": 2.0, "dropout": 0.0})
        for _, module in model.named_modules():
            if hasattr(module, "lora_b"):
                module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    mx.eval(model.parameters())
    return model


def batch(width: int = 40) -> mx.array:
    return mx.random.randint(0, VOCABULARY, (2, width + 1), key=mx.random.key(3))


def whole_logits_loss(model: Any, tokens: mx.array, weights: mx.array) -> mx.array:
    logits = model(tokens[:, :-1]).astype(mx.float32)
    return (nn.losses.cross_entropy(logits, tokens[:, 1:]) * weights).sum() / weights.sum()


def chunked_loss(model: Any, tokens: mx.array, weights: mx.array) -> mx.array:
    return -(token_scores(model, tokens[:, :-1], tokens[:, 1:], chunk=7).log_probs * weights).sum() / weights.sum()


def value_and_grads(model: Any, loss: Any, *args: Any) -> Tuple[float, dict]:
    value, grads = nn.value_and_grad(model, loss)(model, *args)
    mx.eval(value, grads)
    return value.item(), dict(tree_flatten(grads))


def assert_same(first: Tuple[float, dict], second: Tuple[float, dict], tolerance: float = 1e-5) -> None:
    assert first[0] == pytest.approx(second[0], rel=tolerance, abs=tolerance)
    assert first[1].keys() == second[1].keys() and first[1]
    for name, value in first[1].items():
        assert mx.abs(value - second[1][name]).max().item() <= tolerance, name


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_chunks_give_the_whole_logits_loss_and_gradients(family: str) -> None:
    model = build(FAMILIES[family])
    assert output_head(model) is not None
    tokens = batch()
    # Uneven weights per target, as masks and per-sequence DPO weights make them.
    weights = mx.random.uniform(shape=(2, 40), key=mx.random.key(4))
    assert_same(
        value_and_grads(model, chunked_loss, tokens, weights),
        value_and_grads(model, whole_logits_loss, tokens, weights),
    )


def test_a_trainable_head_gets_the_whole_logits_gradients() -> None:
    model = build(FAMILIES["llama lm_head"], lora=False)
    tokens, weights = batch(24), mx.ones((2, 24))
    chunked = value_and_grads(model, chunked_loss, tokens, weights)
    assert "lm_head.weight" in chunked[1] and "model.embed_tokens.weight" in chunked[1]
    assert_same(chunked, value_and_grads(model, whole_logits_loss, tokens, weights))


def test_temperature_positions_and_statistics_are_the_whole_logits_ones() -> None:
    model = build(FAMILIES["gemma2 softcap"])
    tokens = batch(30)
    positions = mx.array([[3, 4, 5, 6], [10, 11, 12, 13]])
    targets = tokens[:, 1:][mx.arange(2)[:, None], positions]
    scores = token_scores(
        model, tokens[:, :-1], targets, temperature=0.7, positions=positions, statistics=True, chunk=3
    )
    logits = model(tokens[:, :-1]).astype(mx.float32)[mx.arange(2)[:, None], positions] / 0.7
    log_probs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    expected = mx.take_along_axis(log_probs, targets[..., None], axis=-1).squeeze(-1)
    entropy = -(mx.exp(log_probs) * log_probs).sum(axis=-1)
    assert mx.abs(scores.log_probs - expected).max().item() <= 1e-5
    assert mx.abs(scores.entropy - entropy).max().item() <= 1e-4
    assert mx.abs(scores.mean_logit - logits.mean(axis=-1)).max().item() <= 1e-5
    assert mx.array_equal(scores.argmax_hit, (mx.argmax(logits, axis=-1) == targets).astype(mx.float32)).item()


class WrappedHead(nn.Module):
    """A model whose forward doubles the logits after its head, which no family table knows."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.model, self.lm_head, self.args = inner.model, inner.lm_head, inner.args

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        return 2 * self.lm_head(self.model(inputs, cache=cache))


def test_a_head_that_cannot_be_split_falls_back_to_the_whole_logits_and_says_so(caplog) -> None:
    model = WrappedHead(build(FAMILIES["llama lm_head"]))
    assert output_head(model) is None
    tokens, weights = batch(16), mx.ones((2, 16))
    with caplog.at_level(logging.WARNING, logger="unsloth_zoo.mlx.chunked_loss"):
        chunked = value_and_grads(model, chunked_loss, tokens, weights)
    assert "cannot be split from the model body" in caplog.text and "llama" in caplog.text
    assert_same(chunked, value_and_grads(model, whole_logits_loss, tokens, weights))


def test_dropout_does_not_hide_the_head_and_the_training_flag_is_kept() -> None:
    model = build(FAMILIES["llama tied"])
    for _, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            module._p_1 = 0.5
    model.train()
    assert output_head(model) is not None
    assert model.training and model.layers[0].self_attn.q_proj.training


def test_the_sft_loss_is_the_unchunked_one() -> None:
    model = build(FAMILIES["gemma3_text"])
    tokens = batch(48)
    lengths = mx.array([49, 30])

    def unchunked(model: Any, tokens: mx.array, lengths: mx.array) -> Any:
        logits = model(tokens[:, :-1])
        mask = mx.arange(48)[None, :] < (lengths[:, None] - 1)
        per_token = nn.losses.cross_entropy(logits.astype(mx.float32), tokens[:, 1:]) * mask
        return per_token.sum() / mask.sum(), mask.sum()

    def first(function: Any) -> Any:
        return lambda *args: function(*args)[0]

    assert_same(
        value_and_grads(model, first(masked_cross_entropy), tokens, lengths),
        value_and_grads(model, first(unchunked), tokens, lengths),
    )


def step_peak(model: Any, loss: Any, tokens: mx.array, weights: mx.array) -> int:
    value_and_grads(model, loss, tokens, weights)
    mx.reset_peak_memory()
    value_and_grads(model, loss, tokens, weights)
    return mx.get_peak_memory()


def test_a_large_vocabulary_step_peaks_far_lower_chunked() -> None:
    config = {**FAMILIES["llama tied"], "vocab_size": 131072, "hidden_size": 32, "num_hidden_layers": 1}
    model = build(config)
    tokens = mx.random.randint(0, 131072, (1, 257), key=mx.random.key(5))
    weights = mx.ones((1, 256))
    whole = step_peak(model, whole_logits_loss, tokens, weights)
    chunked = step_peak(model, chunked_loss_default, tokens, weights)
    # 256 positions of float32 logits alone are 128 MiB, and a step holds several such arrays; a chunk's are 16 MiB.
    assert chunked < whole / 2, (chunked / 2**20, whole / 2**20)


def test_logits_that_fit_one_chunk_are_still_cut_so_a_short_batch_peaks_lower() -> None:
    # 2 rows of 500 positions at a 4,000-token vocabulary: 4.0 million float32 logits, under one 16 MiB chunk.
    config = {**FAMILIES["llama tied"], "vocab_size": 4000, "hidden_size": 32, "num_hidden_layers": 1}
    model = build(config)
    tokens = mx.random.randint(0, 4000, (2, 501), key=mx.random.key(6))
    weights = mx.ones((2, 500))
    whole = step_peak(model, whole_logits_loss, tokens, weights)
    chunked = step_peak(model, chunked_loss_default, tokens, weights)
    assert chunked < whole / 2, (chunked / 2**20, whole / 2**20)


def chunked_loss_default(model: Any, tokens: mx.array, weights: mx.array) -> mx.array:
    return -(token_scores(model, tokens[:, :-1], tokens[:, 1:]).log_probs * weights).sum() / weights.sum()


@pytest.mark.parametrize("family", ["llama tied", "llama lm_head"])
def test_a_quantized_head_gives_the_whole_logits_loss_and_gradients(family: str) -> None:
    config = {**SHARED, **FAMILIES[family]}
    model_class, args_class = _get_classes(config)
    mx.random.seed(0)
    model = model_class(args_class.from_dict(config))
    nn.quantize(model, group_size=64, bits=4)
    model.freeze()
    linear_to_lora_layers(model, 2, {"rank": 4, "scale": 2.0, "dropout": 0.0})
    mx.eval(model.parameters())
    assert output_head(model) is not None
    tokens, weights = batch(24), mx.ones((2, 24))
    assert_same(
        value_and_grads(model, chunked_loss, tokens, weights),
        value_and_grads(model, whole_logits_loss, tokens, weights),
    )
