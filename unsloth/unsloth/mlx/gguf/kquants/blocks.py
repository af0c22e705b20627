# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Q2_K to Q6_K super-blocks of 256 weights, encoded as llama.cpp's reference quantizers (`quantize_row_q*_K_ref`,
which `llama_model_quantize` uses when no importance matrix is given) encode them, byte for byte.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict

import numpy as np

from .search import F32, GROUP_MAX_EPS, nearest_int, ordered_sum, q3_scale, qkx2_scale_min, qx_scale

QK_K = 256
BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
# Super-blocks per pass: small enough that the working arrays stay in the CPU's cache.
_CHUNK = 2048


def _groups(x: np.ndarray, size: int) -> np.ndarray:
    """(super-blocks, 256) -> (size, groups): element i of every group on row i."""
    return np.ascontiguousarray(x.reshape(-1, size).T)


def _ungroup(codes: np.ndarray, blocks: int) -> np.ndarray:
    return codes.T.reshape(blocks, QK_K)


def _half_bytes(values: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half (round to nearest even, as ggml's converter) as two little-endian bytes each."""
    return values.astype("<f2").view(np.uint8).reshape(-1, 2)


def _half_value(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).astype(F32)


def _first_peak(values: np.ndarray) -> np.ndarray:
    """Per row, the first value of largest magnitude, with its sign."""
    return values[np.arange(values.shape[0]), np.argmax(np.abs(values), axis=1)]


def _requantize(codes: np.ndarray, x: np.ndarray, step: np.ndarray, low: int, high: int, offset=None) -> np.ndarray:
    """Stored codes (offset by -low) recomputed from the rounded scales; a zero-scale group keeps its search codes."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = x if offset is None else x + offset[..., None]
        fresh = np.clip(nearest_int(shifted / step[..., None]), low, high) - low
    return np.where((step != 0)[..., None], fresh, codes)


def _pack_2bit(levels: np.ndarray) -> np.ndarray:
    """256 codes of 0..3 -> 64 bytes: byte l of each 128-half holds codes l, l+32, l+64, l+96."""
    quarters = levels.reshape(-1, 2, 4, 32).astype(np.uint8)
    packed = quarters[:, :, 0] | quarters[:, :, 1] << 2 | quarters[:, :, 2] << 4 | quarters[:, :, 3] << 6
    return packed.reshape(-1, 64)


def _pack_6bit_scales(scale_codes: np.ndarray, min_codes: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and eight 6-bit minimums in 12 bytes (the layout `get_scale_min_k4` reads)."""
    ls, lm = scale_codes.astype(np.uint8), min_codes.astype(np.uint8)
    packed = np.zeros((ls.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, :4] | (ls[:, 4:] >> 4) << 6
    packed[:, 4:8] = lm[:, :4] | (lm[:, 4:] >> 4) << 6
    packed[:, 8:12] = (ls[:, 4:] & 0xF) | (lm[:, 4:] & 0xF) << 4
    return packed


def _scale_min_type(x: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple:
    """Q4_K and Q5_K: eight 32-groups, each with a scale and a minimum, both stored as 6-bit codes."""
    blocks = x.shape[0]
    groups = _groups(x, 32)
    average = np.sqrt(ordered_sum(groups * groups) / F32(32))
    weights = average + np.abs(groups)
    scales, mins, codes = qkx2_scale_min(groups, weights, nmax, rmin, 0.1, nstep, False)
    scales, mins = scales.reshape(blocks, 8), mins.reshape(blocks, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0))
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0))
    scale_codes = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF)
    min_codes = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF)
    d, dmin = max_scale / F32(63), max_min / F32(63)
    step = _half_value(d)[:, None] * scale_codes.astype(F32)
    offset = _half_value(dmin)[:, None] * min_codes.astype(F32)
    levels = _requantize(
        _ungroup(codes, blocks).reshape(blocks, 8, 32), x.reshape(blocks, 8, 32), step, 0, nmax, offset
    ).reshape(blocks, QK_K)
    head = np.concatenate([_half_bytes(d), _half_bytes(dmin), _pack_6bit_scales(scale_codes, min_codes)], axis=1)
    return head, levels


def _q4_k(x: np.ndarray) -> np.ndarray:
    head, levels = _scale_min_type(x, 15, -1.0, 20)
    pairs = levels.reshape(-1, 4, 2, 32).astype(np.uint8)
    qs = (pairs[:, :, 0] | pairs[:, :, 1] << 4).reshape(-1, 128)
    return np.concatenate([head, qs], axis=1)


def _q5_k(x: np.ndarray) -> np.ndarray:
    head, levels = _scale_min_type(x, 31, -0.5, 15)
    pairs = levels.reshape(-1, 4, 2, 32).astype(np.uint8)
    high = (pairs > 15).astype(np.uint8)
    qh = np.zeros((pairs.shape[0], 32), dtype=np.uint8)
    for quarter in range(4):
        qh |= high[:, quarter, 0] << (2 * quarter) | high[:, quarter, 1] << (2 * quarter + 1)
    low = pairs & 0xF
    qs = (low[:, :, 0] | low[:, :, 1] << 4).reshape(-1, 128)
    return np.concatenate([head, qh, qs], axis=1)


