"""The helpers and call shapes a typical Unsloth notebook uses, each as CUDA Unsloth does it or refused by name,
on the tiny llama: one test per rule."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from unsloth import UnslothTrainer

from .conftest import QUESTIONS, chat_text, run_python

# --- the gate explains itself -------------------------------------------------------------------------------


def test_importing_an_mlx_name_with_the_gate_off_says_why_and_how_to_switch() -> None:
    found = run_python(
        "import json, unsloth\n"
        "out = {'hasattr': hasattr(unsloth, 'FastLanguageModel')}\n"
        "try:\n"
        "    from unsloth import FastLanguageModel\n"
        "except ImportError as error:\n"
        "    out['error'] = str(error)\n"
        "try:\n"
        "    import unsloth.trainer\n"
        "except ImportError as error:\n"
        "    out['trainer_error'] = str(error)\n"
        "print(json.dumps(out))\n",
        gate="0",
    )
    assert found["hasattr"] is False  # a plain lookup still answers "no such attribute"
    assert "cannot import name 'FastLanguageModel'" in found["error"]
    assert "UNSLOTH_MLX is set to off" in found["error"] and "Set UNSLOTH_MLX=1" in found["error"]
    assert "UNSLOTH_MLX is set to off" in found["trainer_error"]


def test_importing_an_mlx_name_without_unsloth_zoo_says_so() -> None:
    # A real import blocker on sys.meta_path: unsloth_zoo cannot be imported in this process at all.
    found = run_python(
        "import json, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'unsloth_zoo' or name.startswith('unsloth_zoo.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import unsloth\n"
        "try:\n"
        "    from unsloth import UnslothTrainer\n"
        "except ImportError as error:\n"
        "    print(json.dumps({'error': str(error), 'on': unsloth._ON_MLX}))\n"
    )
    assert found["on"] is False
    assert "unsloth_zoo with its MLX backend is not installed" in found["error"]
    assert "UNSLOTH_MLX=1" in found["error"]


def test_unsloth_trainer_module_path_gives_the_mlx_classes() -> None:
    import unsloth.trainer
    from unsloth import UnslothTrainingArguments

    assert unsloth.trainer.UnslothTrainer is UnslothTrainer
    assert unsloth.trainer.UnslothTrainingArguments is UnslothTrainingArguments


def test_chat_templates_and_responses_only_import_in_either_order() -> None:
    found = run_python(
        "import json, sys\n"
        "import unsloth.mlx.chat.responses_only as first\n"
        "loaded_after_first = 'unsloth.chat_templates' in sys.modules\n"
        "import unsloth.chat_templates as second\n"
        "print(json.dumps({'loaded_after_first': loaded_after_first,\n"
        "    'same_default': first.DEFAULT_RESPONSE_PART == second.DEFAULT_RESPONSE_PART}))\n"
    )
    assert found == {"loaded_after_first": False, "same_default": True}


# --- memory helpers -------------------------------------------------------------------------------------------


def test_get_gpu_memory_stats_and_clear_gpu_memory() -> None:
    import os

    import mlx.core as mx

    from unsloth import clear_gpu_memory, get_gpu_memory_stats

    block = mx.ones((1024, 1024, 64), dtype=mx.float32)  # 256 MiB
    mx.eval(block)
    stats = get_gpu_memory_stats()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert stats["total_memory_gb"] == round(total / 1024**3, 3)
    assert stats["allocated_gb"] >= 0.25 and stats["max_allocated_gb"] >= stats["allocated_gb"]
    assert stats["device"].endswith("(MLX CPU)")
    del block
    clear_gpu_memory()
    assert mx.get_cache_memory() == 0
    assert get_gpu_memory_stats()["allocated_gb"] <= stats["allocated_gb"] - 0.25


# --- raw text -------------------------------------------------------------------------------------------------


def test_raw_text_loader_cuts_overlapping_windows_and_preprocessor_cleans(load_public, tmp_path) -> None:
    from unsloth import RawTextDataLoader, TextPreprocessor
    from unsloth.mlx.training.raw_text import token_windows

    assert token_windows(list(range(10)), 4, 1) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert token_windows(list(range(9)), 4, 2) == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [5, 6, 7, 8]]
    _, tokenizer = load_public()
    text = " ".join(answer for _, answer in QUESTIONS * 4)
    (tmp_path / "book.txt").write_text(text, encoding="utf-8")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tokenized = RawTextDataLoader(tokenizer, chunk_size=32, stride=8, return_tokenized=True).load_from_file(
        tmp_path / "book.txt"
    )
    assert tokenized["input_ids"] == token_windows(ids, 32, 8) and len(tokenized) > 2
    texts = RawTextDataLoader(tokenizer, chunk_size=32, stride=8).load_from_file(tmp_path / "book.txt")
    assert texts["text"][0] == tokenizer.decode(ids[:32])
    cleaner = TextPreprocessor()
    assert cleaner.clean_text("a  \r\nb\x07\n\n\n\nc ") == "a\nb\n\nc"
    assert cleaner.validate_dataset(texts)["rows"] == len(texts)
    with pytest.raises(ValueError, match="stride < chunk_size"):
        RawTextDataLoader(tokenizer, chunk_size=8, stride=8)


# --- train_on_responses_only's keywords ----------------------------------------------------------------------


def _two_exchanges() -> str:
    return chat_text("Where is the kettle?", "On the stove.") + chat_text("And the bread?", "By the door.")


def _token_ids(tokenizer, text: str) -> list:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_return_function_gives_a_map_function_writing_labels(load_public) -> None:
    from datasets import Dataset

    from unsloth.chat_templates import train_on_responses_only

    _, tokenizer = load_public()
    function = train_on_responses_only(
        None, instruction_part="<|user|>\n", response_part="<|assistant|>\n", tokenizer=tokenizer, return_function=True
    )
    rows = Dataset.from_dict({"input_ids": [_token_ids(tokenizer, _two_exchanges())]})
    labelled = rows.map(function, batched=True)
    prompt = _token_ids(tokenizer, "<|user|>\nWhere is the kettle?<|eos|>\n<|assistant|>\n")
    answer = _token_ids(tokenizer, "On the stove.<|eos|>")
    labels = labelled["labels"][0]
    assert labels[: len(prompt)] == [-100] * len(prompt)
    # The answer is labelled through its end-of-turn token; the newline after it separates turns.
    assert labels[len(prompt) : len(prompt) + len(answer) + 1] == [*answer, -100]


def test_last_response_only_and_force_match(load_public, quiet_args) -> None:
    from unsloth.chat_templates import train_on_responses_only
    from unsloth.mlx.chat.responses_only import token_mask

    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, [{"text": _two_exchanges()}], args=quiet_args(max_seq_length=128))
    train_on_responses_only(trainer, last_response_only=True)
    mask = trainer.train_rows.masks[0].tolist()
    last_answer = _token_ids(tokenizer, "By the door.<|eos|>")
    assert sum(mask) == len(last_answer) and mask[-len(last_answer) - 1 :] == [True] * len(last_answer) + [False]
    # A token that straddles where an answer starts counts only when force_match is off.
    pieces, spans = ["ab", "cd", "ef"], [(3, 6)]
    assert token_mask(pieces, spans, force_match=True) == [False, False, True]
    assert token_mask(pieces, spans, force_match=False) == [False, True, True]


# --- trainer call shapes ----------------------------------------------------------------------------------------


class Processor:
    """What a multimodal processing_class looks like to the trainer: the text tokenizer sits at `.tokenizer`."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer


