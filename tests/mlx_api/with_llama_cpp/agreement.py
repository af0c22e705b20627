"""What the llama.cpp tests share: train a tiny model until it answers, continue a prompt greedily on MLX, and
continue it with llama.cpp from GGUF files in one fresh process."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
from urllib.parse import unquote, urlparse
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ..conftest import NEUTRAL_CWD, QUESTIONS, chat_text

RUNNER = Path(__file__).with_name("llama_cpp_greedy.py")
NEW_TOKENS = 8


def prompt_text() -> str:
    question, _ = QUESTIONS[0]
    return f"<|user|>\n{question}<|eos|>\n<|assistant|>\n"


def train_until_it_answers(
    model: Any, tokenizer: Any, folder: Path, steps: int, learning_rate: float, dataset_order: str = ""
) -> None:
    from unsloth import UnslothTrainer, UnslothTrainingArguments

    rows = [{"text": chat_text(question, answer)} for question, answer in QUESTIONS]
    args = UnslothTrainingArguments(
        output_dir=str(folder / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        max_steps=steps,
        warmup_steps=0,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        save_strategy="no",
        max_seq_length=64,
        **({"dataset_order": dataset_order} if dataset_order else {}),
    )
    UnslothTrainer(model, tokenizer, rows, args=args).train()


def mlx_greedy(model: Any, prompt: List[int], count: int) -> Tuple[np.ndarray, List[int]]:
    """The first generated position's logits and `count` greedy tokens, computed by the MLX model."""
    import mlx.core as mx

    model.eval()
    sequence: List[int] = list(prompt)
    first = None
    for _ in range(count):
        logits = model(mx.array([sequence])).astype(mx.float32)[0, -1]
        first = np.array(logits, dtype=np.float64) if first is None else first
        sequence.append(int(mx.argmax(logits).item()))
    assert first is not None
    return first, sequence[len(prompt) :]


def llama_cpp_continuations(
    paths: Sequence[Path], text: str, count: int = NEW_TOKENS, runner: Path = RUNNER
) -> Dict[str, dict]:
    """llama.cpp's prompt tokens, first logits, greedy tokens and answer for each file, by file name."""
    result = subprocess.run(
        [sys.executable, str(runner), text, str(count), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=NEUTRAL_CWD,
        env={**os.environ, "UNSLOTH_MLX": "1"},
    )
    assert result.returncode == 0, runner_failure(result.returncode, result.stderr)
    rows = [json.loads(line) for line in result.stdout.strip().splitlines() if line.startswith("{")]
    return {Path(row["path"]).name: row for row in rows}


def agreement(reloaded: dict, tokens: List[int], first: np.ndarray) -> Tuple[int, float]:
    """Greedy tokens equal to the MLX model's, and the first-position logits gap relative to the largest logit."""
    equal = sum(mine == theirs for mine, theirs in zip(reloaded["tokens"], tokens))
    gap = float(np.abs(np.array(reloaded["first_logits"]) - first).max() / np.abs(first).max())
    return equal, gap


def trained_export(
    folder: Path, root: Path, name: str, targets: Sequence[str], methods: Sequence[str], steps: int
) -> Dict[str, Any]:
    """The model in `folder` LoRA-trained (seeded, so each family trains alike whichever ran before it) until it
    answers, its MLX continuation of the prompt, and llama.cpp's of the files exported in `methods`."""
    import mlx.core as mx

    from unsloth import FastLanguageModel

    mx.random.seed(0)
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0, target_modules=list(targets))
    train_until_it_answers(model, tokenizer, root, steps=steps, learning_rate=1e-2)
    text = prompt_text()
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    first, tokens = mlx_greedy(model, prompt, NEW_TOKENS)
    paths = model.save_pretrained_gguf(str(root / "gguf"), tokenizer, quantization_method=list(methods))
    reloaded = llama_cpp_continuations(paths, text)
    answer = tokenizer.decode(tokens)
    return {
        "name": name,
        "prompt": prompt,
        "first": first,
        "tokens": tokens,
        "answer": answer,
        "paths": paths,
        "reloaded": reloaded,
    }


def assert_agrees(export: Dict[str, Any], method: str, expected: Tuple[str, int, float]) -> None:
    """llama.cpp's run of one file against MLX's: the same prompt tokens, at least `expected`'s equal greedy tokens
    and a first-logits gap below its bound, on a model that learned its answer (so the tokens are not noise)."""
    file_name, least_equal, largest_gap = expected
    reloaded = export["reloaded"][file_name]
    assert reloaded["prompt"] == export["prompt"]
    equal, gap = agreement(reloaded, export["tokens"], export["first"])
    print(f"{export['name']} {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({export['answer']!r})")
    assert equal >= least_equal, (reloaded["tokens"], export["tokens"])
    assert gap < largest_gap
    assert "kettle" in export["answer"]


def runner_failure(returncode: int, stderr: str) -> str:
    """Why the llama.cpp process failed, in words: a killing signal by its name, else its status; then its stderr."""
    if returncode < 0:
        name = _signal_name(-returncode)
        what = f"llama.cpp was killed by {name or f'signal {-returncode}'}"
    else:
        # A shell between us and Python reports a death by signal N as status 128 + N.
        name = _signal_name(returncode - 128) if returncode > 128 else ""
        what = f"llama.cpp's runner exited with status {returncode}" + (f" (128 + {name}?)" if name else "")
    if name == "SIGILL":
        what += (
            f": it was built with instructions this CPU will not run ({_installed_llama_cpp()}); rebuild it"
            " with -DGGML_NATIVE=OFF, as the llama_cpp nox session does (tools/llama_cpp_build.py)"
        )
    return f"{what}\nits stderr: {stderr[-3000:].strip() or '(empty)'}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return ""


def _installed_llama_cpp() -> str:
    """The llama_cpp package's folder and, when pip recorded it, the wheel it was installed from."""
    spec = importlib.util.find_spec("llama_cpp")
    where = f"llama_cpp at {Path(spec.origin).parent}" if spec and spec.origin else "llama_cpp not found"
    try:
        recorded = importlib.metadata.distribution("llama_cpp_python").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        recorded = None
    url = json.loads(recorded).get("url", "") if recorded else ""
    return f"{where}, installed from {unquote(urlparse(url).path)}" if url.startswith("file:") else where
