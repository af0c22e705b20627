# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`DPOConfig` on MLX: TRL's DPO keywords (0.2x and 1.x spellings) on top of the shared training arguments."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple

from .config import RLTrainingArguments

SIGMOID = "sigmoid"


class DPOConfig(RLTrainingArguments):
    """TRL's `DPOConfig`: `beta`, the sigmoid loss, `max_length` / `max_prompt_length` / `max_completion_length`."""

    METHOD_KEYWORDS: ClassVar[Dict[str, Any]] = {
        "beta": 0.1,
        "loss_type": SIGMOID,
        "max_prompt_length": None,
        "max_completion_length": None,
        "reference_free": False,
        "disable_dropout": True,
    }
    # TRL keywords whose default is what this trainer does; any other value is refused by name.
    ACCEPTED_AT_DEFAULT: ClassVar[Dict[str, Tuple[Any, ...]]] = {
        "label_smoothing": (0.0, 0),
        "truncation_mode": ("keep_start", None),
        "precompute_ref_log_probs": (False,),
        "precompute_ref_batch_size": (None,),
        "generate_during_eval": (False,),
        "is_encoder_decoder": (None, False),
        "label_pad_token_id": (-100,),
        "padding_value": (None,),
        "model_adapter_name": (None,),
        "ref_adapter_name": (None,),
        "force_use_ref_model": (False,),
        "rpo_alpha": (None,),
        "ld_alpha": (None,),
        "use_weighting": (False,),
        "loss_weights": (None,),
        "f_divergence_type": ("reverse_kl",),
        "f_alpha_divergence_coef": (1.0, 0.5),
        "sync_ref_model": (False,),
        "ref_model_mixup_alpha": (0.6, 0.9),
        "ref_model_sync_steps": (512, 64),
        "use_logits_to_keep": (False,),
        "max_target_length": (None,),
        "tools": (None,),
        "discopop_tau": (0.05,),
        "use_liger_loss": (False,),
        "ref_model_init_kwargs": (None,),
    }

    def check_method_keywords(self) -> None:
        loss_type = self.loss_type
        names = [loss_type] if isinstance(loss_type, str) else list(loss_type)
        if names != [SIGMOID]:
            raise NotImplementedError(f"DPOConfig(loss_type={loss_type!r}) is not available on MLX; only 'sigmoid' is")
        beta = self.beta
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or beta <= 0:
            raise ValueError(f"DPOConfig(beta={beta!r}) must be a positive number")
        for name in ("max_prompt_length", "max_completion_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"DPOConfig({name}={value!r}) must be a positive int or None")
