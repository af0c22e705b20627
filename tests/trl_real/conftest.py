"""The real trl, transformers and CPU torch: a tiny random llama and the locally trained fast tokenizer."""

from __future__ import annotations

import pytest


PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|eos|>"


@pytest.fixture(scope="session")
def hf_tokenizer(tokenizer):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    fast.chat_template = None
    return fast


def _llama_config(tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


@pytest.fixture
def tiny_llama(hf_tokenizer):
    """A randomly initialised one-layer llama, fresh for each test (trainers move and wrap their model)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_llama_config(hf_tokenizer))


@pytest.fixture
def tiny_llama_reference(hf_tokenizer):
    """A second llama, the frozen reference DPO and KTO compare against."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(1)
    return LlamaForCausalLM(_llama_config(hf_tokenizer))


@pytest.fixture
def tiny_llama_scorer(hf_tokenizer):
    """The same llama with a one-label scoring head, as reward trainers need."""
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(0)
    config = _llama_config(hf_tokenizer)
    config.num_labels = 1
    return LlamaForSequenceClassification(config)


@pytest.fixture(scope="session")
def heavy_hf_tokenizer():
    """A 128k-vocabulary fast tokenizer (about 7 MiB pickled), built locally like the small one."""
    from transformers import PreTrainedTokenizerFast

    from tools.kits.tokenizer_kit import build_heavy_tokenizer

    return PreTrainedTokenizerFast(tokenizer_object=build_heavy_tokenizer(), eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)


@pytest.fixture
def tiny_llama_for_heavy(heavy_hf_tokenizer):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_llama_config(heavy_hf_tokenizer))
