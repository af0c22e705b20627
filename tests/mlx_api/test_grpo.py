"""GRPO on MLX through TRL's names: the notebooks' keywords, TRL's reward call, training on the tiny llama with real
mlx_lm batched sampling, and the refusals (batch size, num_generations, rows, reward functions)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

CONVERSATIONS = [
    {"prompt": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}], "answer": a}
    for question, a in [("What colour is the kettle?", "red"), ("Where do bees carry pollen?", "hive")]
]


def notebook_args(tmp_path: Path, **overrides: Any) -> Any:
    """The Qwen3 GRPO notebook's GRPOConfig keywords, cut to a tiny run."""
    from trl import GRPOConfig
    from vllm import SamplingParams

    values: Dict[str, Any] = {
        "vllm_sampling_params": SamplingParams(min_p=0.1, top_p=1.0, top_k=-1, seed=3407, stop=["<|eos|>"]),
        "temperature": 1.0,
        "learning_rate": 5e-4,
        "weight_decay": 0.001,
        "warmup_ratio": 0.1,
        "lr_scheduler_type": "linear",
        "optim": "adamw_8bit",
        "logging_steps": 1,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "num_generations": 4,
        "max_prompt_length": 64,
        "max_completion_length": 8,
        "max_steps": 2,
        "save_steps": 100,
        "report_to": "none",
        "output_dir": str(tmp_path / "outputs"),
    }
    values.update(overrides)
    return GRPOConfig(**values)


def chat_tokenizer(tokenizer: Any) -> Any:
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['content'] + eos_token }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
    )
    return tokenizer


def test_trl_names_give_the_mlx_grpo_trainer_and_config() -> None:
    from trl import GRPOConfig, GRPOTrainer

    from unsloth.mlx.rl.grpo import GRPOTrainer as Ours
    from unsloth.mlx.rl.grpo_config import GRPOConfig as OurConfig

    assert GRPOTrainer is Ours and GRPOConfig is OurConfig


def test_notebook_keywords_are_kept_with_trls_defaults(tmp_path: Path) -> None:
    args = notebook_args(tmp_path)
    assert (args.num_generations, args.max_prompt_length, args.max_completion_length) == (4, 64, 8)
    assert args.warmup_steps == 1 and args.optim == "adamw"
    assert (args.loss_type, args.scale_rewards, args.beta, args.epsilon_high) == ("dapo", "group", 0.0, 0.2)
    assert args.vllm_sampling_params.min_p == 0.1
    assert notebook_args(tmp_path, scale_rewards=False).scale_rewards == "none"


