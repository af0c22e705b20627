"""Run in a fresh process: load GGUF files with llama.cpp and print, as JSON, how each tokenizes a text and continues it.

`python llama_cpp_greedy.py TEXT COUNT MODEL.gguf [MODEL.gguf ...]`: llama.cpp's own loader reads each file and its
own tokenizer encodes TEXT; each next token is the argmax of llama.cpp's logits, so no sampler setting can change
the answer. One line of JSON per file, in order; one process serves every file, so the library loads once.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama

# One thread, prompt batches included: the session runs a test file per core, and llama.cpp's threads spin-wait
# for each other, so a second thread on a busy core costs more than it gives on a tiny model.
THREADS = 1


def continue_text(path: str, text: str, count: int, **settings) -> dict:
    llm = Llama(
        model_path=path,
        n_ctx=128,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        logits_all=True,
        verbose=False,
        **settings,
    )
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    llm.eval(prompt)
    first = np.array(llm.scores[len(prompt) - 1], dtype=np.float64)
    tokens = []
    for _ in range(count):
        tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([tokens[-1]])
    answer = llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")
    llm.close()
    return {"path": path, "prompt": prompt, "first_logits": first.tolist(), "tokens": tokens, "answer": answer}


def main(argv: list, **settings) -> int:
    """`settings` are passed to `Llama` (the f32 runner's cache types)."""
    text, count, paths = argv[0], int(argv[1]), argv[2:]
    for path in paths:
        print(json.dumps(continue_text(path, text, count, **settings)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
