"""The exported GGUF, reloaded by llama.cpp itself in a fresh process, continues a prompt as the MLX model does.

The tiny llama is LoRA-trained on the chat rows until it answers them, then exported (LoRA merged) in every
type this install writes, f16 and q8_0 among them. Each file is loaded by llama-cpp-python, built from source
by the `llama_cpp` nox session; llama.cpp tokenizes the prompt text itself, and from it both sides pick 8 tokens
greedily. The logits at the prompt's last position (the first generated token's) are compared relative to
their largest magnitude.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from unsloth import UnslothTrainer

from ..conftest import NEUTRAL_CWD, QUESTIONS, chat_text

RUNNER = Path(__file__).with_name("llama_cpp_greedy.py")
NEW_TOKENS = 8
# method: (file, least tokens equal to the MLX model's, largest relative logit gap); f16 and q8_0 are the
# issue's bounds, the others about twice what was measured (llama.cpp keeps its KV cache in f16, so even f32 differs).
EXPECTED = {
    "f32": ("unsloth.F32.gguf", 8, 1e-3),
    "f16": ("unsloth.F16.gguf", 8, 1e-3),
    "bf16": ("unsloth.BF16.gguf", 8, 5e-3),
    "q8_0": ("unsloth.Q8_0.gguf", 7, 5e-2),
    "q5_1": ("unsloth.Q5_1.gguf", 7, 1e-1),
    "q5_0": ("unsloth.Q5_0.gguf", 7, 1e-1),
    "q4_1": ("unsloth.Q4_1.gguf", 6, 2e-1),
    "q4_0": ("unsloth.Q4_0.gguf", 6, 2e-1),
}


def mlx_greedy(model, prompt: list, count: int) -> tuple:
    import mlx.core as mx

    model.eval()
    sequence, first = list(prompt), None
    for _ in range(count):
        logits = model(mx.array([sequence])).astype(mx.float32)[0, -1]
        first = np.array(logits, dtype=np.float64) if first is None else first
        sequence.append(int(mx.argmax(logits).item()))
    return first, sequence[len(prompt) :]


def llama_cpp_greedy(path: Path, text: str, count: int) -> dict:
    result = subprocess.run(
        [sys.executable, str(RUNNER), str(path), text, str(count)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=NEUTRAL_CWD,
        env={**os.environ, "UNSLOTH_MLX": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained_export(tiny_model_dir, tmp_path_factory):
    """The trained model's greedy answer and first logits, and its f16 and q8_0 exports."""
    from unsloth import FastLanguageModel, UnslothTrainingArguments

    model, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir))
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
    folder = tmp_path_factory.mktemp("llama-cpp-export")
    rows = [{"text": chat_text(question, answer)} for question, answer in QUESTIONS]
    args = UnslothTrainingArguments(
        output_dir=str(folder / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_steps=60,
        warmup_steps=0,
        learning_rate=2e-2,
        lr_scheduler_type="constant",
        save_strategy="no",
        max_seq_length=64,
    )
    UnslothTrainer(model, tokenizer, rows, args=args).train()
    question, _ = QUESTIONS[0]
    text = f"<|user|>\n{question}<|eos|>\n<|assistant|>\n"
    prompt = tokenizer(text)["input_ids"]
    first, tokens = mlx_greedy(model, prompt, NEW_TOKENS)
    paths = {
        method: model.save_pretrained_gguf(str(folder / "gguf"), tokenizer, quantization_method=method)
        for method in EXPECTED
    }
    answer = tokenizer.decode(tokens)
    return {"text": text, "prompt": prompt, "first": first, "tokens": tokens, "answer": answer, "paths": paths}


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_llama_cpp_continues_the_prompt_as_the_mlx_model_does(trained_export, method):
    file_name, least_equal, largest_gap = EXPECTED[method]
    path = trained_export["paths"][method]
    assert path.name == file_name
    reloaded = llama_cpp_greedy(path, trained_export["text"], NEW_TOKENS)
    # llama.cpp reads the byte-level BPE vocabulary as the Hugging Face tokenizer does, both ways.
    assert reloaded["prompt"] == trained_export["prompt"]

    expected = trained_export["tokens"]
    equal = sum(mine == theirs for mine, theirs in zip(reloaded["tokens"], expected))
    first = trained_export["first"]
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max() / np.abs(first).max())
    answer = trained_export["answer"]
    print(f"{method}: {equal}/{NEW_TOKENS} greedy tokens equal, first-position logits gap {gap:.2e} ({answer!r})")
    assert equal >= least_equal, (reloaded["tokens"], expected)
    if equal == NEW_TOKENS:
        assert reloaded["answer"] == answer
    assert gap < largest_gap
    # The model really learned its answer, so the greedy tokens are the answer's, not a random model's noise.
    assert "kettle" in answer
