"""Run in a fresh process: encode one image with an mmproj through llama.cpp's multimodal library (libmtmd) and print,
as one line of JSON, the image embeddings it hands the language model, one row per image token in libmtmd's order.

`python llama_cpp_mtmd_embeddings.py MMPROJ.gguf IMAGE.rgb WIDTH HEIGHT MODEL.gguf`: IMAGE.rgb is the image's raw RGB
bytes; MODEL.gguf is the language model libmtmd checks the projector against.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np
from llama_cpp import Llama
from llama_cpp import mtmd_cpp as mtmd
from llama_cpp_greedy import THREADS


def image_embeddings(mmproj: str, rgb: bytes, size: tuple, model: str) -> list:
    llm = Llama(model_path=model, n_ctx=64, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = THREADS
    params.warmup = False
    context = mtmd.mtmd_init_from_file(mmproj.encode(), llm.model, params)
    assert context, f"libmtmd could not load {mmproj}"
    bitmap = mtmd.mtmd_bitmap_init(size[0], size[1], (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
    marker = mtmd.mtmd_default_marker()
    given = mtmd.mtmd_input_text(text=marker, text_len=len(marker), add_special=False, parse_special=True)
    chunks = mtmd.mtmd_input_chunks_init()
    bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
    assert mtmd.mtmd_tokenize(context, chunks, ctypes.byref(given), bitmaps, 1) == 0, "mtmd_tokenize failed"
    rows = []
    for index in range(mtmd.mtmd_input_chunks_size(chunks)):
        chunk = mtmd.mtmd_input_chunks_get(chunks, index)
        if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            continue
        assert mtmd.mtmd_encode_chunk(context, chunk) == 0, "mtmd_encode_chunk failed"
        count, width = mtmd.mtmd_input_chunk_get_n_tokens(chunk), llm.n_embd()
        flat = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(context), shape=(count * width,))
        rows += flat.reshape(count, width).astype(np.float64).tolist()
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(context)
    llm.close()
    return rows


def main(argv: list) -> int:
    mmproj, image, width, height, model = argv
    rows = image_embeddings(mmproj, Path(image).read_bytes(), (int(width), int(height)), model)
    print(json.dumps({"embeddings": rows}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
