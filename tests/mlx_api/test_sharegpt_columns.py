"""`standardize_sharegpt` / `standardize_data_formats` keep the dataset's own column name and every extra key of
each turn, as the gpt-oss notebook's next cell reads `messages` and each turn's `thinking`."""

from __future__ import annotations

import pytest

MESSAGES = [
    [
        {"role": "system", "content": "Be brief.", "thinking": None},
        {"role": "user", "content": "What colour is the kettle?", "thinking": None},
        {"role": "assistant", "content": "Red.", "thinking": "The kettle was painted red."},
    ]
]


def test_a_messages_column_stays_messages_with_its_thinking() -> None:
    from datasets import Dataset

    from unsloth import standardize_sharegpt
    from unsloth.chat_templates import standardize_data_formats

    dataset = Dataset.from_dict({"messages": MESSAGES, "reasoning_language": ["English"]})
    for convert in (standardize_sharegpt, standardize_data_formats):
        standard = convert(dataset)
        assert standard.column_names == ["messages", "reasoning_language"]
        assert standard["messages"][0][2] == {
            "role": "assistant",
            "content": "Red.",
            "thinking": "The kettle was painted red.",
        }


def test_sharegpt_turns_keep_tool_calls_and_take_role_content_names() -> None:
    from datasets import Dataset

    from unsloth.chat_templates import standardize_sharegpt

    calls = [{"name": "weather", "arguments": '{"city": "Oslo"}'}]
    dataset = Dataset.from_dict(
        {
            "conversations": [
                [
                    {"from": "human", "value": "Weather in Oslo?", "tool_calls": None},
                    {"from": "gpt", "value": "", "tool_calls": calls},
                ]
            ]
        }
    )
    standard = standardize_sharegpt(dataset)
    assert standard.column_names == ["conversations"]
    assert standard["conversations"][0] == [
        {"role": "user", "content": "Weather in Oslo?", "tool_calls": None},
        {"role": "assistant", "content": "", "tool_calls": calls},
    ]


def test_a_dataset_with_both_columns_is_refused_by_name() -> None:
    from datasets import Dataset

    from unsloth.chat_templates import standardize_sharegpt

    both = Dataset.from_dict({"messages": MESSAGES, "conversations": MESSAGES})
    with pytest.raises(ValueError, match="both conversations and messages"):
        standardize_sharegpt(both)
