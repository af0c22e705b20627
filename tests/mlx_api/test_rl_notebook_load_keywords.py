"""The load keywords of the RL notebooks beyond the scripted four: the gpt-oss 2048 notebook's
`offload_embedding=True` (CUDA Unsloth moves the embedding to CPU memory to save VRAM) loads on MLX with one
"no effect" warning, since Apple's memory is unified; the Minesweeper notebook's `torch_dtype=` is `dtype=` by its
older transformers name; an unknown keyword is still refused by name."""

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


def _parameter_dtypes(model) -> set:
    from mlx.utils import tree_flatten

    return {array.dtype for _, array in tree_flatten(model.parameters())}


def test_torch_dtype_is_transformers_older_name_for_dtype(load_public) -> None:
    import mlx.core as mx

    # The gpt-oss Minesweeper notebook loads with torch_dtype=torch.bfloat16; a name works without torch.
    model, _ = load_public(torch_dtype="bfloat16")
    assert _parameter_dtypes(model) == {mx.bfloat16}
    model, _ = load_public(torch_dtype="bfloat16", dtype="bfloat16")
    assert _parameter_dtypes(model) == {mx.bfloat16}


def test_dtype_and_a_different_torch_dtype_are_refused_naming_both(load_public) -> None:
    with pytest.raises(ValueError, match=r"dtype='float32'.*torch_dtype='bfloat16'"):
        load_public(dtype="float32", torch_dtype="bfloat16")


def test_the_lfm2_5_grpo_notebooks_load_call(load_public) -> None:
    """`load_in_fp8 = False` was refused by FastLanguageModel though FastModel took it; both share one table now."""
    with pytest.warns(RuntimeWarning, match=r"max_lora_rank has no effect on MLX"):
        model, tokenizer = load_public(
            max_seq_length=256, load_in_4bit=False, fast_inference=False, max_lora_rank=32, load_in_fp8=False
        )
    assert tokenizer("a")["input_ids"]
