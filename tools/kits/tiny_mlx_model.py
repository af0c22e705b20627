"""Build a tiny random-weight model folder (config, safetensors, tokenizer) that `mlx_lm` loads offline.

`build_tiny_mlx_model(folder)` writes everything a Hugging Face-style model folder holds, with a BPE trained on
the shared corpus as its tokenizer, so tests and benchmarks never need a model hub. A llama by default;
`architecture=` builds the other families the notebooks train (FAMILY_CONFIGS), each with its family's kind of
tokenizer unless `tokenizer_kind=` says otherwise.
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


def _attention_shape(shape: TinyLlamaShape) -> dict:
    return {
        "model_type": "",
        **asdict(shape),
        "rms_norm_eps": 1e-6,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "bos_token_id": None,
        "torch_dtype": "float32",
    }


def family_config(architecture: str, shape: TinyLlamaShape) -> dict:
    """A config.json for `architecture` with the family's own traits (biases, head sizes, norms, rope)."""
    if architecture == "llama":
        # Llama 3.1's rope scaling, with an original context short enough that most frequencies are rescaled.
        scaling = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
        return {**llama_config(shape), "rope_scaling": scaling}
    head_dim = 2 * shape.hidden_size // shape.num_attention_heads  # wider than hidden / heads, as Gemma's are
    base = _attention_shape(shape)
    extra: dict = {
        "mistral": {"architectures": ["MistralForCausalLM"], "rope_theta": 1e6, "tie_word_embeddings": False},
        "qwen2": {"architectures": ["Qwen2ForCausalLM"], "rope_theta": 1e6, "tie_word_embeddings": True},
        "qwen3": {
            "architectures": ["Qwen3ForCausalLM"],
            "rope_theta": 1e6,
            "tie_word_embeddings": True,
            "head_dim": head_dim,
        },
        "gemma2": {
            "architectures": ["Gemma2ForCausalLM"],
            "head_dim": head_dim,
            "query_pre_attn_scalar": head_dim,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "rope_theta": 10000.0,
            "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": True,
        },
        # Every second layer global, so the local layers' own rope base is exercised.
        "gemma3_text": {
            "architectures": ["Gemma3ForCausalLM"],
            "head_dim": head_dim,
            "query_pre_attn_scalar": head_dim,
            "rope_theta": 1e6,
            "rope_local_base_freq": 10000.0,
            "sliding_window": 512,
            "sliding_window_pattern": 2,
            "tie_word_embeddings": True,
        },
        "phi3": {"architectures": ["Phi3ForCausalLM"], "rope_theta": 10000.0, "tie_word_embeddings": False},
    }[architecture]
    return {**base, **extra, "model_type": architecture}


# Each family's kind of tokenizer (tools.kits.tokenizer_kit.TOKENIZER_KINDS).
FAMILY_TOKENIZERS = {
    "llama": "llama3",
    "mistral": "sentencepiece",
    "qwen2": "qwen2",
    "qwen3": "qwen2",
    "gemma2": "sentencepiece",
    "gemma3_text": "sentencepiece",
    "phi3": "sentencepiece",
}
FAMILY_CONFIGS = tuple(FAMILY_TOKENIZERS)
MLX_LM_MODULES = {"mistral": "llama"}


def write_tokenizer(folder: Path, vocab_size: int, cache_dir: Path | None, kind: str = "gpt2") -> None:
    """Save the corpus BPE as a fast tokenizer with its pad and EOS tokens named."""
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    fast = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(vocab_size, cache_dir=cache_dir, kind=kind),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
    )
    fast.save_pretrained(str(folder))


def write_random_weights(folder: Path, config: dict, seed: int) -> None:
    """Initialise mlx_lm's model class for the config with a fixed seed and save it to `model.safetensors`."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    # mlx_lm runs Mistral's dense models with its llama class, and the types it remaps with the class it names.
    from mlx_lm.utils import MODEL_REMAPPING

    model_type = MLX_LM_MODULES.get(
        config["model_type"], MODEL_REMAPPING.get(config["model_type"], config["model_type"])
    )
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    if config.get("tie_word_embeddings"):
        weights.pop("lm_head.weight", None)  # a tied model's checkpoint has no separate output matrix
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})


def build_tiny_mlx_model(
    folder: str | Path,
    shape: TinyLlamaShape = TinyLlamaShape(),
    *,
    seed: int = 0,
    tokenizer_cache_dir: str | Path | None = None,
    architecture: str | None = None,
    tokenizer_kind: str | None = None,
) -> Path:
    """Write a loadable tiny model into `folder` (created if missing) and return its path.

    Without `architecture` it is the plain llama with a GPT-2 style tokenizer the other tests are written for.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = llama_config(shape) if architecture is None else family_config(architecture, shape)
    kind = tokenizer_kind or ("gpt2" if architecture is None else FAMILY_TOKENIZERS[architecture])
    write_tokenizer(folder, shape.vocab_size, None if tokenizer_cache_dir is None else Path(tokenizer_cache_dir), kind)
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
    parser.add_argument("--architecture", choices=FAMILY_CONFIGS, default=None)
    options = parser.parse_args(argv)
    shape = TinyLlamaShape(
        vocab_size=options.vocab_size,
        hidden_size=options.hidden_size,
        num_hidden_layers=options.layers,
        intermediate_size=2 * options.hidden_size,
    )
    print(build_tiny_mlx_model(options.folder, shape, seed=options.seed, architecture=options.architecture))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
