# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The scale searches of llama.cpp's reference K-quantizers, many groups at once.

Every array is laid out (group size, groups): row `i` holds element `i` of every group, so a sum along axis 0
adds the elements one after another in float32, the order llama.cpp's C loops add them in, and the chosen
codes come out bit for bit the same.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

F32 = np.float32
# llama.cpp treats a group whose largest magnitude is below this as all zero.
GROUP_MAX_EPS = F32(1e-15)


def nearest_int(values: np.ndarray) -> np.ndarray:
    """Round half to even, as llama.cpp's float trick (add 1.5 * 2**23) rounds."""
    return np.rint(values).astype(np.int32)


def ordered_sum(terms: np.ndarray) -> np.ndarray:
    """Sum along axis 0 element after element, in float32."""
    return np.add.reduce(terms, axis=0, dtype=F32)


def signed_peak(x: np.ndarray) -> np.ndarray:
    """Per group, the first element of largest magnitude, with its sign."""
    first = np.argmax(np.abs(x), axis=0)
    return x[first, np.arange(x.shape[1])]


def qx_scale(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric codes in [0, 2 nmax) and their scale, trying 19 scales around -nmax / peak (`make_qx_quants`, x*x weights)."""
    peak = signed_peak(x)
    zero = np.abs(peak) < GROUP_MAX_EPS
    peak = np.where(zero, F32(1), peak)
    weight = x * x
    wx = weight * x

    def codes_for(iscale: np.ndarray) -> np.ndarray:
        return np.clip(nearest_int(iscale * x), -nmax, nmax - 1).astype(F32)

    def sums(levels: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        return ordered_sum(wx * levels), ordered_sum(weight * levels * levels)

    levels = codes_for(-F32(nmax) / peak)
    sumlx, suml2 = sums(levels)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(F32)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        trial = codes_for(-(F32(nmax) + F32(0.1) * F32(step)) / peak)
        sumlx, suml2 = sums(trial)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        if better.any():
            levels = np.where(better, trial, levels)
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(better, sumlx / suml2, scale).astype(F32)
            best = np.where(better, scale * sumlx, best).astype(F32)
    codes = levels.astype(np.int32) + nmax
    codes[:, zero] = 0
    return np.where(zero, F32(0), scale).astype(F32), codes


def q3_scale(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric codes refined one element at a time for five rounds (`make_q3_quants` with do_rmse)."""
    peak = signed_peak(x)
    zero = np.abs(peak) < GROUP_MAX_EPS
    peak = np.where(zero, F32(1), peak)
    levels = np.clip(nearest_int((-F32(nmax) / peak) * x), -nmax, nmax - 1).astype(F32)
    weight = x * x
    wx = weight * x
    sumlx = ordered_sum(wx * levels)
    suml2 = ordered_sum(weight * levels * levels)
    for _ in range(5):
        changed = np.zeros(x.shape[1], dtype=bool)
        for i in range(x.shape[0]):
            slx = sumlx - wx[i] * levels[i]
            sl2 = suml2 - weight[i] * levels[i] * levels[i]
            with np.errstate(divide="ignore", invalid="ignore"):
                proposal = np.clip(nearest_int(np.where(slx > 0, x[i] * sl2 / slx, F32(0))), -nmax, nmax - 1)
            proposal = proposal.astype(F32)
            slx = slx + wx[i] * proposal
            sl2 = sl2 + weight[i] * proposal * proposal
            accept = (sumlx - wx[i] * levels[i] > 0) & (proposal != levels[i])
            accept &= (sl2 > 0) & (slx * slx * suml2 > sumlx * sumlx * sl2)
            levels[i] = np.where(accept, proposal, levels[i])
            sumlx = np.where(accept, slx, sumlx)
            suml2 = np.where(accept, sl2, suml2)
            changed |= accept
        if not changed.any():
            break
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0)).astype(F32)
    codes = levels.astype(np.int32) + nmax
    codes[:, zero] = 0
    return np.where(zero, F32(0), scale).astype(F32), codes


def qkx2_scale_min(
    x: np.ndarray, weights: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int, use_mad: bool
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric codes in [0, nmax], a scale and a (negated) minimum, fitted by weighted least squares over
    `nstep + 1` trial scales (`make_qkx2_quants`). Returns (scale, minimum to subtract, codes)."""
    low = np.minimum(x.min(axis=0), F32(0))
    high = x.max(axis=0)
    flat = high == low
    span = np.where(flat, F32(1), high - low)
    sum_w = ordered_sum(weights)
    sum_x = ordered_sum(weights * x)
    shifted = x - low

    def error_of(scale: np.ndarray, offset: np.ndarray, levels: np.ndarray) -> np.ndarray:
        diff = scale * levels + offset - x
        return ordered_sum(weights * (np.abs(diff) if use_mad else diff * diff))

    iscale = F32(nmax) / span
    scale = F32(1) / iscale
    levels = np.clip(nearest_int(iscale * shifted), 0, nmax).astype(F32)
    best_error = error_of(scale, low, levels)
    offset = low
    for step in range(nstep + 1):
        # llama.cpp measures each trial from the best minimum so far, not the first one.
        with np.errstate(divide="ignore", invalid="ignore"):
            trial_iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / np.where(flat, F32(1), high - offset)
            trial = np.clip(nearest_int(trial_iscale * (x - offset)), 0, nmax).astype(F32)
        wl = weights * trial
        sum_l = ordered_sum(wl)
        sum_l2 = ordered_sum(wl * trial)
        sum_xl = ordered_sum(wl * x)
        det = sum_w * sum_l2 - sum_l * sum_l
        with np.errstate(divide="ignore", invalid="ignore"):
            trial_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            trial_offset = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = trial_offset > 0
            trial_offset = np.where(positive, F32(0), trial_offset)
            trial_scale = np.where(positive, sum_xl / sum_l2, trial_scale)
            trial_error = error_of(trial_scale, trial_offset, trial)
        better = (det > 0) & (trial_error < best_error)
        levels = np.where(better, trial, levels)
        best_error = np.where(better, trial_error, best_error)
        scale = np.where(better, trial_scale, scale)
        offset = np.where(better, trial_offset, offset)
    codes = levels.astype(np.int32)
    codes[:, flat] = 0
    return np.where(flat, F32(0), scale).astype(F32), np.where(flat, -low, -offset).astype(F32), codes
