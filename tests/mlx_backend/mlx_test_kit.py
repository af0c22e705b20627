"""Shared pieces of the MLX tests: a memorisable text set and a callback that records every event."""

from __future__ import annotations

from typing import Any

MEMORISE_TEXTS = [
    "The red kettle sings at seven every morning.",
    "Bees carry pollen from the clover to the hive.",
    "A quiet river bends twice before the old mill.",
    "Fresh bread cools on the window by the door.",
    "The lighthouse blinks green over the harbour.",
    "Snow settles softly on the pine branches tonight.",
    "Two herons wait in the reeds for small fish.",
    "The library clock is always four minutes slow.",
]


def text_rows(count: int) -> list:
    """`count` rows cycling through the memorisable texts."""
    return [{"text": MEMORISE_TEXTS[i % len(MEMORISE_TEXTS)]} for i in range(count)]


class EventRecorder:
    """A callback that writes down every event it sees, with the global step at that moment."""

    EVENTS = (
        "on_init_end",
        "on_train_begin",
        "on_train_end",
        "on_epoch_begin",
        "on_epoch_end",
        "on_step_begin",
        "on_pre_optimizer_step",
        "on_optimizer_step",
        "on_substep_end",
        "on_step_end",
        "on_evaluate",
        "on_save",
        "on_log",
        "on_prediction_step",
    )

    def __init__(self) -> None:
        self.events: list = []
        self.logs: list = []
        self.epochs_at_step_end: list = []

    def __getattr__(self, name: str) -> Any:
        if name not in self.EVENTS:
            raise AttributeError(name)

        def record(args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.events.append((name, state.global_step))
            if name == "on_log":
                self.logs.append(dict(kwargs["logs"]))
            if name == "on_step_end":
                self.epochs_at_step_end.append(state.epoch)

        return record

    def names(self) -> list:
        return [name for name, _ in self.events]