def test_a_batch_of_one_is_raised_to_num_generations_as_cuda_unsloth_does(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        args = notebook_args(tmp_path, per_device_train_batch_size=1)
    assert args.per_device_train_batch_size == 4 and args.generation_batch_size == 4
    assert "using per_device_train_batch_size=4" in caplog.text
    accumulated = notebook_args(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=4)
    assert accumulated.per_device_train_batch_size == 1 and accumulated.generation_batch_size == 4


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"per_device_train_batch_size": 6}, ValueError, r"6 completions per rank\) must divide by num_generations=4"),
        ({"num_generations": 1}, ValueError, r"num_generations must be an integer of at least 2"),
        ({"loss_type": "cispo"}, NotImplementedError, r"loss_type='cispo' is not available on MLX"),
        ({"scale_rewards": "rows"}, ValueError, r"scale_rewards must be"),
        ({"importance_sampling_level": "batch"}, ValueError, r"importance_sampling_level must be one of"),
    ],
)
def test_impossible_settings_are_refused_by_name(tmp_path: Path, overrides: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        notebook_args(tmp_path, **overrides)


def build(load_public: Any, tmp_path: Path, rewards: List[Any], rows: Any = None, **overrides: Any) -> Any:
    from trl import GRPOTrainer

    model, tokenizer = load_public(lora=True)
    return GRPOTrainer(
        model=model,
        processing_class=chat_tokenizer(tokenizer),
        reward_funcs=rewards,
        args=notebook_args(tmp_path, **overrides),
        train_dataset=CONVERSATIONS if rows is None else rows,
    )


def test_rewards_get_trls_call_and_training_logs_trls_metrics(load_public, tmp_path: Path) -> None:
    from datasets import Dataset
    from mlx.utils import tree_flatten

    calls: List[Dict[str, Any]] = []

    def format_reward(prompts, completions, completion_ids, answer, **kwargs):
        calls.append({"prompts": prompts, "completions": completions, "ids": completion_ids, "answer": answer})
        return [float(len(completion[0]["content"]) % 3) for completion in completions]

    def check_answer(completions, answer, **kwargs):
        return [1.0 if a in completion[0]["content"] else -1.0 for completion, a in zip(completions, answer)]

    trainer = build(load_public, tmp_path, [format_reward, check_answer], rows=Dataset.from_list(CONVERSATIONS))
    before = {name: np.array(array) for name, array in tree_flatten(trainer.model.trainable_parameters())}
    trainer.train()
    call = calls[0]
    assert len(call["prompts"]) == len(call["completions"]) == len(call["ids"]) == 4
    assert call["prompts"][0] == call["prompts"][3] and call["prompts"][0][-1]["role"] == "user"
    assert all(completion[0]["role"] == "assistant" for completion in call["completions"])
    assert all(isinstance(token, int) for ids in call["ids"] for token in ids)
    assert call["answer"] == [call["answer"][0]] * 4
    logged = trainer.state.log_history[0]
    for name in (
        "loss",
        "reward",
        "reward_std",
        "rewards/format_reward/mean",
        "rewards/check_answer/mean",
        "completions/mean_length",
        "frac_reward_zero_std",
        "learning_rate",
        "grad_norm",
        "entropy",
    ):
        assert name in logged, name
    assert "kl" not in logged
    assert logged["completions/max_length"] <= 8
    after = dict(tree_flatten(trainer.model.trainable_parameters()))
    assert any(not np.allclose(before[name], np.array(after[name])) for name in before)
    assert (tmp_path / "outputs" / "checkpoint-2").is_dir()


def test_beta_logs_kl_against_the_adapter_off_reference(load_public, tmp_path: Path) -> None:
    rising = [lambda completions, **kw: [float(i) for i in range(len(completions))]]
    trainer = build(load_public, tmp_path, rising, beta=0.1, max_steps=3)
    trainer.train()
    assert [entry["kl"] for entry in trainer.state.log_history if "kl" in entry][0] == pytest.approx(0.0, abs=1e-6)
    assert any(entry.get("kl", 0) > 0 for entry in trainer.state.log_history[1:])


def test_string_prompts_get_string_completions(load_public, tmp_path: Path) -> None:
    seen: List[Any] = []

    def reward(prompts, completions, **kwargs):
        seen.extend(completions)
        return [0.5] * len(completions)

    trainer = build(
        load_public, tmp_path, [reward], rows=[{"prompt": "The kettle is"}, {"prompt": "Bees"}], max_steps=1
    )
    trainer.train()
    assert seen and all(isinstance(text, str) for text in seen)
    assert trainer.state.log_history[0]["frac_reward_zero_std"] == 1.0


def test_a_reward_function_that_raises_or_miscounts_is_named_and_nothing_is_written(load_public, tmp_path) -> None:
    def broken(completions, **kwargs):
        raise KeyError("score")

    def short(completions, **kwargs):
        return [1.0]

    with pytest.raises(RuntimeError, match=r"reward function 'broken' raised KeyError"):
        build(load_public, tmp_path, [broken]).train()
    with pytest.raises(ValueError, match=r"reward function 'short' returned 1 rewards for 4 completions"):
        build(load_public, tmp_path, [short]).train()
    assert not (tmp_path / "outputs").exists()


def test_rows_without_a_prompt_are_refused_with_their_index(load_public, tmp_path: Path) -> None:
    rows = [CONVERSATIONS[0], {"question": "no prompt here"}]
    with pytest.raises(ValueError, match=r"train_dataset row 1 has no 'prompt'"):
        build(load_public, tmp_path, [lambda completions, **kw: [0.0] * len(completions)], rows=rows)
    with pytest.raises(ValueError, match=r"row 0 has a prompt of type int"):
        build(load_public, tmp_path, [lambda completions, **kw: [0.0] * len(completions)], rows=[{"prompt": 3}])


def test_a_reward_that_is_not_a_number_and_a_reward_model_id_are_refused(load_public, tmp_path: Path) -> None:
    def words(completions, **kwargs):
        return ["good"] * len(completions)

    with pytest.raises(ValueError, match=r"reward function 'words' returned a value that is not a number"):
        build(load_public, tmp_path, [words]).train()
    with pytest.raises(NotImplementedError, match=r"reward_funcs\[0\]='org/reward-model'.*not reward models"):
        build(load_public, tmp_path, ["org/reward-model"])
