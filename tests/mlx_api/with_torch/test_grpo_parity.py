"""GRPO on MLX against TRL's own `GRPOTrainer` (CPU torch), with the completions fixed on both sides.

The MLX model is the tiny llama with LoRA whose `lora_b` is drawn non-zero; TRL's policy is the same llama with
those LoRA deltas added into its weights, and TRL's reference (`beta > 0`) is the plain llama TRL loads from the
folder, which is what the MLX side's adapters-off reference computes. TRL's generation is replaced by the fixed
completions (the one thing held equal); rewards, advantages, log-probabilities, loss and metrics are TRL's own code.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

# TRL 1.16 itself reads transformers' deprecated gradient_checkpointing names.
pytestmark = pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")

PROMPT_LENGTH = 6
GENERATIONS = 4
TOLERANCE = 1e-5
# Two prompts, four completions each: some end with the end-of-sequence token, some run to the length limit.
COMPLETION_LENGTHS = [3, 7, 5, 7, 2, 7, 6, 4]
MAX_COMPLETION = 7


def reward_length(completions: List[str], **kwargs: Any) -> List[float]:
    return [len(text) / 7.0 for text in completions]


def reward_answer(prompts: List[str], completions: List[str], answer: List[str], **kwargs: Any) -> List[float]:
    return [1.5 if answer_text[:1] in text else -0.5 for text, answer_text in zip(completions, answer)]


def reward_flat(completions: List[str], **kwargs: Any) -> List[float]:
    return [1.0] * len(completions)


REWARDS = [reward_length, reward_answer, reward_flat]


def fixed_rollout(tokenizer: Any, seed: int = 5) -> Dict[str, Any]:
    """Token ids for the prompts and completions, with completions ending in EOS unless they hit the limit."""
    rng = np.random.default_rng(seed)
    eos = tokenizer.eos_token_id
    usable = [token for token in range(20, 400) if token not in (eos, tokenizer.pad_token_id)]
    prompts = [list(map(int, rng.choice(usable, PROMPT_LENGTH))) for _ in range(2)]
    completions = []
    for length in COMPLETION_LENGTHS:
        body = list(map(int, rng.choice(usable, length)))
        completions.append(body if length == MAX_COMPLETION else body[:-1] + [eos])
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in completions]
    return {"prompts": prompts, "completions": completions, "texts": texts}


def mlx_lora_model(model_dir: Path) -> Any:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(str(model_dir), max_seq_length=128)
    model = FastLanguageModel.get_peft_model(model, r=4, lora_alpha=8, random_state=11)
    mx.random.seed(12)
    drawn = [
        (name, mx.random.normal(array.shape) * 0.05)
        for name, array in tree_flatten(model.trainable_parameters())
        if name.endswith("lora_b")
    ]
    model.load_weights(drawn, strict=False)
    mx.eval(model.parameters())
    return model, tokenizer


def torch_policy(model_dir: Path, mlx_model: Any) -> Any:
    """The llama from the folder with each LoRA layer's `scale * (A @ B)^T` added into its weight."""
    import torch
    from mlx.utils import tree_flatten
    from transformers import LlamaForCausalLM

    policy = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    lora = dict(tree_flatten(mlx_model.parameters()))
    scales = {name: module.scale for name, module in mlx_model.named_modules() if hasattr(module, "lora_a")}
    weights = dict(policy.named_parameters())
    with torch.no_grad():
        for module, scale in scales.items():
            delta = scale * (np.array(lora[f"{module}.lora_a"]) @ np.array(lora[f"{module}.lora_b"])).T
            weights[f"{module}.weight"].add_(torch.tensor(delta, dtype=torch.float32))
    return policy


def trl_trainer(policy: Any, tokenizer: Any, rows: List[Dict[str, str]], output_dir: Path, beta: float) -> Any:
    from datasets import Dataset
    from trl.trainer.grpo_config import GRPOConfig as TRLConfig
    from trl.trainer.grpo_trainer import GRPOTrainer as TRLTrainer

    args = trl_config(TRLConfig, output_dir, beta)
    return TRLTrainer(
        model=policy, reward_funcs=REWARDS, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )


def trl_config(kind: type, output_dir: Path, beta: float) -> Any:
    return kind(
        output_dir=str(output_dir),
        per_device_train_batch_size=len(COMPLETION_LENGTHS),
        gradient_accumulation_steps=1,
        num_generations=GENERATIONS,
        max_completion_length=MAX_COMPLETION,
        beta=beta,
        temperature=0.7,
        report_to="none",
        use_cpu=True,
        bf16=False,
    )


