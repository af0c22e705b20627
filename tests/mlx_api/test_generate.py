"""`model.generate` as notebooks call it: Hugging Face's keywords and input kinds, left-padded batches, streamers,
prompt plus new tokens returned, and greedy tokens equal to `mlx_lm`'s own generation."""

from __future__ import annotations

import logging

import numpy as np
import pytest

PROMPTS = ["The kettle is", "Bees carry pollen to the hive and the river bends"]


def _ids(tokenizer, text: str) -> list:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _mlx_lm_tokens(model, tokenizer, prompt: list, count: int) -> list:
    from mlx_lm import stream_generate

    return [response.token for response in stream_generate(model, tokenizer, prompt, max_tokens=count)]


def test_greedy_equals_mlx_lm(load_public) -> None:
    from mlx_lm import generate as mlx_lm_generate

    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[1])
    out = model.generate(input_ids=np.array([prompt]), max_new_tokens=24)
    new = out[0, len(prompt) :].tolist()
    expected = _mlx_lm_tokens(model, tokenizer, prompt, 24)
    assert new[: len(expected)] == expected and len(expected) > 0
    assert tokenizer.decode(new) == mlx_lm_generate(model, tokenizer, prompt, max_tokens=24)


def test_every_prompt_kind_gives_the_same_answer(load_public) -> None:
    import mlx.core as mx

    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[0])
    encoding = tokenizer([PROMPTS[0]], return_tensors="np", add_special_tokens=False)
    answers = [
        model.generate(input_ids=prompt, max_new_tokens=6),
        model.generate(np.array([prompt]), max_new_tokens=6),
        model.generate(input_ids=mx.array([prompt]), max_new_tokens=6),
        model.generate(**encoding, max_new_tokens=6),
        model.generate(input_ids=encoding, max_new_tokens=6),
    ]
    for answer in answers:
        assert isinstance(answer, np.ndarray) and answer.shape == (1, len(prompt) + 6)
        assert answer.tolist() == answers[0].tolist()
    assert answers[0][0, : len(prompt)].tolist() == prompt
    assert tokenizer.batch_decode(answers[0])[0].startswith(PROMPTS[0])


def test_left_padded_batch_gives_each_row_its_own_answer(load_public) -> None:
    model, tokenizer = load_public()
    tokenizer.padding_side = "left"
    batch = tokenizer(PROMPTS, return_tensors="np", padding=True, add_special_tokens=False)
    out = model.generate(**batch, max_new_tokens=8)
    width = batch["input_ids"].shape[1]
    assert out.shape[0] == 2 and out[:, :width].tolist() == batch["input_ids"].tolist()
    for row, text in enumerate(PROMPTS):
        alone = model.generate(input_ids=[_ids(tokenizer, text)], max_new_tokens=8)
        new_alone = alone[0, alone.shape[1] - 8 :].tolist()
        assert out[row, width : width + len(new_alone)].tolist() == new_alone


def test_a_row_that_ends_early_is_padded_with_the_pad_token(load_public) -> None:
    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[0])
    first = int(model.generate(input_ids=[prompt], max_new_tokens=1)[0, -1])
    out = model.generate(input_ids=[prompt], max_new_tokens=5, eos_token_id=first)
    assert out.shape == (1, len(prompt) + 1) and int(out[0, -1]) == first
    tokenizer.padding_side = "left"
    batch = tokenizer([PROMPTS[0], PROMPTS[1]], return_tensors="np", padding=True, add_special_tokens=False)
    out = model.generate(**batch, max_new_tokens=5, eos_token_id=first)
    width = batch["input_ids"].shape[1]
    assert out[0, width:].tolist()[:1] == [first]
    assert all(token == tokenizer.pad_token_id for token in out[0, width + 1 :].tolist())


def test_text_streamer_prints_the_new_text(load_public, capsys) -> None:
    from transformers import TextStreamer

    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[1])
    out = model.generate(input_ids=[prompt], streamer=TextStreamer(tokenizer, skip_prompt=True), max_new_tokens=12)
    printed = capsys.readouterr().out
    assert printed == tokenizer.decode(out[0, len(prompt) :].tolist()) + "\n"


