"""GRPO on MLX: the trainer on the shared loop (`trainer.py`), its generation batches (`rollout.py`, and
`vision.py` for image prompts) and its arithmetic as TRL does it (`loss.py`)."""

from .trainer import GRPOTrainer

__all__ = ["GRPOTrainer"]
