"""The GGUF coverage table: derived from mlx_lm, gguf and the pinned llama.cpp, one row per type mlx-lm loads, in
sync with docs/gguf.md, and the same reason on the table as in the export's refusal."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tools import gguf_coverage
from tools.llama_cpp_build import VERSION

ARCH_CPP = """
static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {
    { LLM_ARCH_CLIP,             "clip"             }, // dummy
    { LLM_ARCH_LLAMA,            "llama"            },
    { LLM_ARCH_OPENAI_MOE,       "gpt-oss"          },
    { LLM_ARCH_UNKNOWN,          "(unknown)"        },
};
static const std::map<llm_kv, const char *> LLM_KV_NAMES = {
    { LLM_KV_GENERAL_TYPE, "general.type" },
};
"""
CONSTANTS = """
MODEL_ARCH_NAMES: dict[MODEL_ARCH, str] = {
    MODEL_ARCH.LLAMA:            "llama",
    MODEL_ARCH.GPT_OSS:          "gpt-oss",
    MODEL_ARCH.MMPROJ:           "clip",
}
"""
CONVERTER = """
@ModelBase.register("LlamaForCausalLM", "MistralForCausalLM")
class LlamaModel(TextModel):
    model_arch = gguf.MODEL_ARCH.LLAMA

@ModelBase.register(
    "SmolLM3ForCausalLM",
)
class SmolModel(LlamaModel):
    pass

@ModelBase.register("GptOssForCausalLM")
class GptOss(TextModel):
    model_arch = gguf.MODEL_ARCH.GPT_OSS

@ModelBase.register("LlavaForConditionalGeneration")
class LlavaVision(MmprojModel):
    model_arch = gguf.MODEL_ARCH.MMPROJ
"""


def test_the_loaded_architectures_are_read_from_llama_arch_cpp_names_table_only():
    assert gguf_coverage.parse_loaded_architectures(ARCH_CPP) == ["gpt-oss", "llama"]


def test_converter_classes_inherit_model_arch_and_skip_vision_projectors():
    names = gguf_coverage.parse_gguf_arch_names(CONSTANTS)
    assert gguf_coverage.parse_converter_classes([CONVERTER], names) == {
        "GptOssForCausalLM": "gpt-oss",
        "LlamaForCausalLM": "llama",
        "MistralForCausalLM": "llama",
        "SmolLM3ForCausalLM": "llama",
    }


def test_mlx_lm_model_types_are_modules_with_a_model_and_its_args_plus_the_remapped_names():
    modules = {
        "qwen3": "from .base import BaseModelArgs\n@dataclass\nclass ModelArgs(BaseModelArgs):\n  pass\nclass Model:\n  pass\n",
        "solar_open": "from .glm4_moe import Model\n@dataclass\nclass ModelArgs:\n  pass\n",
        "rope_utils": "class SuScaledRoPE:\n  pass\n",
        "cache": "class ModelArgs:\n  pass\n",
    }
    types = gguf_coverage.parse_mlx_lm_model_types(modules, {"mistral": "llama"})
    assert types == ["mistral", "qwen3", "solar_open"]


def test_the_committed_facts_are_for_the_pinned_llama_cpp():
    from unsloth.mlx.gguf import llama_cpp_facts

    assert llama_cpp_facts.LLAMA_CPP_PYTHON == VERSION, f"regenerate them: {gguf_coverage.FIX_FACTS}"
    assert {"llama", "qwen3", "gpt-oss", "falcon-h1", "gemma3n"} <= llama_cpp_facts.LOADED
    assert llama_cpp_facts.CONVERTED["Qwen3ForCausalLM"] == "qwen3"


def _table_rows(text: str) -> dict:
    section = text.split(gguf_coverage.BEGIN, 1)[1].split(gguf_coverage.END, 1)[0]
    return {match.group(1): line for line in section.splitlines() if (match := re.match(r"\| `([^`]+)` \|", line))}


def test_every_model_type_the_installed_mlx_lm_loads_has_a_row_in_docs():
    rows = _table_rows(gguf_coverage.DOCS.read_text(encoding="utf-8"))
    missing = [t for t in gguf_coverage.installed_mlx_lm_model_types() if t not in rows]
    assert not missing, f"no GGUF coverage row for {missing}: run `{gguf_coverage.FIX}`"
    assert rows["qwen3"].endswith("| exported |")


def test_the_docs_table_is_in_sync_with_the_libraries():
    out = io.StringIO()
    assert gguf_coverage.main(["--check"], stdout=out) == 0, out.getvalue()


@pytest.fixture
def stale_docs(tmp_path: Path) -> Path:
    text = gguf_coverage.DOCS.read_text(encoding="utf-8")
    stale = text.replace("| `qwen3` | `qwen3` | yes | yes | exported |", "| `qwen3` | `qwen3` | yes | yes | refused |")
    assert stale != text
    path = tmp_path / "gguf.md"
    path.write_text(stale, encoding="utf-8")
    return path


def test_check_on_a_stale_table_writes_nothing_and_prints_a_diff_and_the_fix(stale_docs: Path):
    before = stale_docs.read_bytes()
    out = io.StringIO()
    assert gguf_coverage.main(["--check", "--docs", str(stale_docs)], stdout=out) == 1
    assert stale_docs.read_bytes() == before
    report = out.getvalue()
    assert "-| `qwen3` | `qwen3` | yes | yes | refused |" in report
    assert "+| `qwen3` | `qwen3` | yes | yes | exported |" in report
    assert f"regenerate it with: {gguf_coverage.FIX}" in report


def test_writing_fixes_a_stale_table_and_a_second_run_changes_nothing(stale_docs: Path):
    assert gguf_coverage.main(["--docs", str(stale_docs)], stdout=io.StringIO()) == 0
    assert stale_docs.read_text(encoding="utf-8") == gguf_coverage.DOCS.read_text(encoding="utf-8")
    out = io.StringIO()
    assert gguf_coverage.main(["--docs", str(stale_docs)], stdout=out) == 0
    assert out.getvalue() == ""


def test_a_page_with_the_begin_marker_but_no_end_is_a_usage_error(tmp_path: Path):
    page = tmp_path / "gguf.md"
    page.write_text(f"# GGUF\n\n{gguf_coverage.BEGIN}\n| old |\n", encoding="utf-8")
    out = io.StringIO()
    assert gguf_coverage.main(["--check", "--docs", str(page)], stdout=out) == 2
    assert "end marker" in out.getvalue()


@pytest.mark.parametrize("model_type", ["phimoe", "falcon_mamba", "gemma4_unified", "kimi_k3", "gptj"])
def test_the_export_refuses_with_the_tables_reason(model_type):
    from unsloth.mlx.gguf.convert import UnsupportedModel, family_for

    row = _table_rows(gguf_coverage.DOCS.read_text(encoding="utf-8"))[model_type]
    reason = row.rsplit("| refused: ", 1)[1].rstrip(" |")
    with pytest.raises(UnsupportedModel, match=re.escape(f"model_type {model_type!r}: {reason}")):
        family_for({"model_type": model_type})


def test_a_config_architectures_names_the_converter_class_the_type_alone_does_not():
    from unsloth.mlx.gguf.coverage import llama_cpp_architecture

    assert llama_cpp_architecture("exaone") == "exaone"  # the published configs' ExaoneForCausalLM
    assert llama_cpp_architecture("exaone", ["LlamaForCausalLM"]) == "llama"
    assert llama_cpp_architecture("kimi_k2") == "deepseek2"  # mlx-lm reads it as deepseek_v3
    assert llama_cpp_architecture("not_a_model") is None
