"""Wall time of our numpy K-quant writer against llama.cpp's `llama_model_quantize`, same model, same float32 file.

A llama-shaped model with random weights is built locally (tools/kits), exported once in float32 (the file
llama.cpp's quantizer is given), and each mix is written by both: ours from the converted float32 tensors (what
`save_pretrained_gguf` does after conversion), llama.cpp's from the float32 file with all CPU threads. The tensor
bytes of the two files are compared too. Needs llama-cpp-python for the llama.cpp column (the `llama_cpp` session).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _tensor_bytes(path: Path) -> dict:
    import gguf

    return {
        tensor.name: (tensor.tensor_type.name, tensor.data.tobytes()) for tensor in gguf.GGUFReader(str(path)).tensors
    }


def measure_in(workdir: Path, options: argparse.Namespace) -> dict:
    from tools.kits.tiny_mlx_model import TinyLlamaShape, build_tiny_mlx_model
    from unsloth import FastLanguageModel
    from unsloth.mlx.gguf.convert import gguf_tensors
    from unsloth.mlx.models.merged import merged_weights, model_config
    from unsloth.mlx.gguf.file_types import quantize_with_llama_cpp
    from unsloth.mlx.gguf.kquants.writer import write_mix
    from unsloth.mlx.gguf.tokenizer import tokenizer_keys

    import mlx.core as mx
    import numpy as np

    shape = TinyLlamaShape(
        vocab_size=options.vocab,
        hidden_size=options.hidden,
        num_hidden_layers=options.layers,
        intermediate_size=options.intermediate,
        num_attention_heads=options.hidden // 64,
        num_key_value_heads=max(1, options.hidden // 256),
    )
    folder = build_tiny_mlx_model(workdir / "model", shape, tokenizer_cache_dir=workdir / "tokenizers")
    model, tokenizer = FastLanguageModel.from_pretrained(str(folder))
    source = model.save_pretrained_gguf(str(workdir / "f32"), tokenizer, quantization_method="f32")
    config = model_config(model)
    weights = {name: np.array(value.astype(mx.float32)) for name, value in merged_weights(model).items()}
    tensors = gguf_tensors(weights, config)
    keys = tokenizer_keys(workdir / "f32", options.vocab)
    parameters = sum(value.size for value in tensors.values())
    rows = {}
    for method in options.methods:
        ours, theirs = workdir / f"ours.{method}.gguf", workdir / f"llama_cpp.{method}.gguf"
        our_seconds, their_seconds = [], []
        for _ in range(options.repeats):
            start = time.perf_counter()
            write_mix(ours, tensors, config, keys, method)
            our_seconds.append(time.perf_counter() - start)
            start = time.perf_counter()
            quantize_with_llama_cpp(source, theirs, method)
            their_seconds.append(time.perf_counter() - start)
        mine, reference = _tensor_bytes(ours), _tensor_bytes(theirs)
        rows[method] = {
            "ours_s": statistics.median(our_seconds),
            "llama_cpp_s": statistics.median(their_seconds),
            "tensors": len(reference),
            "identical": sum(mine.get(name) == value for name, value in reference.items()),
        }
        rows[method]["ratio"] = rows[method]["ours_s"] / rows[method]["llama_cpp_s"]
    return {"shape": shape.__dict__, "parameters": parameters, "repeats": options.repeats, "mixes": rows}


def format_table(result: dict) -> str:
    lines = [
        f"K-quant writer, {result['parameters'] / 1e6:.0f}M parameters, median of {result['repeats']}:",
        "",
        "| mix | ours (numpy) s | llama_model_quantize s | ours / llama.cpp | tensors byte-identical |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for method, row in result["mixes"].items():
        lines.append(
            f"| {method} | {row['ours_s']:.2f} | {row['llama_cpp_s']:.2f} | {row['ratio']:.2f}x "
            f"| {row['identical']}/{row['tensors']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=["q4_k_m"])
    parser.add_argument("--json", type=Path, help="also write the full result here")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-gguf-") as scratch:
        result = measure_in(Path(scratch), options)
    print(format_table(result))
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