def test_trl_positional_order_with_args_none_and_a_processor(load_public, chat_rows) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, None, None, chat_rows, None, Processor(tokenizer))
    assert trainer.tokenizer is tokenizer and len(trainer.train_rows) == len(chat_rows)


def test_skip_prepare_dataset_trains_on_the_given_ids_and_labels(load_public, quiet_args) -> None:
    from datasets import Dataset

    from unsloth.chat_templates import train_on_responses_only

    model, tokenizer = load_public(lora=True)
    ids = _token_ids(tokenizer, _two_exchanges())
    function = train_on_responses_only(None, tokenizer=tokenizer, return_function=True)
    tokenized = Dataset.from_dict({"input_ids": [ids], "text": ["ignored: the ids are used as given"]})
    tokenized = tokenized.map(function, batched=True)
    args = quiet_args(max_seq_length=128, dataset_kwargs={"skip_prepare_dataset": True}, per_device_train_batch_size=1)
    trainer = UnslothTrainer(model, tokenizer, tokenized, args=args)
    assert trainer.train_rows.source_rows[0].tolist() == ids
    assert trainer.train_rows.masks[0].tolist() == [label != -100 for label in tokenized["labels"][0]]
    trainer.train()
    with pytest.raises(ValueError, match="needs an already tokenized dataset with an input_ids column"):
        UnslothTrainer(model, tokenizer, [{"text": "words"}], args=args)
    with pytest.raises(NotImplementedError, match="'add_special_tokens'"):
        quiet_args(dataset_kwargs={"add_special_tokens": False})


