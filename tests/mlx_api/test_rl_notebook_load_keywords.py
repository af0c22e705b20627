"""The load keywords of the RL notebooks beyond the scripted four: the gpt-oss 2048 notebook's
`offload_embedding=True` (CUDA Unsloth moves the embedding to CPU memory to save VRAM) loads on MLX with one
"no effect" warning, since Apple's memory is unified; an unknown keyword is still refused by name."""

from __future__ import annotations

import warnings

import pytest


def test_offload_embedding_loads_with_one_no_effect_warning(load_public) -> None:
    with pytest.warns(RuntimeWarning, match=r"offload_embedding has no effect on MLX"):
        model, tokenizer = load_public(offload_embedding=True)
    assert tokenizer("a")["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_public(offload_embedding=False)


def test_an_unknown_load_keyword_is_still_refused_by_name(load_public) -> None:
    with pytest.raises(NotImplementedError, match="offload_embeddings"):
        load_public(offload_embeddings=True)
