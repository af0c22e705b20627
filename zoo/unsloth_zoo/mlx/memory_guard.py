# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""Stop a run that will not fit before its first optimizer step, naming the settings that would fit.

Before the first step the trainer runs one real forward and backward pass on its longest micro-batch and reads
MLX's peak memory. Where passing the budget gets the process killed (on CPU, the memory of its cgroup or host) a
pass on half of it comes first, and when that half's peak, scaled up, is clearly over the budget the full pass is
not run: the kernel's OOM killer would end the process inside it, before any message. When the peak passes the budget (the limit set with `mx.set_memory_limit`, else Metal's
recommended working set, else on CPU the memory this process may use, cgroups included) the run stops with
`MemoryBudgetExceeded` instead of swapping for minutes and dying in Metal or the OOM killer.
`UNSLOTH_MLX_MEMORY_GUARD=0` turns the check off.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ..dataset_num_proc import _available_memory
from .backward_order import evaluate_gradients
from .loss import masked_cross_entropy

logger = logging.getLogger(__name__)

GUARD_ENV_VAR = "UNSLOTH_MLX_MEMORY_GUARD"
_OFF_WORDS = frozenset({"0", "off", "false", "no"})
# MLX's own default limit on Metal is 1.5 recommended working sets, capped at 95% of the machine's memory.
_METAL_DEFAULT_FACTOR = 1.5
_METAL_MEMORY_CAP = 0.95
# Names the config may give gradient checkpointing; the first one it has is the one suggested.
CHECKPOINTING_FIELDS = ("gradient_checkpointing", "use_gradient_checkpointing")
MIB = 2**20
# A length scaled to the room left aims a little under it, since activations grow faster than the length.
SPARE = 0.9
# Passes measured, at most, in search of each smaller setting that fits.
PROBES = 3
# A pass whose half, scaled up, passes the budget by this factor is not run: its estimate stands in for it. Half
# the rows scaled up overstates a pass by their fixed part only (2% on the tiny llama at 8 x 1,024 tokens).
CLEAR_OVERFLOW = 1.05
# One row shorter than this is measured whole: too short to need the half-length pass first.
SCOUT_MIN_WIDTH = 256


class MemoryBudgetExceeded(MemoryError):
    """The measured first step needs more memory than MLX may use here; the message names what would fit."""

    def __init__(self, message: str, measurement: "Measurement", budget: "Budget") -> None:
        super().__init__(message)
        self.measurement = measurement
        self.budget = budget


class Budget(NamedTuple):
    limit: int
    source: str
    # True when passing it gets the process killed (a cgroup's or the host's memory), not swapped or slowed.
    kills: bool = False


class Measurement(NamedTuple):
    """Bytes held before the pass (weights, optimizer state, accumulated gradients) and the pass's peak."""

    resident: int
    peak: int
    batch_size: int
    length: int
    gradient_bytes: int
    # (rows, tokens) of the smaller pass this peak was scaled from, when the pass itself was not run.
    scaled_from: Optional[Tuple[int, int]] = None

    @property
    def activations(self) -> int:
        return max(self.peak - self.resident, 1)


def guard_enabled() -> bool:
    return os.environ.get(GUARD_ENV_VAR, "").strip().lower() not in _OFF_WORDS


def _gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / MIB:.1f} MiB"


def choose_budget(
    limit: int,
    recommended: Optional[int],
    memory_size: Optional[int],
    process_memory: Optional[int],
    process_source: str,
    local_ranks: int = 1,
) -> Optional[Budget]:
    """The budget from MLX's limit and the platform's answers; None when nothing bounds this process.

    `recommended` is Metal's working set (None on CPU); `process_memory` what this process may hold on CPU.
    Ranks sharing a host share its memory, so each gets its part of a platform budget.
    """
    if recommended:
        default = min(_METAL_DEFAULT_FACTOR * recommended, _METAL_MEMORY_CAP * (memory_size or math.inf))
        # A limit other than MLX's default was set by the user, who decides, higher or lower.
        if limit and abs(limit - default) > MIB:
            return Budget(limit, "the limit set with mx.set_memory_limit")
        share = recommended // max(local_ranks, 1)
        return Budget(share, _shared("Metal's recommended working set", local_ranks))
    if process_memory is None:
        return Budget(limit, "mx.get_memory_limit()") if limit else None
    share = process_memory // max(local_ranks, 1)
    # On CPU MLX does not enforce its limit, so a limit below what the process may use is the user's bound.
    if limit and limit < share:
        return Budget(limit, "the limit set with mx.set_memory_limit")
    return Budget(share, _shared(f"the memory this process may use ({process_source})", local_ranks), kills=True)


def _shared(source: str, local_ranks: int) -> str:
    return source if local_ranks <= 1 else f"{source}, shared by {local_ranks} ranks on this host"