def test_embedding_learning_rate_moves_trained_embeddings_at_their_own_rate(load_public, chat_rows, quiet_args):
    model, tokenizer = load_public()  # no LoRA: every weight, the embedding included, is trained
    embedding = np.array(model.model.embed_tokens.weight)
    query = np.array(model.layers[0].self_attn.q_proj.weight)
    args = quiet_args(max_steps=2, learning_rate=1e-3, embedding_learning_rate=0.0)
    UnslothTrainer(model, tokenizer, chat_rows, args=args).train()
    assert np.array_equal(np.array(model.model.embed_tokens.weight), embedding)
    assert not np.array_equal(np.array(model.layers[0].self_attn.q_proj.weight), query)


def test_preserve_dataset_order_reads_rows_in_order(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    trainer = UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(preserve_dataset_order=True))
    assert trainer.args.dataset_order == "sequential" and trainer.cuda_batch_order is False


def test_a_streamed_dataset_trains_for_max_steps(load_public, chat_rows, quiet_args) -> None:
    from datasets import Dataset

    model, tokenizer = load_public(lora=True)
    streamed = Dataset.from_list(chat_rows[:3]).to_iterable_dataset()
    trainer = UnslothTrainer(model, tokenizer, streamed, args=quiet_args(max_steps=3, per_device_train_batch_size=2))
    assert len(trainer.train_rows) == 6  # 3 rows read twice over to cover 3 steps of 2
    assert trainer.train().global_step == 3
    with pytest.raises(ValueError, match="set max_steps > 0"):
        UnslothTrainer(model, tokenizer, streamed, args=quiet_args(max_steps=None, num_train_epochs=1))


def test_max_seq_length_never_exceeds_the_length_the_model_was_loaded_for(load_public, chat_rows, caplog) -> None:
    from unsloth_zoo.mlx import MLXTrainingConfig

    caplog.set_level(logging.WARNING)
    model, tokenizer = load_public(max_seq_length=100)
    trainer = UnslothTrainer(
        model, tokenizer, chat_rows, args={"max_seq_length": 200, "max_steps": 1, "output_dir": "unused"}
    )
    assert trainer.args.max_seq_length == 100
    assert "max_seq_length=200 is longer than the model's maximum of 100" in caplog.text
    plain = UnslothTrainer(model, tokenizer, chat_rows, args=MLXTrainingConfig(max_steps=1, save_strategy="no"))
    assert plain.args.max_seq_length == 100


def test_text_trainer_refuses_images_and_completion_only_loss(load_public, chat_rows, quiet_args) -> None:
    model, tokenizer = load_public()
    with_images = [{**row, "images": []} for row in chat_rows]
    with pytest.raises(NotImplementedError, match="has an 'images' column.*UnslothVisionDataCollator"):
        UnslothTrainer(model, tokenizer, with_images, args=quiet_args())
    with pytest.raises(NotImplementedError, match="completion_only_loss=True trains only the answers of a vision"):
        UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(completion_only_loss=True))
    assert UnslothTrainer(model, tokenizer, chat_rows, args=quiet_args(completion_only_loss=False)).train_rows


