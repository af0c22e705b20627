"""Build a tiny random sentence-transformers folder (modules.json, pooling, Dense, prompts) offline, without torch.

`build_tiny_embedding_model(folder, family)` writes what a Hub embedding model holds: the backbone's config and
weights (mlx-embeddings' model class, seeded), a tokenizer trained on the shared corpus, and the
sentence-transformers modules its family's published model declares (FAMILIES). sentence-transformers loads the
same folder on CPU torch, which is what the parity tests compare against.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_TOKEN, EOS_TOKEN = "<|pad|>", "<|eos|>"
PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}
# ST's names for Dense activations, as its config files spell them.
IDENTITY, TANH = "torch.nn.modules.linear.Identity", "torch.nn.modules.activation.Tanh"


@dataclass(frozen=True)
class TinyEmbeddingFamily:
    """One published embedding model's shape, scaled down: its backbone config and the modules after it."""

    config: Dict[str, Any]
    pooling: str
    # "wordpiece" (BERT's [CLS] x [SEP]), "byte-level-bert" (ModernBERT's byte-level BPE, [CLS] x [SEP]),
    # "sentencepiece" (XLM-RoBERTa's unigram <s> x </s>), "bpe" (an EOS appended, left padding) or "bpe-right"
    tokenizer: str
    normalize: bool = False
    dense: Tuple[Tuple[int, int, str], ...] = ()
    prompts: Dict[str, str] = field(default_factory=dict)


def _bert_config() -> Dict[str, Any]:
    return {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "vocab_size": 512,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 128,
        "type_vocab_size": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }


def _qwen3_config() -> Dict[str, Any]:
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3Model"],
        "vocab_size": 512,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 64,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": True,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "torch_dtype": "float32",
    }


def _xlm_roberta_config() -> Dict[str, Any]:
    return {
        **_bert_config(),
        "model_type": "xlm-roberta",
        "architectures": ["XLMRobertaModel"],
        "type_vocab_size": 1,
        "layer_norm_eps": 1e-5,
        # XLM-RoBERTa's ids: <s> 0, <pad> 1, </s> 2; positions start after the pad id.
        "bos_token_id": 0,
        "pad_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 130,
    }


def _modernbert_config() -> Dict[str, Any]:
    return {
        "model_type": "modernbert",
        "architectures": ["ModernBertModel"],
        "vocab_size": 512,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 128,
        "global_attn_every_n_layers": 2,
        "local_attention": 16,
        "norm_eps": 1e-5,
        "hidden_activation": "gelu",
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
        "cls_token_id": 2,
        "sep_token_id": 3,
        "torch_dtype": "float32",
    }


def _gemma3_config() -> Dict[str, Any]:
    return {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3TextModel"],
        "vocab_size": 512,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "query_pre_attn_scalar": 8,
        "rms_norm_eps": 1e-6,
        # A window of 8, so the test rows run past it on the sliding layer.
        "sliding_window": 8,
        "sliding_window_pattern": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "max_position_embeddings": 128,
        "use_bidirectional_attention": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "torch_dtype": "float32",
    }


# Each row is the published model the notebooks train, at hidden size 32 and two layers.
FAMILIES: Dict[str, TinyEmbeddingFamily] = {
    # all-MiniLM-L6-v2: BERT, mean pooling, normalized.
    "bert": TinyEmbeddingFamily(_bert_config(), "mean", "wordpiece", normalize=True),
    # Qwen3-Embedding: last-token pooling over left-padded rows, normalized, query prompt.
    # BGE-M3: XLM-RoBERTa, CLS pooling, normalized.
    "xlm-roberta": TinyEmbeddingFamily(_xlm_roberta_config(), "cls", "sentencepiece", normalize=True),
    # gte-modernbert-base: ModernBERT, CLS pooling, normalized; rows longer than its local window of 16.
    "modernbert": TinyEmbeddingFamily(_modernbert_config(), "cls", "byte-level-bert", normalize=True),
    # EmbeddingGemma: bidirectional Gemma 3, mean pooling, two Dense layers (up 4x and back), query/document prompts.
    "gemma3_text": TinyEmbeddingFamily(
        _gemma3_config(),
        "mean",
        "bpe-right",
        normalize=True,
        dense=((32, 128, IDENTITY), (128, 32, IDENTITY)),
        prompts=dict(PROMPTS),
    ),
    "qwen3": TinyEmbeddingFamily(
        _qwen3_config(), "lasttoken", "bpe", normalize=True, prompts={"query": "Instruct: search\nQuery: "}
    ),
}


