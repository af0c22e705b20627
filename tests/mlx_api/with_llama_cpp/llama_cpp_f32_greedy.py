"""`llama_cpp_greedy.py` with llama.cpp's key/value cache in f32 instead of its default f16, so that an f32 file is
run with no rounding between it and MLX: `python llama_cpp_f32_greedy.py TEXT COUNT MODEL.gguf [MODEL.gguf ...]`."""

from __future__ import annotations

import sys

from llama_cpp_greedy import main

F32 = 0  # GGML_TYPE_F32

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], type_k=F32, type_v=F32))
