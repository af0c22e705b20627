"""GRPO with a vision model (tiny Qwen 2.5 VL through `FastVisionModel`) and image prompts: `num_generations`
completions per image prompt, TRL's reward call with the image column, the KL to the adapters-off model and TRL's
metric names; the first step's loss checked against one computed by hand here from the model's own forward.

TRL's own VLM GRPO is not run for parity: it needs torch weights of the same Qwen 2.5 VL and its processor's image
pipeline on CPU, which this project's tiny model (mlx-vlm weights) does not have.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

FAMILY = "qwen2_5_vl"
COLOURS = {"red": (220, 30, 30), "blue": (30, 40, 220)}
BETA = 0.04


def square(colour: str) -> Any:
    from PIL import Image

    return Image.new("RGB", (56, 56), COLOURS[colour])


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import BUILDERS

    return BUILDERS[FAMILY](tmp_path_factory.mktemp("tiny-vlm") / FAMILY)


def rows() -> List[Dict[str, Any]]:
    question = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which colour?"}]}]
    return [{"prompt": question, "image": square(colour), "answer": colour} for colour in COLOURS]


def log_softmax(values: np.ndarray) -> np.ndarray:
    shifted = values - values.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_image_prompts_train_with_trls_metrics_and_a_hand_checked_loss(vision_dir: Path, tmp_path: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from trl import GRPOConfig, GRPOTrainer

    from unsloth import FastVisionModel
    from unsloth.mlx.vision.backend import causal_logits, process_conversation

    model, processor = FastVisionModel.from_pretrained(str(vision_dir))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, random_state=3407)
    calls: List[Dict[str, Any]] = []
    snapshot: Dict[str, Any] = {}

    def colour_reward(prompts, completions, completion_ids, image, answer, **kwargs):
        if not snapshot:
            snapshot.update({name: mx.array(value) for name, value in tree_flatten(model.trainable_parameters())})
        calls.append(
            {
                "ids": [list(ids) for ids in completion_ids],
                "image": image,
                "answer": answer,
                "prompts": prompts,
                "completions": completions,
            }
        )
        return [
            float(sum(ids) % 5) + (1.0 if a in text else 0.0)
            for ids, text, a in zip(completion_ids, completions, answer)
        ]

    args = GRPOConfig(
        output_dir=str(tmp_path / "outputs"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        num_generations=2,
        max_completion_length=5,
        temperature=1.0,
        beta=BETA,
        learning_rate=1e-3,
        warmup_steps=0,
        lr_scheduler_type="constant",
        max_steps=2,
        logging_steps=1,
        report_to="none",
        shuffle_dataset=False,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=processor, reward_funcs=[colour_reward], args=args, train_dataset=rows()
    )
    trainer.train()

    first = calls[0]
    assert len(first["ids"]) == 4 and first["answer"] == ["red", "red", "blue", "blue"]
    assert [img.getpixel((0, 0)) for img in first["image"]] == [COLOURS["red"]] * 2 + [COLOURS["blue"]] * 2
    # With images, CUDA Unsloth hands rewards the templated prompt and the completion as text (TRL 0.24 and later).
    templated = processor.apply_chat_template(rows()[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert first["prompts"][:2] == [templated] * 2
    assert first["completions"][0] == processor.tokenizer.decode(first["ids"][0], skip_special_tokens=True)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]
    for name in ("reward", "reward_std", "rewards/colour_reward/mean", "completions/mean_length", "kl", "entropy"):
        assert name in logs[0], name
    assert logs[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA starts as the identity: the policy is the reference
    assert logs[1]["kl"] > 0
    trained = dict(tree_flatten(model.trainable_parameters()))
    assert any(not np.allclose(np.array(snapshot[name]), np.array(trained[name])) for name in snapshot)

    # The first step by hand: advantages from the rewards, log-probabilities from the model's forward (weights as
    # they were when sampled), TRL's dapo loss with the ratio at 1 and a zero KL.
    model.load_weights(list(snapshot.items()), strict=False)
    rewards = np.array(
        [
            float(sum(ids) % 5) + (1.0 if a in processor.tokenizer.decode(ids, skip_special_tokens=True) else 0.0)
            for ids, a in zip(first["ids"], first["answer"])
        ]
    ).reshape(2, 2)
    advantages = ((rewards - rewards.mean(1, keepdims=True)) / (rewards.std(1, ddof=1, keepdims=True) + 1e-4)).ravel()
    total, tokens, entropy = 0.0, 0, 0.0
    for index, completion in enumerate(first["ids"]):
        row = rows()[index // 2]
        text = processor.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        features = process_conversation(processor, text, [row["image"]])
        prompt = features.pop("input_ids")
        pixels = mx.array(features.pop("pixel_values"))
        extras = {name: mx.array(value) for name, value in features.items()}
        ids = mx.array([prompt + completion])
        logits = np.array(causal_logits(model, ids, pixels, extras)[0].astype(mx.float32))
        log_probs = log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)])
        entropy += float(-(np.exp(log_probs) * log_probs).sum())
        total += -advantages[index] * len(completion)
        tokens += len(completion)
    expected = total / tokens
    assert math.isclose(logs[0]["loss"], expected, abs_tol=1e-5), (logs[0]["loss"], expected)
    assert logs[0]["reward"] == pytest.approx(rewards.mean(), abs=1e-6)
    # The entropy comes from the same forward as the log-probabilities, so it checks the images reached the model.
    assert math.isclose(logs[0]["entropy"], entropy / tokens, abs_tol=1e-4), (logs[0]["entropy"], entropy / tokens)


def test_gspo_on_image_prompts_reuses_the_batch_against_the_sampling_policy(vision_dir: Path, tmp_path: Path) -> None:
    from trl import GRPOConfig, GRPOTrainer

    from unsloth import FastVisionModel

    model, processor = FastVisionModel.from_pretrained(str(vision_dir))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, random_state=3407)
    args = GRPOConfig(
        output_dir=str(tmp_path / "outputs"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        num_generations=2,
        max_completion_length=4,
        importance_sampling_level="sequence",
        loss_type="grpo",
        num_iterations=2,
        learning_rate=0.01,
        warmup_steps=0,
        lr_scheduler_type="constant",
        max_steps=2,
        logging_steps=1,
        report_to="none",
    )
    reward = [lambda completion_ids, **kwargs: [float(sum(ids) % 5) for ids in completion_ids]]
    trainer = GRPOTrainer(model=model, processing_class=processor, reward_funcs=reward, args=args, train_dataset=rows())
    trainer.train()
    first, second = [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]
    assert "reward" in first and "reward" not in second
    # One sequence ratio per completion: on the second pass it has moved off 1, so some completions clip.
    assert first["clip_ratio/region_mean"] == 0.0 and second["clip_ratio/region_mean"] > 0.0