def memory_budget(local_ranks: int = 1) -> Optional[Budget]:
    """What MLX may use in this process, read from MLX and, on CPU, from the host and its cgroups."""
    limit = int(mx.get_memory_limit())
    if mx.metal.is_available():
        info = mx.device_info()
        recommended = info.get("max_recommended_working_set_size")
        memory_size = info.get("memory_size")
        return choose_budget(limit, int(recommended or 0) or None, memory_size, None, "", local_ranks)
    available, source, _ = _available_memory()
    # Arrays MLX already holds are resident, so they count towards what this process may use, not against it.
    process = None if available is None else available + int(mx.get_active_memory())
    return choose_budget(limit, None, None, process, source, local_ranks)


def _config_checkpointing_field(args: Any) -> Optional[str]:
    return next((name for name in CHECKPOINTING_FIELDS if hasattr(args, name)), None)


def _layer_count(model: Any) -> int:
    layers = getattr(getattr(model, "model", model), "layers", None) or getattr(model, "layers", None)
    return len(layers) if layers is not None else 0


Probe = Callable[[int, int, bool], Measurement]


def checkpointing_setting(measurement: Measurement, budget: int, field: Optional[str], layers: int) -> Optional[str]:
    """Gradient checkpointing keeps about one layer's activations of the model's N: an estimate, said as one."""
    if not field or layers <= 1:
        return None
    estimate = measurement.resident + measurement.activations * 2 // layers
    return f"{field}=True (estimated {_gib(estimate)})" if estimate <= budget else None


