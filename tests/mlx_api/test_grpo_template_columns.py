"""A dataset column that the chat template names (the gpt-oss RL notebooks' `reasoning_effort: "low"`) reaches the
template when GRPO renders that row's prompt, as CUDA Unsloth's GRPO does; other columns do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATE = (
    "Reasoning: {{ reasoning_effort | default('medium, the usual amount of thought') }}|"
    "{% for m in messages %}{{ m['content'] + eos_token }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)
ROWS = [
    {"prompt": [{"role": "user", "content": "Pick a move."}], "answer": "W", "reasoning_effort": "low"},
    {"prompt": [{"role": "user", "content": "Pick a move."}], "answer": "A", "reasoning_effort": "high"},
]


def build(load_public: Any, tmp_path: Path, rows: list) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_public(lora=True)
    tokenizer.chat_template = TEMPLATE
    args = GRPOConfig(
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=4,
        max_steps=1,
        report_to="none",
        output_dir=str(tmp_path / "outputs"),
    )
    return GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=rows,
    )


def test_a_string_column_named_in_the_template_is_passed_to_it(load_public, tmp_path: Path) -> None:
    trainer = build(load_public, tmp_path, ROWS)
    assert trainer.prompt_text(ROWS[0]["prompt"], ROWS[0]).startswith("Reasoning: low|")
    assert trainer.prompt_text(ROWS[1]["prompt"], ROWS[1]).startswith("Reasoning: high|")
    low = trainer.tokenizer("Reasoning: low|Pick a move.<|eos|>A:", add_special_tokens=False)["input_ids"]
    assert trainer.prompt_ids(ROWS[0]["prompt"], ROWS[0]) == list(low)


def test_columns_the_template_does_not_name_or_that_are_not_strings_stay_out(load_public, tmp_path: Path) -> None:
    rows = [{**row, "reasoning_effort": 3} for row in ROWS]
    trainer = build(load_public, tmp_path, rows)
    # `answer` is not in the template; a number is not a template choice: the template's own default applies.
    assert trainer.prompt_text(rows[0]["prompt"], rows[0]).startswith("Reasoning: medium, the usual amount of thought|")
    assert trainer.prompt_text(ROWS[0]["prompt"]).startswith("Reasoning: medium, the usual amount of thought|")


def test_training_renders_each_rows_own_choice(load_public, tmp_path: Path) -> None:
    # Without the column the template's longer default renders, so the step's prompts hold more tokens.
    with_column = build(load_public, tmp_path / "low", ROWS[:1] * 2)
    without = build(load_public, tmp_path / "default", [{"prompt": ROWS[0]["prompt"], "answer": "W"}] * 2)
    for trainer in (with_column, without):
        trainer.train()
    low, default = (trainer.state.log_history[0] for trainer in (with_column, without))
    assert low["completions/mean_length"] == default["completions/mean_length"] == 4.0
    assert low["num_tokens"] < default["num_tokens"]
