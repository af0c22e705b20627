"""Run in a fresh process: load a GGUF with llama.cpp and print, as JSON, how it tokenizes a text and continues it.

`python llama_cpp_greedy.py MODEL.gguf TEXT COUNT`: llama.cpp's own loader reads the file and its own tokenizer
encodes TEXT; each next token is the argmax of llama.cpp's logits, so no sampler setting can change the answer.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama


def main(argv: list) -> int:
    path, text, count = argv[0], argv[1], int(argv[2])
    llm = Llama(model_path=path, n_ctx=128, n_threads=2, logits_all=True, verbose=False)
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    llm.eval(prompt)
    first = np.array(llm.scores[len(prompt) - 1], dtype=np.float64)
    tokens = []
    for _ in range(count):
        tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([tokens[-1]])
    answer = llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")
    print(json.dumps({"prompt": prompt, "first_logits": first.tolist(), "tokens": tokens, "answer": answer}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
