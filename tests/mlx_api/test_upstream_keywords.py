"""Every keyword of CUDA Unsloth's `from_pretrained` and `get_peft_model`, read from the pinned upstream wheel's
signatures, is accepted at its upstream default by every MLX entry point alike (FastLanguageModel, FastModel,
FastVisionModel), without a "no effect" warning; a value MLX cannot honour is refused by name on each of them.

A keyword upstream adds shows up here as a failing row, and the entry points cannot drift apart again."""

from __future__ import annotations

import ast
import functools
import warnings
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from tools.kits.upstream_wheel import upstream_source

# (file, class, method) of upstream's public calls: FastLanguageModel's get_peft_model is FastLlamaModel's, and
# FastModel's (and FastVisionModel's) is FastBaseModel's.
LOAD_SIGNATURES = (
    ("unsloth/models/loader.py", "FastLanguageModel", "from_pretrained"),
    ("unsloth/models/loader.py", "FastModel", "from_pretrained"),
)
PEFT_SIGNATURES = (
    ("unsloth/models/llama.py", "FastLlamaModel", "get_peft_model"),
    ("unsloth/models/vision.py", "FastBaseModel", "get_peft_model"),
)
POSITIONAL = ("model_name", "model")
# Upstream defaults that are objects rather than literals, as the plain values they stand for.
OBJECT_DEFAULTS = {
    "DEFAULT_DEVICE_MAP": "sequential",
    "OFFLOAD_EMBEDDING_AUTO": "auto",
    "TaskType.CAUSAL_LM": "CAUSAL_LM",
}
# Where the upstream default asks MLX's text entry points for what a text model lacks, the no-op they accept instead.
TEXT_NO_OP = {"finetune_vision_layers": False}
ENTRY_POINTS = ("FastLanguageModel", "FastModel", "FastVisionModel")


