"""Run in a fresh process: load a GGUF with llama.cpp, print the prompt's last logits and 8 greedy tokens as JSON.

`python llama_cpp_greedy.py MODEL.gguf '[token ids]' COUNT`; llama.cpp's own loader reads the file, and each next
token is the argmax of llama.cpp's logits, so no sampler setting can change the answer.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama


def main(argv: list) -> int:
    path, prompt, count = argv[0], json.loads(argv[1]), int(argv[2])
    llm = Llama(model_path=path, n_ctx=128, n_threads=2, logits_all=True, verbose=False)
    llm.eval(prompt)
    first = np.array(llm.scores[len(prompt) - 1], dtype=np.float64)
    tokens = []
    for _ in range(count):
        tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([tokens[-1]])
    print(json.dumps({"first_logits": first.tolist(), "tokens": tokens, "vocab": llm.n_vocab()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