def _row_counts_to_try(measurement: Measurement, budget: int, accumulation: int) -> List[int]:
    """Smaller batch sizes dividing the step's rows (so the step and its loss stay the same), likeliest first."""
    batch, step_rows = measurement.batch_size, measurement.batch_size * accumulation
    per_row = measurement.activations / batch
    estimate = int((budget - measurement.resident - measurement.gradient_bytes) // per_row)
    divisors = [count for count in range(batch - 1, 0, -1) if step_rows % count == 0]
    return [count for count in divisors if count <= max(estimate, 1)][:PROBES]


def fitting_batch(probe: Probe, measurement: Measurement, budget: int, accumulation: int) -> Optional[str]:
    """The largest smaller batch size whose measured pass fits, with the accumulation that keeps the step's rows."""
    step_rows = measurement.batch_size * accumulation
    for rows in _row_counts_to_try(measurement, budget, accumulation):
        measured = probe(rows, measurement.length, step_rows // rows > 1)
        if measured.peak <= budget:
            return (
                f"per_device_train_batch_size={rows} with gradient_accumulation_steps={step_rows // rows}, the same "
                f"{step_rows} rows a step (measured {_gib(measured.peak)})"
            )
    return None


def fitting_length(probe: Probe, measurement: Measurement, budget: int, accumulation: int) -> Optional[str]:
    """A shorter `max_seq_length` whose measured pass fits, found by scaling the length to the room left."""
    measured, width = measurement, measurement.length
    for _ in range(PROBES):
        room = budget - measured.resident
        width = min(int(width * room / measured.activations * SPARE), width - 1)
        if room <= 0 or width < 2:
            return None
        measured = probe(measurement.batch_size, width, accumulation > 1)
        if measured.peak <= budget:
            return (
                f"max_seq_length={width}, cutting rows now {measurement.length} tokens long "
                f"(measured {_gib(measured.peak)})"
            )
    return None


def explain_overflow(measurement: Measurement, budget: Budget, settings: List[str], checkpointing: bool) -> str:
    """The one message a run that does not fit stops with."""
    shape = f"its longest micro-batch, {measurement.batch_size} rows of {measurement.length} tokens"
    if measurement.scaled_from is None:
        how = f"measured: a forward and backward pass on {shape}"
    else:
        rows, tokens = measurement.scaled_from
        how = (
            f"estimated: a forward and backward pass on {rows} rows of {tokens} tokens, scaled to {shape}, which "
            "was not run since it would not fit"
        )
    head = (
        f"This run needs {_gib(measurement.peak)} at its first step ({how}; {_gib(measurement.resident)} of it "
        f"weights and optimizer state) and MLX may use {_gib(budget.limit)} here ({budget.source}), so it would "
        "swap and fail minutes in, or meet the OOM killer."
    )
    if settings:
        body = f" Settings that fit: {'; or '.join(settings)}."
    elif measurement.resident >= budget.limit:
        body = (
            f" Weights and optimizer state alone take {_gib(measurement.resident)}: no batch size or length fits; "
            "load the model quantized (load_in_4bit=True) or pick a smaller one."
        )
    else:
        body = " No smaller batch size or length measured here fits; load the model quantized or pick a smaller one."
    if checkpointing:
        body += " Gradient checkpointing is already on."
    return head + body + f" {GUARD_ENV_VAR}=0 turns this check off."


def longest_batch_shape(lengths: np.ndarray, batch_size: int, pad_multiple: Optional[int]) -> Tuple[int, int]:
    """(rows, width) of the micro-batch that needs the most memory: the longest rows, padded as the trainer pads."""
    rows = min(batch_size, len(lengths))
    width = int(max(np.max(lengths, initial=1), 1))
    if pad_multiple:
        width = 1 + -(-(width - 1) // pad_multiple) * pad_multiple
    return rows, width


def trainer_probe(trainer: Any) -> Probe:
    """Measures a real forward and backward pass of the causal-LM loss at a given shape, after the resident state
    (weights, optimizer state) is materialised.

    The pass is the base loss, not the trainer's own step function, so a subclass's step (which may record
    metrics or read masks) sees nothing of it; token ids do not change memory, so the batch is all padding.
    """
    model = trainer.model
    gradient_bytes = sum(array.nbytes for _, array in tree_flatten(model.trainable_parameters()))
    loss_and_grad = nn.value_and_grad(model, masked_cross_entropy)

    def forward_backward(tokens: mx.array, lengths: mx.array) -> Any:
        return loss_and_grad(model, tokens, lengths)

    if trainer._use_compile():
        # Compiled as the step is: compiled and plain passes hold different amounts, and the step's is the one asked.
        captured = [model.state, mx.random.state]
        forward_backward = mx.compile(forward_backward, inputs=captured, outputs=captured)

    def probe(rows: int, width: int, accumulating: bool) -> Measurement:
        tokens = mx.full((rows, width), trainer.pad_id, dtype=mx.int32)
        lengths = mx.full((rows,), width, dtype=mx.int32)
        # Arrays nothing references any more would otherwise count as resident, or be freed during the pass.
        gc.collect()
        mx.eval(model.parameters(), trainer.optimizer.state, tokens, lengths)
        # Accumulating steps hold a running sum of the gradients beside each micro-batch's own.
        held = gradient_bytes if accumulating else 0
        resident = int(mx.get_active_memory()) + held
        mx.reset_peak_memory()
        (loss, count), grads = forward_backward(tokens, lengths)
        evaluate_gradients(grads, loss, count)
        peak = int(mx.get_peak_memory()) + held
        return Measurement(resident, peak, rows, width, gradient_bytes)

    return probe


def scouted(probe: Probe, budget: int) -> Probe:
    """`probe`, measuring half the batch (or half of one long row) first, and returning that half's peak scaled up
    instead of running a pass it shows to be clearly over the budget. Activations grow in proportion to rows, and
    with tokens at least in proportion, so the scaled peak overstates the pass by little if at all."""

    def measure(rows: int, width: int, accumulating: bool) -> Measurement:
        if rows >= 2:
            small_rows, small_width = rows // 2, width
        elif width >= SCOUT_MIN_WIDTH:
            small_rows, small_width = 1, width // 2
        else:
            return probe(rows, width, accumulating)
        small = probe(small_rows, small_width, accumulating)
        scale = (rows * width) / (small_rows * small_width)
        estimate = small.resident + int(small.activations * scale)
        if estimate > CLEAR_OVERFLOW * budget:
            return Measurement(
                small.resident, estimate, rows, width, small.gradient_bytes, scaled_from=(small_rows, small_width)
            )
        return probe(rows, width, accumulating)

    return measure


def check_memory_fits(trainer: Any) -> None:
    """Raise `MemoryBudgetExceeded` on every rank when this rank's first step would not fit; otherwise nothing."""
    # A vision model's step needs its images, which the probe's text-only batch cannot give, so it is not measured.
    # An embedding trainer's step is no causal-LM pass either, so it says so (`probes_causal_lm = False`).
    if not guard_enabled() or hasattr(trainer.model, "vision_tower") or not getattr(trainer, "probes_causal_lm", True):
        return
    world = trainer.world
    failure: Optional[BaseException] = None
    try:
        budget = memory_budget(world.local_size)
        if budget is not None:
            failure = _overflow(trainer, budget)
    except MemoryError as error:
        failure = error
    except Exception as error:
        # A model the plain causal-LM pass cannot call (a vision model wants its images) is not measured here.
        logger.warning(
            "The memory check before the first step was skipped: a plain forward pass of this %s failed (%s: %s).",
            type(trainer.model).__name__,
            type(error).__name__,
            error,
        )
    if world.is_distributed:
        world.exchange_status("the memory check before the first step", failure, [0])
    if failure is not None:
        raise failure


def _overflow(trainer: Any, budget: Budget) -> Optional[MemoryBudgetExceeded]:
    args = trainer.args
    probe = scouted(trainer_probe(trainer), budget.limit) if budget.kills else trainer_probe(trainer)
    rows, width = longest_batch_shape(
        trainer.train_rows.lengths, args.per_device_train_batch_size, trainer._pad_multiple
    )
    accumulation = args.gradient_accumulation_steps
    measurement = probe(rows, width, accumulation > 1)
    if measurement.peak <= budget.limit:
        return None
    field = _config_checkpointing_field(args)
    checkpointing = bool(field and getattr(args, field))
    found = [
        checkpointing_setting(measurement, budget.limit, None if checkpointing else field, _layer_count(trainer.model)),
        fitting_batch(probe, measurement, budget.limit, accumulation),
        fitting_length(probe, measurement, budget.limit, accumulation),
    ]
    settings = [setting for setting in found if setting]
    return MemoryBudgetExceeded(explain_overflow(measurement, budget, settings, checkpointing), measurement, budget)