# --- eval_steps -----------------------------------------------------------------------------------------------


def test_explicit_eval_steps_with_an_eval_dataset_evaluates_by_steps(load_public, chat_rows, tmp_path, caplog):
    import unsloth_zoo.mlx.trainer as backend
    from unsloth_zoo.mlx import MLXTrainer, MLXTrainingConfig

    caplog.set_level(logging.WARNING)
    backend._noted_eval_by_steps = False
    model, tokenizer = load_public(lora=True)
    config = MLXTrainingConfig(max_steps=4, eval_steps=2, save_strategy="no", output_dir=str(tmp_path / "a"))
    trainer = MLXTrainer(model, tokenizer, chat_rows, chat_rows[:2], args=config)
    trainer.train()
    evaluated = [entry["step"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert evaluated == [2, 4]
    public = UnslothTrainer(
        model,
        tokenizer,
        chat_rows,
        chat_rows[:2],
        args={"max_steps": 2, "eval_steps": 1, "save_strategy": "no", "output_dir": str(tmp_path / "b")},
    )
    public.train()
    assert [entry["step"] for entry in public.state.log_history if "eval_loss" in entry] == [1, 2]
    assert caplog.text.count("evaluating every") == 1  # said once per process
    # Without an eval_dataset nothing changes, and an explicit "no" stays "no".
    assert MLXTrainer(model, tokenizer, chat_rows, args=config).args.eval_strategy == "no"
    explicit_no = MLXTrainingConfig(max_steps=2, eval_steps=1, eval_strategy="no", save_strategy="no")
    assert MLXTrainer(model, tokenizer, chat_rows, chat_rows[:2], args=explicit_no).args.eval_strategy == "no"


# --- dataset formats -----------------------------------------------------------------------------------------


def test_standardize_sharegpt_data_formats_and_to_sharegpt() -> None:
    from datasets import Dataset

    from unsloth.chat_templates import standardize_data_formats, standardize_sharegpt, to_sharegpt

    sharegpt = Dataset.from_dict(
        {
            "conversations": [
                [{"from": "system", "value": "S"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]
            ]
        }
    )
    standard = standardize_sharegpt(sharegpt)
    assert standard["conversations"][0] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A"},
    ]
    with pytest.raises(ValueError, match="unknown role 'robot'"):
        standardize_sharegpt(Dataset.from_dict({"conversations": [[{"from": "robot", "value": "x"}]]}))
    alpaca = Dataset.from_dict({"instruction": ["Add", "Name"], "input": ["1 and 2", ""], "output": ["3", "Ann"]})
    assert standardize_data_formats(alpaca)["conversations"][0] == [
        {"role": "user", "content": "Add\n\n1 and 2"},
        {"role": "assistant", "content": "3"},
    ]
    merged = to_sharegpt(alpaca, merged_prompt="{instruction}[[\nInput: {input}]]", output_column_name="output")
    assert merged["conversations"] == [
        [{"from": "human", "value": "Add\nInput: 1 and 2"}, {"from": "gpt", "value": "3"}],
        [{"from": "human", "value": "Name"}, {"from": "gpt", "value": "Ann"}],
    ]
    longer = to_sharegpt(alpaca, merged_prompt="{instruction}", conversation_extension=2)
    assert all(len(turns) == 4 for turns in longer["conversations"])
    assert standardize_sharegpt(merged)["conversations"][1][0] == {"role": "user", "content": "Name"}


def test_hub_cache_helpers_do_not_leak(tmp_path: Path) -> None:
    from unsloth_zoo.mlx.loading import looks_like_hub_id

    assert looks_like_hub_id("unsloth/Llama-3.2-1B-Instruct")
    assert (
        not looks_like_hub_id("./models/llama")
        and not looks_like_hub_id("/abs/path")
        and not looks_like_hub_id("a/b/c")
    )
