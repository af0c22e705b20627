"""K-quant blocks and mixes written in numpy, checked with no llama.cpp.

Every expected value here is derived by hand from llama.cpp's reference quantizers (`ggml-quants.c`) and type
choice (`llama-quant.cpp`), and every block is decoded by the `gguf` package's own dequantizers, so a quantizer
one step off (a scale swapped between groups, a code rounded the other way) fails. Byte identity with llama.cpp
itself is checked in tests/mlx_api/with_llama_cpp/test_kquants_llama_cpp.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from unsloth.mlx.gguf.kquants.blocks import quantize_k
from unsloth.mlx.gguf.kquants.mix import ModelShape, choose_types


def _decode(encoded: np.ndarray, type_name: str) -> np.ndarray:
    import gguf

    return gguf.quants.dequantize(encoded, gguf.GGMLQuantizationType[type_name])


# Symmetric groups of 16: each group's largest magnitude is its lowest code, so the first trial scale of
# make_qx_quants / make_q3_quants is exactly the grid step and no other trial fits better (Cauchy-Schwarz).
Q6_LEVELS = [-32, 31, -17, 16, -5, 4, 0, 1, -1, 2, -2, 9, -9, 25, -25, 30]
Q3_LEVELS = [-4, 3, -3, 2, -2, 1, -1, 0, 3, -3, 2, -2, 1, -1, 0, 3]
# Group steps as multiples of the super-block's step: k_j / 128 for Q6_K (stored as the int8 -k_j, d = -2**-13),
# k_j / 32 for Q3_K (stored as 32 - k_j in 6 bits, d = -2**-10).
Q6_MULTIPLES = [128, 64, 32, 96, 16, 48, 112, 80, 128, 127, 1, 2, 65, 33, 17, 9]
Q3_MULTIPLES = [32, 16, 8, 24, 4, 12, 28, 20, 32, 31, 1, 2, 17, 9, 5, 3]


def test_q6_k_grid_block_is_exact_with_the_hand_derived_scales():
    steps = np.array(Q6_MULTIPLES, dtype=np.float32) * np.float32(2**-13)
    x = (steps[:, None] * np.array(Q6_LEVELS, dtype=np.float32)[None, :]).reshape(1, 256)
    encoded = quantize_k(x, "Q6_K")
    assert encoded.shape == (1, 210)
    assert np.array_equal(_decode(encoded, "Q6_K"), x)
    # ql (128 bytes), qh (64), then the 16 int8 group scales and d as IEEE half.
    assert encoded[0, 192:208].view(np.int8).tolist() == [-k for k in Q6_MULTIPLES]
    assert encoded[0, 208:210].view("<f2")[0] == np.float16(-(2**-13))


def test_q6_k_rounds_halves_to_even_as_nearest_int_does():
    # Every group has step 2**-6; in the odd groups four small values sit on half steps, while the large ones
    # (-32, 31, 30, 25, -25) keep each group's fitted scale at the grid step.
    halves = list(Q6_LEVELS)
    halves[5], halves[7], halves[8], halves[9] = 2.5, -2.5, 3.5, -3.5
    x = np.array([Q6_LEVELS, halves] * 8, dtype=np.float32).reshape(1, 256) * np.float32(2**-6)
    decoded = _decode(quantize_k(x, "Q6_K"), "Q6_K").reshape(16, 16) / np.float32(2**-6)
    # Round half to even: 2.5 -> 2, -2.5 -> -2, 3.5 -> 4, -3.5 -> -4 (away from zero would give 3 and -3 first,
    # floor 2, -3, 3, -4, truncation 2, -2, 3, -3).
    assert decoded[1, [5, 7, 8, 9]].tolist() == [2, -2, 4, -4]
    assert np.array_equal(decoded[0], Q6_LEVELS)


def test_q3_k_grid_block_is_exact():
    steps = np.array(Q3_MULTIPLES, dtype=np.float32) * np.float32(2**-10)
    x = (steps[:, None] * np.array(Q3_LEVELS, dtype=np.float32)[None, :]).reshape(1, 256)
    encoded = quantize_k(x, "Q3_K")
    assert encoded.shape == (1, 110)
    assert np.array_equal(_decode(encoded, "Q3_K"), x)
    assert encoded[0, 108:110].view("<f2")[0] == np.float16(-(2**-10))


def _asymmetric_grid(size: int, top: int, steps: list, offsets: list) -> np.ndarray:
    """Groups c_j * (l - o_j) holding every code 0..top: make_qkx2_quants fits them with error zero first."""
    codes = np.resize(np.arange(top + 1, dtype=np.float32), size)
    groups = [np.float32(step) * (codes - np.float32(offset)) for step, offset in zip(steps, offsets)]
    return np.concatenate(groups).reshape(1, 256)


@pytest.mark.parametrize(
    ("type_name", "size", "top", "steps", "offsets"),
    [
        # Q4_K: 6-bit scales 63 and 63 / 3 = 21, 6-bit minimums 63 * o_j / 15 and 21 * o_j / 15: all whole.
        ("Q4_K", 32, 15, [2**-6, 2**-6 / 3] * 4, [0, 5, 10, 15, 15, 10, 5, 0]),
        ("Q5_K", 32, 31, [2**-6] * 8, [0, 8, 16, 31, 31, 16, 8, 0]),
        # Q2_K: 4-bit scales 15 and round(7.5) = 8, minimums 15 * o_j / 3.
        ("Q2_K", 16, 3, [2**-4, 2**-5] * 8, [0, 1, 2, 3] * 4),
    ],
)
def test_scale_and_minimum_types_put_each_weight_on_its_own_code(type_name, size, top, steps, offsets):
    x = _asymmetric_grid(size, top, steps, offsets)
    decoded = _decode(quantize_k(x, type_name), type_name)
    error = np.abs(decoded - x).reshape(-1, size) / np.array(steps, dtype=np.float32)[:, None]
    # The stored scales and minimums are rounded to 6 (or 4) bits and half precision, so each weight comes back
    # within a third of its group's step; a code one step off, or another group's scale, is a whole step away.
    assert error.max() < 0.3, error.max(axis=1)


@pytest.mark.parametrize(
    ("type_name", "bound"), [("Q2_K", 0.35), ("Q3_K", 0.2), ("Q4_K", 0.09), ("Q5_K", 0.045), ("Q6_K", 0.022)]
)
def test_random_rows_come_back_within_each_types_error(type_name, bound):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 512)) * 0.02).astype(np.float32)
    encoded = quantize_k(x, type_name)
    decoded = _decode(encoded, type_name)
    relative = np.sqrt(np.mean((decoded - x) ** 2) / np.mean(x**2))
    assert relative < bound  # about half the coarser type's error per added bit
    assert encoded.shape == (16, 2 * {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[type_name])


def test_all_zero_blocks_stay_zero():
    for type_name in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        assert not _decode(quantize_k(np.zeros((2, 256), dtype=np.float32), type_name), type_name).any()


def test_a_row_that_is_not_whole_super_blocks_is_refused_by_name():
    with pytest.raises(ValueError, match="Q4_K row must be a multiple of 256 wide, not 96"):
        quantize_k(np.zeros((2, 96), dtype=np.float32), "Q4_K")
    with pytest.raises(ValueError, match="type_name='Q7_K'"):
        quantize_k(np.zeros((2, 256), dtype=np.float32), "Q7_K")


def _llama_shapes(layers: int, width: int = 256, tied: bool = False) -> dict:
    shapes = {"token_embd.weight": (512, width), "output_norm.weight": (width,)}
    if not tied:
        shapes["output.weight"] = (512, width)
    for layer in range(layers):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            shapes[f"blk.{layer}.{part}.weight"] = (width, width)
        shapes[f"blk.{layer}.ffn_down.weight"] = (width, 2 * width)
        shapes[f"blk.{layer}.attn_norm.weight"] = (width,)
    return shapes


LLAMA_8 = ModelShape("llama", layers=8, heads=8, kv_heads=2)


def test_q4_k_m_gives_more_bits_to_the_layers_llama_cpp_names():
    types = choose_types("q4_k_m", _llama_shapes(8), LLAMA_8)
    # use_more_bits(i, 8): i < 1, i >= 7, or (i - 1) % 3 == 2 -> layers 0, 3, 6, 7.
    for layer in range(8):
        wide = "Q6_K" if layer in (0, 3, 6, 7) else "Q4_K"
        assert types[f"blk.{layer}.attn_v.weight"] == wide
        assert types[f"blk.{layer}.ffn_down.weight"] == wide
        assert types[f"blk.{layer}.attn_q.weight"] == types[f"blk.{layer}.ffn_up.weight"] == "Q4_K"
        assert types[f"blk.{layer}.attn_norm.weight"] == "F32"
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    # A model whose embedding is its output matrix gets the output's type for it.
    assert choose_types("q4_k_m", _llama_shapes(8, tied=True), LLAMA_8)["token_embd.weight"] == "Q6_K"


def test_the_other_mixes_follow_llama_cpps_rules():
    shapes = _llama_shapes(8)
    q3_k_m = choose_types("q3_k_m", shapes, LLAMA_8)
    assert [q3_k_m[f"blk.{layer}.attn_v.weight"] for layer in range(3)] == ["Q5_K", "Q5_K", "Q4_K"]
    assert q3_k_m["blk.0.attn_output.weight"] == q3_k_m["blk.0.ffn_down.weight"] == "Q4_K"
    assert q3_k_m["blk.0.attn_q.weight"] == "Q3_K"
    q2_k = choose_types("q2_k", shapes, LLAMA_8)  # 8 heads share 2 value heads: n_gqa 4 gets Q4_K values
    assert (q2_k["blk.5.attn_v.weight"], q2_k["blk.5.ffn_down.weight"], q2_k["blk.5.attn_q.weight"]) == (
        "Q4_K",
        "Q3_K",
        "Q2_K",
    )
    q2_k_mha = choose_types("q2_k", shapes, ModelShape("llama", layers=8, heads=8, kv_heads=8))
    assert q2_k_mha["blk.5.attn_v.weight"] == "Q3_K"
    q4_k_s = choose_types("q4_k_s", shapes, LLAMA_8)
    assert [q4_k_s[f"blk.{layer}.attn_v.weight"] for layer in (3, 4)] == ["Q5_K", "Q4_K"]
    assert [q4_k_s[f"blk.{layer}.ffn_down.weight"] for layer in (0, 1)] == ["Q5_K", "Q4_K"]
    assert choose_types("q3_k_l", shapes, LLAMA_8)["blk.4.attn_output.weight"] == "Q5_K"
    assert choose_types("q5_k_m", shapes, LLAMA_8)["blk.6.ffn_down.weight"] == "Q6_K"
    assert set(choose_types("q6_k", shapes, LLAMA_8).values()) == {"Q6_K", "F32"}


def test_rows_too_narrow_for_super_blocks_fall_back_as_llama_cpp_does():
    shapes = _llama_shapes(2, width=96)
    shapes["blk.0.ffn_down.weight"] = (96, 200)  # 200 is not a multiple of 32 either: F16
    shape = ModelShape("llama", layers=2, heads=4, kv_heads=2)
    expected = {"q4_k_m": "Q5_0", "q5_k_s": "Q5_1", "q3_k_s": "Q4_0", "q2_k": "Q4_0", "q6_k": "Q8_0"}
    for method, fallback in expected.items():
        types = choose_types(method, shapes, shape)
        assert types["blk.1.attn_q.weight"] == fallback, method
        assert types["blk.0.ffn_down.weight"] == "F16"
        assert types["output.weight"] == "Q8_0"  # a narrow output matrix is Q8_0 in every mix


def test_an_unknown_mix_is_refused_by_name():
    with pytest.raises(ValueError, match="quantization_method='q4_k_x'"):
        choose_types("q4_k_x", _llama_shapes(1), LLAMA_8)


def test_a_folder_that_cannot_hold_files_is_named_before_any_work(load_public, tmp_path):
    model, tokenizer = load_public()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    with pytest.raises(OSError, match=rf"save_directory='{blocker / 'gguf'}' cannot be written"):
        model.save_pretrained_gguf(str(blocker / "gguf"), tokenizer, quantization_method="q4_k_m")
    assert sorted(item.name for item in tmp_path.iterdir()) == ["a-file"]


def test_a_k_quant_file_that_fails_while_written_leaves_nothing_behind(load_public, tmp_path, monkeypatch):
    import os

    model, tokenizer = load_public()

    def disk_full(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)  # the operating system refuses the last step
    with pytest.raises(OSError, match="No space left"):
        model.save_pretrained_gguf(str(tmp_path / "gguf"), tokenizer, quantization_method="q4_k_m")
    assert not [item.name for item in (tmp_path / "gguf").iterdir() if ".gguf" in item.name]


def test_experts_take_their_layer_from_the_name_and_eight_experts_keep_q8_0_attention():
    shapes = {"token_embd.weight": (512, 256), "output.weight": (512, 256)}
    for layer in range(8):
        shapes[f"blk.{layer}.attn_k.weight"] = shapes[f"blk.{layer}.attn_v.weight"] = (256, 256)
        shapes[f"blk.{layer}.attn_output.weight"] = (256, 256)
        shapes[f"blk.{layer}.ffn_gate_inp.weight"] = (8, 256)
        shapes[f"blk.{layer}.ffn_down_exps.weight"] = (8, 256, 512)
        shapes[f"blk.{layer}.ffn_down_shexp.weight"] = (256, 512)
    types = choose_types("q4_k_m", shapes, ModelShape("llama", layers=8, heads=8, kv_heads=2, experts=8))
    # Two down projections per layer: a running count would reach 8 at layer 4 and give it Q6_K; llama.cpp reads
    # "blk.N." for a model with experts, so use_more_bits picks layers 0, 3, 6 and 7.
    assert [types[f"blk.{layer}.ffn_down_exps.weight"] for layer in range(8)] == [
        "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"
    ]  # fmt: skip
    assert types["blk.1.ffn_down_shexp.weight"] == "Q4_K"
    assert types["blk.2.attn_v.weight"] == types["blk.2.attn_k.weight"] == "Q8_0"
    assert types["blk.2.attn_output.weight"] == "Q5_K"
    assert types["blk.0.ffn_gate_inp.weight"] == "F32"  # the router stays as it is


def test_a_tensor_of_many_chunks_encodes_as_its_rows_do_one_by_one():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4500, 256)) * 0.02).astype(np.float32)  # more super-blocks than one pass takes
    whole = quantize_k(x, "Q4_K")
    assert np.array_equal(whole, np.concatenate([quantize_k(x[row : row + 1], "Q4_K") for row in range(4500)]))


def test_mixes_of_one_export_encode_each_tensor_and_type_once_and_keep_it_only_until_its_last_use():
    from unsloth.mlx.gguf.kquants.writer import EncodedOnce, encode

    rows = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    # Three mixes: the output is Q6_K in all three, the attention Q4_K in two and Q5_K in one.
    plans = [
        {"output.weight": "Q6_K", "blk.0.attn_q.weight": "Q4_K"},
        {"output.weight": "Q6_K", "blk.0.attn_q.weight": "Q4_K"},
        {"output.weight": "Q6_K", "blk.0.attn_q.weight": "Q5_K"},
    ]
    shared = EncodedOnce(plans)
    first = [shared.encode(name, rows, kind) for name, kind in plans[0].items()]
    second = [shared.encode(name, rows, kind) for name, kind in plans[1].items()]
    assert all(again is encoded for again, encoded in zip(second, first))  # reused, not encoded again
    third = shared.encode("output.weight", rows, "Q6_K")
    assert third is first[0]
    np.testing.assert_array_equal(shared.encode("blk.0.attn_q.weight", rows, "Q5_K"), encode(rows, "Q5_K"))
    # Past its last planned use nothing is held: a further call encodes afresh.
    assert shared.encode("output.weight", rows, "Q6_K") is not first[0]
    np.testing.assert_array_equal(first[0], encode(rows, "Q6_K"))
