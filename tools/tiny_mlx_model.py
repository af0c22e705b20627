"""Build a tiny random-weight llama model folder (config, safetensors, tokenizer) that `mlx_lm` loads offline.

`build_tiny_mlx_model(folder)` writes everything a Hugging Face-style model folder holds, with a byte-level BPE
trained on the shared corpus as its tokenizer, so tests and benchmarks never need a model hub.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|eos|>"


@dataclass(frozen=True)
class TinyLlamaShape:
    vocab_size: int = 512
    hidden_size: int = 64
    num_hidden_layers: int = 2
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512


def llama_config(shape: TinyLlamaShape) -> dict:
    """The `config.json` contents: Hugging Face llama field names, which mlx_lm's llama reads."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        **asdict(shape),
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }


def write_tokenizer(folder: Path, vocab_size: int, cache_dir: Path | None) -> None:
    """Save the corpus BPE as a fast tokenizer with its pad and EOS tokens named."""
    from transformers import PreTrainedTokenizerFast

    from tools.tokenizer_kit import build_tokenizer

    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(vocab_size, cache_dir=cache_dir),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
    )
    fast.save_pretrained(str(folder))


def write_random_weights(folder: Path, config: dict, seed: int) -> None:
    """Initialise mlx_lm's llama with a fixed seed and save every parameter to `model.safetensors`."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})


def build_tiny_mlx_model(
    folder: str | Path,
    shape: TinyLlamaShape = TinyLlamaShape(),
    *,
    seed: int = 0,
    tokenizer_cache_dir: str | Path | None = None,
) -> Path:
    """Write a loadable tiny llama into `folder` (created if missing) and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = llama_config(shape)
    write_tokenizer(folder, shape.vocab_size, None if tokenizer_cache_dir is None else Path(tokenizer_cache_dir))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    write_random_weights(folder, config, seed)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--vocab-size", type=int, default=TinyLlamaShape.vocab_size)
    parser.add_argument("--hidden-size", type=int, default=TinyLlamaShape.hidden_size)
    parser.add_argument("--layers", type=int, default=TinyLlamaShape.num_hidden_layers)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    shape = TinyLlamaShape(
        vocab_size=options.vocab_size,
        hidden_size=options.hidden_size,
        num_hidden_layers=options.layers,
        intermediate_size=2 * options.hidden_size,
    )
    print(build_tiny_mlx_model(options.folder, shape, seed=options.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