def _q6_k(x: np.ndarray) -> np.ndarray:
    blocks = x.shape[0]
    scales, codes = qx_scale(_groups(x, 16), 32)
    scales = scales.reshape(blocks, 16)
    peak = _first_peak(scales)
    empty = np.abs(peak) < GROUP_MAX_EPS
    peak = np.where(empty, F32(1), peak)
    iscale = F32(-128) / peak
    d = F32(1) / iscale
    scale_codes = np.minimum(127, nearest_int(iscale[:, None] * scales))
    step = _half_value(d)[:, None] * scale_codes.astype(F32)
    levels = _requantize(_ungroup(codes, blocks).reshape(blocks, 16, 16), x.reshape(blocks, 16, 16), step, -32, 31)
    levels = levels.astype(np.uint8).reshape(blocks, 2, 4, 32)
    ql = np.stack(
        [levels[:, :, 0] & 0xF | (levels[:, :, 2] & 0xF) << 4, levels[:, :, 1] & 0xF | (levels[:, :, 3] & 0xF) << 4],
        axis=2,
    ).reshape(blocks, 128)
    qh = levels[:, :, 0] >> 4 | (levels[:, :, 1] >> 4) << 2 | (levels[:, :, 2] >> 4) << 4 | (levels[:, :, 3] >> 4) << 6
    encoded = np.concatenate(
        [ql, qh.reshape(blocks, 64), scale_codes.astype(np.int8).view(np.uint8), _half_bytes(d)], axis=1
    )
    encoded[empty] = 0
    return encoded


def _q3_k(x: np.ndarray) -> np.ndarray:
    blocks = x.shape[0]
    scales, codes = q3_scale(_groups(x, 16), 4)
    scales = scales.reshape(blocks, 16)
    peak = _first_peak(scales)
    present = peak != 0
    with np.errstate(divide="ignore"):
        iscale = np.where(present, F32(-32) / np.where(present, peak, F32(1)), F32(0))
    scale_codes = np.clip(nearest_int(iscale[:, None] * scales).astype(np.int8), -32, 31).astype(np.int32) + 32
    scale_codes[~present] = 0
    packed = np.zeros((blocks, 12), dtype=np.uint8)
    low = (scale_codes & 0xF).astype(np.uint8)
    packed[:, :8] = low[:, :8] | low[:, 8:] << 4
    high = (scale_codes >> 4).astype(np.uint8)
    for quarter in range(4):
        packed[:, 8:] |= high[:, 4 * quarter : 4 * quarter + 4] << (2 * quarter)
    with np.errstate(divide="ignore"):
        d = np.where(present, F32(1) / np.where(present, iscale, F32(1)), F32(0))
    step = _half_value(d)[:, None] * (scale_codes - 32).astype(F32)
    levels = _requantize(_ungroup(codes, blocks).reshape(blocks, 16, 16), x.reshape(blocks, 16, 16), step, -4, 3)
    levels = levels.reshape(blocks, QK_K)
    upper = levels.reshape(blocks, 8, 32) > 3
    hmask = np.zeros((blocks, 32), dtype=np.uint8)
    for bit in range(8):
        hmask |= upper[:, bit].astype(np.uint8) << bit
    levels = np.where(upper.reshape(blocks, QK_K), levels - 4, levels)
    return np.concatenate([hmask, _pack_2bit(levels), packed, _half_bytes(d)], axis=1)


def _q2_k(x: np.ndarray) -> np.ndarray:
    blocks = x.shape[0]
    groups = _groups(x, 16)
    scales, mins, codes = qkx2_scale_min(groups, np.abs(groups), 3, -0.5, 0.1, 15, True)
    scales, mins = scales.reshape(blocks, 16), mins.reshape(blocks, 16)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale_codes = np.where(max_scale[:, None] > 0, nearest_int((F32(15) / max_scale)[:, None] * scales), 0)
        min_codes = np.where(max_min[:, None] > 0, nearest_int((F32(15) / max_min)[:, None] * mins), 0)
    packed = ((scale_codes & 0xFF) | (min_codes << 4)).astype(np.uint8)
    d = np.where(max_scale > 0, max_scale / F32(15), F32(0))
    dmin = np.where(max_min > 0, max_min / F32(15), F32(0))
    step = _half_value(d)[:, None] * (packed & 0xF).astype(F32)
    offset = _half_value(dmin)[:, None] * (packed >> 4).astype(F32)
    levels = _requantize(
        _ungroup(codes, blocks).reshape(blocks, 16, 16), x.reshape(blocks, 16, 16), step, 0, 3, offset
    ).reshape(blocks, QK_K)
    return np.concatenate([packed, _pack_2bit(levels), _half_bytes(d), _half_bytes(dmin)], axis=1)


def _cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


_ENCODERS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
}


def quantize_k(data: np.ndarray, type_name: str) -> np.ndarray:
    """Encode `data` (last axis a multiple of 256) as `type_name`; returns uint8 rows, as `gguf.quants.quantize` does."""
    if type_name not in _ENCODERS:
        raise ValueError(f"type_name={type_name!r} is not a K-quant type; known: {', '.join(_ENCODERS)}")
    if data.shape[-1] % QK_K:
        raise ValueError(f"a {type_name} row must be a multiple of {QK_K} wide, not {data.shape[-1]}")
    flat = np.ascontiguousarray(data, dtype=F32).reshape(-1, QK_K)
    encode = _ENCODERS[type_name]
    out = np.empty((flat.shape[0], BLOCK_BYTES[type_name]), dtype=np.uint8)

    def encode_chunk(start: int) -> None:
        out[start : start + _CHUNK] = encode(flat[start : start + _CHUNK])

    starts = range(0, flat.shape[0], _CHUNK)
    if len(starts) == 1:
        encode_chunk(0)
    else:  # numpy lets go of the GIL inside each operation, so chunks on threads use every CPU, as llama.cpp does
        with ThreadPoolExecutor(min(len(starts), _cpus())) as pool:
            for chunk in [pool.submit(encode_chunk, start) for start in starts]:
                chunk.result()
    return out.reshape(*data.shape[:-1], data.shape[-1] // QK_K * BLOCK_BYTES[type_name])