def _wordpiece_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import read_corpus_texts

    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(WORDPIECE_SPECIALS))
    raw.train_from_iterator(read_corpus_texts(), trainer)
    cls, sep = raw.token_to_id("[CLS]"), raw.token_to_id("[SEP]")
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    raw.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _byte_level_bert_tokenizer(vocab_size: int) -> Any:
    """gte-modernbert-base's kind: a byte-level BPE (GPT-2's split, no prefix space) that wraps each text in
    [CLS] x [SEP], BERT's special tokens among its ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import read_corpus_texts

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(WORDPIECE_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(read_corpus_texts(), trainer)
    cls, sep = raw.token_to_id("[CLS]"), raw.token_to_id("[SEP]")
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _sentencepiece_tokenizer(vocab_size: int) -> Any:
    """BGE-M3's kind: a SentencePiece unigram model (NFKC charsmap) that transformers converts to XLM-RoBERTa's
    fast tokenizer, its ids shifted past <s> <pad> </s> <unk> and <mask> appended."""
    import shutil
    import tempfile

    import sentencepiece
    from transformers import XLMRobertaTokenizer

    from tools.kits.tokenizer_kit import read_corpus_texts

    lines = [line for text in read_corpus_texts() for line in text.splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_prefix=f"{tmp}/spm",
            vocab_size=vocab_size - 2,  # XLM-RoBERTa adds <pad> and <mask> to the model's own pieces
            model_type="unigram",
            normalization_rule_name="nmt_nfkc",
            num_threads=1,
            minloglevel=2,
        )
        Path(tmp, "source").mkdir()
        shutil.copyfile(f"{tmp}/spm.model", f"{tmp}/source/sentencepiece.bpe.model")
        return XLMRobertaTokenizer.from_pretrained(f"{tmp}/source")


def _bpe_tokenizer(vocab_size: int, padding_side: str = "left") -> Any:
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_tokenizer

    raw = build_tokenizer(vocab_size)
    eos = raw.token_to_id(EOS_TOKEN)
    # Qwen3-Embedding's tokenizer appends its end token, which last-token pooling then reads.
    raw.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, padding_side=padding_side
    )


def _write_weights(folder: Path, config: Dict[str, Any], seed: int) -> None:
    """mlx-embeddings' model for the config, seeded, saved under Hugging Face's names for the bare backbone."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    module = importlib.import_module(f"mlx_embeddings.models.{config['model_type'].replace('-', '_')}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    # Its own Dense layers (EmbeddingGemma's) live in the ST folder's N_Dense folders instead.
    if "dense" in model:
        del model["dense"]
    weights = {}
    for name, value in tree_flatten(model.parameters()):
        # mlx-embeddings nests decoder backbones under `model.`; the Hub's bare model has no such prefix.
        weights[name.removeprefix("model.")] = value
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})


def _write_modules(folder: Path, family: TinyEmbeddingFamily, max_seq_length: int) -> None:
    import mlx.core as mx

    hidden = family.config["hidden_size"]
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    wanted = {"cls": "cls_token", "mean": "mean_tokens", "lasttoken": "lasttoken"}[family.pooling]
    pooling = {"word_embedding_dimension": hidden, **{f"pooling_mode_{m}": m == wanted for m in modes}}
    pooling["include_prompt"] = True
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    for number, (inputs, outputs, activation) in enumerate(family.dense, start=2):
        path = folder / f"{number}_Dense"
        path.mkdir(exist_ok=True)
        dense = {"in_features": inputs, "out_features": outputs, "bias": False, "activation_function": activation}
        (path / "config.json").write_text(json.dumps(dense, indent=2))
        weight = mx.random.normal((outputs, inputs)) * (inputs**-0.5)
        mx.save_safetensors(str(path / "model.safetensors"), {"linear.weight": weight}, metadata={"format": "pt"})
        modules.append(
            {"idx": number, "name": str(number), "path": path.name, "type": "sentence_transformers.models.Dense"}
        )
    if family.normalize:
        index = len(modules)
        modules.append(
            {
                "idx": index,
                "name": str(index),
                "path": f"{index}_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
        (folder / f"{index}_Normalize").mkdir(exist_ok=True)
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    settings = {"prompts": family.prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings, indent=2))


def build_tiny_embedding_model(
    folder: str | Path,
    family: str = "bert",
    *,
    seed: int = 0,
    max_seq_length: Optional[int] = 64,
    config_overrides: Optional[Dict[str, Any]] = None,
) -> Path:
    """Write the tiny `family` embedding model into `folder` (created if missing) and return its path;
    `config_overrides` resizes the backbone (the benchmark's larger shapes), the vocabulary excepted."""
    import mlx.core as mx

    row = FAMILIES[family]
    if config_overrides:
        row = replace(row, config={**row.config, **config_overrides})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = row.config["vocab_size"]
    if row.tokenizer == "wordpiece":
        tokenizer = _wordpiece_tokenizer(vocab)
    elif row.tokenizer == "sentencepiece":
        tokenizer = _sentencepiece_tokenizer(vocab)
    elif row.tokenizer == "byte-level-bert":
        tokenizer = _byte_level_bert_tokenizer(vocab)
    else:
        tokenizer = _bpe_tokenizer(vocab, "right" if row.tokenizer == "bpe-right" else "left")
    tokenizer.model_max_length = max_seq_length
    tokenizer.save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps(row.config, indent=2) + "\n", encoding="utf-8")
    _write_weights(folder, row.config, seed)
    mx.random.seed(seed + 1)
    _write_modules(folder, row, max_seq_length or row.config["max_position_embeddings"])
    return folder
