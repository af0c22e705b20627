# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Vision GRPO: image prompts through the model's processor, and each completion decoded by mlx-vlm with the
prompt's images (`loss.py` takes the completions' log-probabilities from the vision model's own forward).

A row's images come from TRL's `image` / `images` columns or from image parts of its conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import mlx.core as mx
import numpy as np

from ...models.batched_sampling import Sampled, eos_token_ids
from ...vision.backend import (
    generate_tokens,
    placeholder_token_ids,
    process_conversation,
    vision_tower,
)
from .rollout import OWN_COLUMNS, RolloutMaker, is_conversation

IMAGE_COLUMNS = ("image", "images")


def is_vision_model(model: Any) -> bool:
    return hasattr(model, "language_model") and vision_tower(model) is not None


def row_images(row: Dict[str, Any]) -> List[Any]:
    """The row's images: its `image` / `images` column, else the images inside its conversation's parts."""
    for column in IMAGE_COLUMNS:
        value = row.get(column)
        if value is not None:
            return list(value) if isinstance(value, (list, tuple)) else [value]
    found = []
    prompt = row.get("prompt")
    if isinstance(prompt, list) and is_conversation(prompt):
        for message in prompt:
            content = message.get("content")
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "image" and part.get("image") is not None:
                    found.append(part["image"])
    return found


def _as_arrays(values: Dict[str, Any]) -> Dict[str, mx.array]:
    return {name: mx.array(np.asarray(value)) for name, value in values.items() if name != "input_ids"}


@dataclass
class VisionRolloutMaker(RolloutMaker):
    """The rollout of a vision model: `tokenizer` here is the model's processor."""

    def prompt_text(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> str:
        if is_conversation(prompt):
            options = dict(self.args.chat_template_kwargs or {})
            return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **options)
        return prompt

    def reward_inputs(self, rows: List[Dict[str, Any]], texts: List[str]) -> Tuple[List[Any], List[Any]]:
        """With images, the templated prompt texts and the completion texts, as CUDA Unsloth hands them to reward
        functions under TRL 0.24 and later (the vision GRPO notebooks' rewards read strings)."""
        if not any(row_images(row) for row in rows):
            return super().reward_inputs(rows, texts)
        return [self.prompt_text(row["prompt"], row) for row in rows], list(texts)

    def encode(self, row: Dict[str, Any]) -> Tuple[List[int], Optional[Dict[str, Any]]]:
        """The processor's tokens and image features; the prompt is not cut, since that would cut image tokens."""
        output = process_conversation(self.tokenizer, self.prompt_text(row["prompt"], row), row_images(row))
        ids = list(output.pop("input_ids"))
        return ids, _as_arrays(output)

    def prompt_ids(self, prompt: Any, row: Optional[Dict[str, Any]] = None) -> List[int]:
        return self.encode({**(row or {}), "prompt": prompt})[0]

    def sample(
        self, model: Any, prompt_ids: List[List[int]], features: List[Optional[Dict[str, Any]]], step: int
    ) -> List[Sampled]:
        """`num_generations` completions of each image prompt, each decoded on its own by mlx-vlm."""
        args = self.args
        text_tokenizer = getattr(self.tokenizer, "tokenizer", self.tokenizer)
        eos = set(eos_token_ids(text_tokenizer))
        sampling: Dict[str, Any] = {"temperature": float(args.temperature)}
        if float(args.top_p) < 1.0:
            sampling["top_p"] = float(args.top_p)
        if args.top_k:
            sampling["top_k"] = int(args.top_k)
        if args.min_p:
            sampling["min_p"] = float(args.min_p)
        placeholders = placeholder_token_ids(model)
        if placeholders:
            sampling["logit_bias"] = {token: -1e9 for token in placeholders}
        was_training = model.training
        model.eval()
        sampled = []
        try:
            for ids, found in zip(prompt_ids, features):
                extras = dict(found or {})
                pixels = extras.pop("pixel_values", None)
                for _ in range(args.num_generations):
                    tokens: List[int] = []
                    for token in generate_tokens(
                        model, mx.array([ids]), pixels, None, extras, int(args.max_completion_length), sampling
                    ):
                        tokens.append(token)
                        if token in eos:
                            break
                    ended = bool(tokens) and tokens[-1] in eos
                    text = text_tokenizer.decode(tokens, skip_special_tokens=True)
                    sampled.append(Sampled(tokens, text, "stop" if ended else "length"))
        finally:
            if was_training:
                model.train()
        return sampled


__all__ = ["OWN_COLUMNS", "VisionRolloutMaker", "is_vision_model", "row_images"]
