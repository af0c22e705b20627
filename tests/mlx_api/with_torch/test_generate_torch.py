"""`model.generate` with torch prompts, as notebooks build them: a torch tensor in gives a torch tensor out,
and transformers 5's `apply_chat_template(..., return_tensors="pt")` `BatchEncoding` works as `input_ids`."""

from __future__ import annotations


def test_torch_prompt_gives_a_torch_answer(load_public) -> None:
    import torch

    model, tokenizer = load_public()
    inputs = tokenizer(["The kettle is"], return_tensors="pt", add_special_tokens=False).to("cuda")
    outputs = model.generate(**inputs, max_new_tokens=5)
    assert isinstance(outputs, torch.Tensor) and outputs.dtype == torch.int64
    assert outputs.shape == (1, inputs["input_ids"].shape[1] + 5)
    assert torch.equal(outputs[:, : inputs["input_ids"].shape[1]], inputs["input_ids"])
    assert tokenizer.batch_decode(outputs)[0].startswith("The kettle is")
    numpy_answer = model.generate(input_ids=inputs["input_ids"].numpy(), max_new_tokens=5)
    assert outputs.tolist() == numpy_answer.tolist()


def test_a_chat_template_batch_encoding_as_input_ids(load_public) -> None:
    from unsloth.chat_templates import get_chat_template

    model, tokenizer = load_public()
    tokenizer = get_chat_template(tokenizer, chat_template="chatml")
    messages = [{"role": "user", "content": "Hi"}]
    inputs = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_tensors="pt")
    outputs = model.generate(input_ids=inputs.to("cuda"), max_new_tokens=4, use_cache=True)
    ids = inputs["input_ids"] if hasattr(inputs, "keys") else inputs
    assert ids.shape[1] < outputs.shape[1] <= ids.shape[1] + 4
    assert outputs[0, : ids.shape[1]].tolist() == ids[0].tolist()
