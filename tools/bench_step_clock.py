"""The clock every MLX benchmark times training steps with: a timestamp at the end of each step, from whichever
trainer's hook calls it."""

from __future__ import annotations

import time
from typing import Any, List


class StepClock:
    """Timestamps at the end of every optimizer step; a callback for our trainer, mlx-lm's and its derivatives'."""

    def __init__(self) -> None:
        self.stamps: List[float] = []

    def tick(self, *args: Any, **kwargs: Any) -> None:
        self.stamps.append(time.perf_counter())

    on_step_end = tick  # a Hugging Face-style callback for our trainer
    # mlx-lm's TrainingCallback (and mlx-vlm's, mlx-lm-lora's, mlx-embeddings-lora's), every steps_per_report steps.
    on_train_loss_report = tick

    def on_val_loss_report(self, info: Any) -> None:
        pass

    def seconds_after(self, start: int) -> float:
        """Seconds from the end of step `start` to the end of the last one."""
        return self.stamps[-1] - self.stamps[start - 1]

    def step_seconds(self, warmup: int) -> List[float]:
        """Each step's seconds after the first `warmup` steps."""
        return [later - earlier for earlier, later in zip(self.stamps[warmup - 1 :], self.stamps[warmup:])]