def run_trl(
    trainer: Any,
    rollout: Dict[str, Any],
    rows: List[Dict[str, str]],
    loss_type: str,
    scale: str,
    level: str = "token",
    old_logps: Any = None,
    bias_correction_kl: bool = False,
) -> Dict:
    import torch

    trainer.loss_type, trainer.scale_rewards = loss_type, scale
    trainer.importance_sampling_level = level
    trainer.args.use_bias_correction_kl = bias_correction_kl
    trainer.current_gradient_accumulation_steps = 1
    trainer._metrics["train"].clear()
    prompt_ids = [ids for ids in rollout["prompts"] for _ in range(GENERATIONS)]

    def fixed(prompts: list) -> tuple:
        return prompt_ids, rollout["completions"], None, rollout["texts"], None, {}, None, None

    trainer._generate = fixed
    trainer.model.train()
    inputs = [row for row in rows for _ in range(GENERATIONS)]
    batch = trainer._generate_and_score_completions(inputs)
    if old_logps is not None:
        batch["old_per_token_logps"] = torch.tensor(old_logps, dtype=torch.float32)
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items() if values}
    gradients = {
        name: parameter.grad.numpy().copy()
        for name, parameter in trainer.model.named_parameters()
        if parameter.grad is not None
    }
    return {
        "advantages": batch["advantages"].tolist(),
        "loss": float(loss.item()),
        "metrics": metrics,
        "grads": gradients,
    }


def run_mlx(
    model: Any, tokenizer: Any, rollout: Dict[str, Any], rows: List[Dict[str, str]], config: Dict, old_logps: Any = None
) -> Dict:
    from unsloth.mlx.rl.grpo import GRPOTrainer
    from unsloth.mlx.rl.grpo.loss import group_advantages
    from unsloth.mlx.rl.grpo_config import GRPOConfig

    args = GRPOConfig(
        per_device_train_batch_size=len(COMPLETION_LENGTHS),
        gradient_accumulation_steps=1,
        num_generations=GENERATIONS,
        max_completion_length=MAX_COMPLETION,
        temperature=0.7,
        learning_rate=0.0,
        max_steps=1,
        **config,
    )
    trainer = GRPOTrainer(model, REWARDS, args=args, train_dataset=rows, processing_class=tokenizer)
    trainer._create_optimizer(1)
    expanded = [row for row in rows for _ in range(GENERATIONS)]
    scores = group_advantages(
        trainer.score(expanded, rollout["texts"], rollout["completions"]),
        trainer.reward_weights,
        GENERATIONS,
        args.scale_rewards,
        trainer.reward_func_names,
    )
    prompt_ids = [ids for ids in rollout["prompts"] for _ in range(GENERATIONS)]
    masks = [[1] * len(ids) for ids in rollout["completions"]]
    metrics = dict(scores.metrics)
    old = None if old_logps is None else [values[: len(ids)] for values, ids in zip(old_logps, rollout["completions"])]
    loss = trainer._train_on(prompt_ids, rollout["completions"], masks, scores.advantages, metrics, old_logps=old)
    grads = mlx_gradients(trainer, prompt_ids, rollout["completions"], masks, scores.advantages, old)
    return {"advantages": scores.advantages.tolist(), "loss": loss, "metrics": metrics, "grads": grads}


def mlx_gradients(trainer: Any, prompt_ids: list, completions: list, masks: list, advantages: Any, old: Any) -> Dict:
    """The LoRA gradients of the one micro-batch's loss, as the trainer's step takes them."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from unsloth.mlx.rl.grpo.loss import build_batch, completion_logps, policy_loss

    settings = trainer.loss_settings()
    batch = build_batch(prompt_ids, completions, masks, advantages, trainer.pad_id, old_logps=old)
    if trainer.reference is not None:
        batch.ref_logps = trainer.reference.run(
            lambda model: completion_logps(model, batch, settings.temperature, differentiable=False)
        )
    tokens = float(sum(sum(mask) for mask in masks))
    normalizer = mx.array(tokens if settings.loss_type == "dapo" else 1.0)
    _, grads = nn.value_and_grad(trainer.model, lambda model, b: policy_loss(model, b, settings, normalizer))(
        trainer.model, batch
    )
    return {name: np.array(value) for name, value in tree_flatten(grads)}


def lora_b_gradients_from_torch(mlx_model: Any, torch_grads: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """TRL's gradient of each merged weight `W + scale * (A @ B)^T`, carried to `B`: scale * A^T @ dW^T."""
    from mlx.utils import tree_flatten

    lora = dict(tree_flatten(mlx_model.parameters()))
    scales = {name: module.scale for name, module in mlx_model.named_modules() if hasattr(module, "lora_a")}
    return {
        f"{module}.lora_b": scale * np.array(lora[f"{module}.lora_a"]).T @ torch_grads[f"{module}.weight"].T
        for module, scale in scales.items()
    }