def test_text_iterator_streamer_yields_the_new_text(load_public) -> None:
    from transformers import TextIteratorStreamer

    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[1])
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
    out = model.generate(input_ids=[prompt], streamer=streamer, max_new_tokens=12)
    assert "".join(streamer) == tokenizer.decode(out[0, len(prompt) :].tolist())


def test_sampling_keywords(load_public) -> None:
    import mlx.core as mx

    model, tokenizer = load_public()
    prompt = [_ids(tokenizer, PROMPTS[1])]
    greedy = model.generate(input_ids=prompt, max_new_tokens=10)
    assert model.generate(input_ids=prompt, max_new_tokens=10, do_sample=True, top_k=1).tolist() == greedy.tolist()
    runs = []
    for _ in range(2):
        mx.random.seed(7)
        runs.append(
            model.generate(
                input_ids=prompt, max_new_tokens=10, do_sample=True, temperature=1.5, min_p=0.1, top_p=0.95, top_k=64
            ).tolist()
        )
    assert runs[0] == runs[1]
    mx.random.seed(8)
    other = model.generate(input_ids=prompt, max_new_tokens=10, do_sample=True, temperature=1.5, min_p=0.1, top_k=64)
    assert other.tolist() != runs[0]


def test_repetition_penalty_avoids_seen_tokens(load_public) -> None:
    model, tokenizer = load_public()
    prompt = _ids(tokenizer, PROMPTS[1])
    out = model.generate(input_ids=[prompt], max_new_tokens=10, repetition_penalty=1e6)
    new = out[0, len(prompt) :].tolist()
    assert not set(new) & set(prompt) and len(set(new)) == len(new)


def test_sampling_keywords_without_do_sample_decode_greedily_with_a_warning(load_public, caplog) -> None:
    model, tokenizer = load_public()
    prompt = [_ids(tokenizer, PROMPTS[0])]
    with caplog.at_level(logging.WARNING, logger="unsloth.mlx.models.generation"):
        warm = model.generate(input_ids=prompt, max_new_tokens=6, use_cache=True, temperature=1.5, min_p=0.1)
    assert warm.tolist() == model.generate(input_ids=prompt, max_new_tokens=6).tolist()
    assert "do_sample" in caplog.text


def test_the_models_generation_config_turns_sampling_on(load_public, tiny_model_dir, tmp_path) -> None:
    import shutil

    from unsloth import FastLanguageModel

    folder = tmp_path / "sampling-model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "generation_config.json").write_text('{"do_sample": true, "temperature": 0.0001, "max_length": 9}')
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    prompt = _ids(tokenizer, PROMPTS[0])
    out = model.generate(input_ids=[prompt])
    assert out.shape[1] == 9  # max_length from the model's file, as Hugging Face reads it


@pytest.mark.parametrize(
    ("keywords", "named"),
    [({"num_beams": 4}, "num_beams=4"), ({"guidance_scale": 2.0}, "guidance_scale"), ({}, "input_ids")],
)
def test_what_cannot_run_is_named(load_public, keywords, named) -> None:
    from unsloth.mlx.models.generation import GenerationInputError

    model, tokenizer = load_public()
    prompt = None if not keywords else [_ids(tokenizer, PROMPTS[0])]
    with pytest.raises(GenerationInputError, match=named):
        model.generate(input_ids=prompt, max_new_tokens=2, **keywords)


def test_bad_prompts_get_one_message(load_public) -> None:
    from unsloth.mlx.models.generation import GenerationInputError

    model, _ = load_public()
    with pytest.raises(GenerationInputError, match="token ids"):
        model.generate(input_ids=[["a", "b"]], max_new_tokens=2)
    with pytest.raises(GenerationInputError, match="token ids"):
        model.generate(input_ids=[[1, 2], [3]], max_new_tokens=2)
    with pytest.raises(GenerationInputError, match="batch size 1"):
        model.generate(input_ids=[[1, 2], [3, 4]], max_new_tokens=2, streamer=object())


def test_for_inference_and_for_training(load_public) -> None:
    from unsloth import FastLanguageModel

    model, _ = load_public(lora=True)
    assert FastLanguageModel.for_inference(model) is model and model.training is False
    assert FastLanguageModel.for_training(model) is model and model.training is True
