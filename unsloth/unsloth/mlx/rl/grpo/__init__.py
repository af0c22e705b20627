"""GRPO on MLX: the trainer on the shared loop (`trainer.py`), its generation batches (`rollout.py`, and
`vision.py` for image prompts), its arithmetic as TRL does it (`loss.py`) and its evaluation's means over
`mlx.launch` ranks (`eval_ranks.py`)."""

from .trainer import GRPOTrainer

__all__ = ["GRPOTrainer"]
