"""GRPO on MLX: the trainer (`trainer.py`) and its arithmetic as TRL does it (`loss.py`)."""

from .trainer import GRPOTrainer

__all__ = ["GRPOTrainer"]
