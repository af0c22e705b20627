"""Run in a fresh process: load a language GGUF with its mmproj through llama.cpp's multimodal library (libmtmd) and
print, as JSON, how it reads an image prompt and continues it.

`python llama_cpp_mtmd_greedy.py MMPROJ.gguf IMAGE.rgb WIDTH HEIGHT IMAGE_TOKEN TEXT COUNT MODEL.gguf [MODEL.gguf ...]`:
TEXT holds mtmd's media marker where the image goes; IMAGE.rgb is the image's raw RGB bytes. libmtmd tokenizes the
text, encodes the image with the projector and evaluates both (`mtmd_helper_eval_chunks`, as `llama-mtmd-cli` does);
each next token is the argmax of llama.cpp's logits. The prompt is reported as token ids, each image position as
IMAGE_TOKEN. One line of JSON per model file, in order.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np
from llama_cpp import Llama, llama_cpp
from llama_cpp import mtmd_cpp as mtmd
from llama_cpp_greedy import THREADS


def _prompt_ids(chunks, image_token: int) -> list:
    ids = []
    for index in range(mtmd.mtmd_input_chunks_size(chunks)):
        chunk = mtmd.mtmd_input_chunks_get(chunks, index)
        if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            count = ctypes.c_size_t()
            tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
            ids += [int(tokens[i]) for i in range(count.value)]
        else:
            ids += [image_token] * mtmd.mtmd_input_chunk_get_n_tokens(chunk)
    return ids


def _last_logits(context, n_vocab: int) -> np.ndarray:
    pointer = llama_cpp.llama_get_logits_ith(context, -1)
    return np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float64)


def continue_prompt(path: str, mmproj: str, rgb: bytes, size: tuple, image_token: int, text: str, count: int) -> dict:
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = THREADS
    params.warmup = False
    context = mtmd.mtmd_init_from_file(mmproj.encode(), llm.model, params)
    assert context, f"libmtmd could not load {mmproj}"
    bitmap = mtmd.mtmd_bitmap_init(size[0], size[1], (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
    encoded = text.replace("<__media__>", mtmd.mtmd_default_marker().decode()).encode("utf-8")
    given = mtmd.mtmd_input_text(text=encoded, text_len=len(encoded), add_special=False, parse_special=True)
    chunks = mtmd.mtmd_input_chunks_init()
    bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
    assert mtmd.mtmd_tokenize(context, chunks, ctypes.byref(given), bitmaps, 1) == 0, "mtmd_tokenize failed"
    prompt = _prompt_ids(chunks, image_token)
    past = llama_cpp.llama_pos(0)
    status = mtmd.mtmd_helper_eval_chunks(context, llm.ctx, chunks, 0, 0, 256, True, ctypes.byref(past))
    assert status == 0, f"mtmd_helper_eval_chunks failed: {status}"
    n_vocab = llm.n_vocab()
    first = _last_logits(llm.ctx, n_vocab)
    tokens, logits = [], first
    for _ in range(count):
        tokens.append(int(np.argmax(logits)))
        batch = llama_cpp.llama_batch_get_one((llama_cpp.llama_token * 1)(tokens[-1]), 1)
        assert llama_cpp.llama_decode(llm.ctx, batch) == 0, "llama_decode failed"
        logits = _last_logits(llm.ctx, n_vocab)
    answer = llm.detokenize(tokens, special=True).decode("utf-8", errors="replace")
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(context)
    llm.close()
    return {"path": path, "prompt": prompt, "first_logits": first.tolist(), "tokens": tokens, "answer": answer}


def main(argv: list) -> int:
    mmproj, image, width, height, image_token, text, count, *paths = argv
    rgb = Path(image).read_bytes()
    for path in paths:
        row = continue_prompt(path, mmproj, rgb, (int(width), int(height)), int(image_token), text, int(count))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