def _method(path: str, owner: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(upstream_source(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise LookupError(f"upstream {path} has no {owner}.{name}")


def _module_literal(path: str, name: str) -> Any:
    for node in ast.parse(upstream_source(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(name)


def _default(path: str, node: ast.expr) -> Any:
    text = ast.unparse(node)
    if text in OBJECT_DEFAULTS:
        return OBJECT_DEFAULTS[text]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _module_literal(path, text)


@functools.lru_cache(maxsize=None)
def upstream_keywords(signatures: Tuple[Tuple[str, str, str], ...]) -> Dict[str, Any]:
    """Each keyword of the signatures with its upstream default (the first signature's where two differ)."""
    found: Dict[str, Any] = {}
    for path, owner, name in signatures:
        arguments = _method(path, owner, name).args
        plain = arguments.args[len(arguments.args) - len(arguments.defaults) :]
        pairs = list(zip(plain, arguments.defaults)) + [
            (argument, default)
            for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults)
            if default is not None
        ]
        for argument, default in pairs:
            if argument.arg not in POSITIONAL:
                found.setdefault(argument.arg, _default(path, default))
    return found


def _rows(signatures: Tuple[Tuple[str, str, str], ...]) -> list:
    return [
        pytest.param(entry, keyword, id=f"{entry}-{keyword}")
        for keyword in upstream_keywords(signatures)
        for entry in ENTRY_POINTS
    ]


def _value(entry: str, keyword: str, signatures: Tuple[Tuple[str, str, str], ...]) -> Any:
    if entry != "FastVisionModel" and keyword in TEXT_NO_OP:
        return TEXT_NO_OP[keyword]
    return upstream_keywords(signatures)[keyword]


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_vlm_model import build_tiny_qwen2_vl

    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("keywords-vlm") / "qwen2_vl")


def _entry(entry: str) -> Any:
    import unsloth

    return getattr(unsloth, entry)


def _folder(entry: str, tiny_model_dir: Path, vision_dir: Path) -> str:
    return str(vision_dir if entry == "FastVisionModel" else tiny_model_dir)


def _no_effect_warnings(caught: list, keyword: str) -> list:
    return [str(w.message) for w in caught if "no effect on MLX" in str(w.message) and keyword in str(w.message)]


def test_the_keyword_lists_come_from_upstream() -> None:
    load, peft = upstream_keywords(LOAD_SIGNATURES), upstream_keywords(PEFT_SIGNATURES)
    # The LFM2.5 GRPO notebook's load_in_fp8 and the Qwen3 MoE notebook's target_modules among them.
    assert load["load_in_fp8"] is False and "offload_embedding" in load and "auto_model" in load
    assert peft["bias"] == "none" and "target_modules" in peft and "finetune_vision_layers" in peft


@pytest.mark.parametrize(("entry", "keyword"), _rows(LOAD_SIGNATURES))
def test_from_pretrained_accepts_upstreams_default(entry: str, keyword: str, tiny_model_dir: Path, vision_dir) -> None:
    value = _value(entry, keyword, LOAD_SIGNATURES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, _ = _entry(entry).from_pretrained(_folder(entry, tiny_model_dir, vision_dir), **{keyword: value})
    assert model is not None and not _no_effect_warnings(caught, keyword)


@pytest.mark.parametrize(("entry", "keyword"), _rows(PEFT_SIGNATURES))
def test_get_peft_model_accepts_upstreams_default(entry: str, keyword: str, tiny_model_dir: Path, vision_dir) -> None:
    from unsloth_zoo.mlx.lora import SETTINGS_ATTRIBUTE

    fast = _entry(entry)
    model, _ = fast.from_pretrained(_folder(entry, tiny_model_dir, vision_dir), load_in_4bit=False)
    value = _value(entry, keyword, PEFT_SIGNATURES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fast.get_peft_model(model, **{keyword: value})
    assert getattr(model, SETTINGS_ATTRIBUTE, None) is not None and not _no_effect_warnings(caught, keyword)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("keyword", "value"),
    [("float8_kv_cache", True), ("rope_scaling", {"factor": 2.0})],
)
def test_from_pretrained_refuses_what_mlx_cannot_honour_by_name(
    entry: str, keyword: str, value: Any, tiny_model_dir: Path, vision_dir
) -> None:
    with pytest.raises(NotImplementedError, match=rf"{entry}\.from_pretrained on MLX cannot honour {keyword}="):
        _entry(entry).from_pretrained(_folder(entry, tiny_model_dir, vision_dir), **{keyword: value})


def test_vision_from_pretrained_refuses_qat_scheme_by_name(vision_dir: Path) -> None:
    """Full-finetune QAT at load is built for text models (FastLanguageModel, FastModel on a text model) only."""
    with pytest.raises(NotImplementedError, match=r"FastVisionModel\.from_pretrained on MLX cannot honour qat_scheme="):
        _entry("FastVisionModel").from_pretrained(str(vision_dir), qat_scheme="int4", full_finetuning=True)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("keyword", "value"),
    [("use_dora", True), ("target_parameters", ["mlp.experts.gate_up_proj"]), ("finetune_last_n_layers", 1)],
)
def test_get_peft_model_refuses_what_mlx_cannot_honour_by_name(
    entry: str, keyword: str, value: Any, tiny_model_dir: Path, vision_dir
) -> None:
    fast = _entry(entry)
    model, _ = fast.from_pretrained(_folder(entry, tiny_model_dir, vision_dir), load_in_4bit=False)
    with pytest.raises(NotImplementedError, match=rf"{entry}\.get_peft_model on MLX cannot honour {keyword}="):
        fast.get_peft_model(model, **{keyword: value})


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("keyword", ["unsloth_tiled_mlp", "unsloth_force_compile"])
def test_an_inert_keyword_set_warns_once_naming_it(entry: str, keyword: str, tiny_model_dir: Path, vision_dir) -> None:
    """Speed and memory switches of CUDA's (the Nemotron 3 Nano notebook forces compiling) load with one warning."""
    with pytest.warns(RuntimeWarning, match=rf"{entry}\.from_pretrained: {keyword} has no effect on MLX"):
        _entry(entry).from_pretrained(_folder(entry, tiny_model_dir, vision_dir), **{keyword: True})


def test_vision_get_peft_model_takes_max_seq_length_as_the_text_entry_points_do(vision_dir) -> None:
    from unsloth import FastVisionModel
    from unsloth.mlx.training.arguments import MODEL_MAX_SEQ_LENGTH_ATTRIBUTE

    model, _ = FastVisionModel.from_pretrained(str(vision_dir), max_seq_length=2048)
    model = FastVisionModel.get_peft_model(model, max_seq_length=512)
    assert getattr(model, MODEL_MAX_SEQ_LENGTH_ATTRIBUTE) == 512