def shifted_old_logps(model: Any, tokenizer: Any, rollout: Dict[str, Any], seed: int = 9) -> np.ndarray:
    """A sampling policy other than the current one: the model's own log-probabilities of the fixed completions,
    moved by noise large enough that some ratios leave the clip range; zero past each completion's end."""
    from unsloth.mlx.rl.grpo.loss import build_batch, completion_logps

    prompt_ids = [ids for ids in rollout["prompts"] for _ in range(GENERATIONS)]
    masks = [[1] * len(ids) for ids in rollout["completions"]]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = build_batch(prompt_ids, rollout["completions"], masks, [0.0] * len(masks), pad)
    current = np.array(completion_logps(model, batch, 0.7, differentiable=False))
    rng = np.random.default_rng(seed)
    # A shift per completion moves GSPO's sequence ratios too, not only the token ones.
    shifted = current + rng.normal(0.0, 0.3, current.shape) + rng.normal(0.0, 0.4, (current.shape[0], 1))
    return (shifted * np.array(batch.mask)).astype(np.float32)


COMPARED = [
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    *(f"rewards/{function.__name__}/{kind}" for function in REWARDS for kind in ("mean", "std")),
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
]


@pytest.fixture(scope="module")
def setting(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    model, tokenizer = mlx_lora_model(tiny_model_dir)
    rows = [{"prompt": "alpha beta", "answer": "a"}, {"prompt": "gamma delta", "answer": "e"}]
    policy = torch_policy(tiny_model_dir, model)
    folder = tmp_path_factory.mktemp("trl-grpo")
    return {
        "model": model,
        "tokenizer": tokenizer,
        "rows": rows,
        "rollout": fixed_rollout(tokenizer),
        "trl": {beta: trl_trainer(policy, tokenizer, rows, folder / str(beta), beta) for beta in (0.0, 0.04)},
    }


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_advantages_loss_and_metrics_match_trl(
    setting: Dict[str, Any], loss_type: str, scale_rewards: str, beta: float
):
    rows, rollout = setting["rows"], setting["rollout"]
    expected = run_trl(setting["trl"][beta], rollout, rows, loss_type, scale_rewards)
    config = {"loss_type": loss_type, "scale_rewards": scale_rewards, "beta": beta}
    actual = run_mlx(setting["model"], setting["tokenizer"], rollout, rows, config)
    np.testing.assert_allclose(actual["advantages"], expected["advantages"], atol=TOLERANCE, rtol=0)
    assert math.isclose(actual["loss"], expected["loss"], abs_tol=TOLERANCE), (actual["loss"], expected["loss"])
    names = COMPARED + (["kl"] if beta else [])
    for name in names:
        assert math.isclose(actual["metrics"][name], expected["metrics"][name], abs_tol=TOLERANCE), (
            name,
            actual["metrics"][name],
            expected["metrics"][name],
        )
    if beta:
        # The adapter-off reference differs from the policy, so the KL term is really exercised.
        assert expected["metrics"]["kl"] > 1e-4


@pytest.mark.parametrize("off_policy", [False, True], ids=["on-policy", "off-policy"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_importance_sampling_levels_match_trls_loss_metrics_and_gradients(
    setting: Dict[str, Any], level: str, loss_type: str, beta: float, off_policy: bool
):
    """GSPO's sequence ratio and the token ratio, on the first pass (ratio 1 in value, not in gradient) and against an
    older sampling policy (as a reused generation batch sees it), with TRL's KL bias correction on when beta > 0."""
    rows, rollout, model = setting["rows"], setting["rollout"], setting["model"]
    old = shifted_old_logps(model, setting["tokenizer"], rollout) if off_policy else None
    corrected = beta > 0
    expected = run_trl(setting["trl"][beta], rollout, rows, loss_type, "group", level, old, corrected)
    config = {
        "loss_type": loss_type,
        "beta": beta,
        "importance_sampling_level": level,
        "use_bias_correction_kl": corrected,
    }
    actual = run_mlx(model, setting["tokenizer"], rollout, rows, config, old_logps=old)
    assert math.isclose(actual["loss"], expected["loss"], abs_tol=TOLERANCE), (actual["loss"], expected["loss"])
    names = [*COMPARED, "clip_ratio/low_min", "clip_ratio/high_max"] + (["kl"] if beta else [])
    for name in names:
        assert math.isclose(actual["metrics"][name], expected["metrics"][name], abs_tol=TOLERANCE), (
            name,
            actual["metrics"][name],
            expected["metrics"][name],
        )
    carried = lora_b_gradients_from_torch(model, expected["grads"])
    scale = max(float(np.abs(values).max()) for values in carried.values())
    assert scale > 1e-4
    for name, values in carried.items():
        np.testing.assert_allclose(actual["grads"][name], values, atol=1e-4 * scale, rtol=0, err_msg=name)
    if off_policy:
        # The shifted sampling policy really clips some ratios, so the clipped branch is compared too.
        assert expected["metrics"]["clip_ratio/region_mean"] > 0
