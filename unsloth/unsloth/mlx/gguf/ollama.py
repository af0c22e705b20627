# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The Ollama `Modelfile` written beside a GGUF export: `FROM`, the chat template in Go's template language, stops.

Each family of the chat table (`chat/families/`) carries its template, written against Ollama's `.Messages` list
with Go's built-in functions (and Ollama's `currentDate`), so `text/template` renders it as Ollama does. What Go
cannot say, Jinja's `trim` and the splitting of thinking out of an answer, is left out; the leading BOS token is
llama.cpp's to add, not the template's.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from ..chat.families import FAMILIES, family_of_template
from ..chat.families.go import BOS, EOS

logger = logging.getLogger(__name__)

MODELFILE_NAME = "Modelfile"
# Where a Modelfile made by `apply_chat_template` (before any GGUF exists) names the file; the export fills it in.
FILE_LOCATION = "{__FILE_LOCATION__}"

# Each family's Go template, kept in its row of the chat table.
TEMPLATES: Dict[str, str] = {name: family.ollama for name, family in FAMILIES.items()}


def ollama_template(family: str, eos_token: Optional[str], bos_token: Optional[str] = None) -> str:
    """The family's Go template, with the tokenizer's EOS (and BOS) written where the family's turns carry them."""
    return TEMPLATES[family].replace(EOS, eos_token or "").replace(BOS, bos_token or "")


def stop_tokens(family: Optional[str], eos_token: Optional[str]) -> List[str]:
    """The family's end-of-turn marker and the tokenizer's EOS, each once."""
    stops = [FAMILIES[family].stop_marker] if family else []
    return list(dict.fromkeys(stop for stop in [*stops, eos_token] if stop))


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _location(gguf_name: str) -> str:
    """A file beside the Modelfile, or the folder itself (`.`), as CUDA Unsloth names it for a vision model."""
    return gguf_name if gguf_name == "." else f"./{gguf_name}"


def build_modelfile(gguf_name: str, tokenizer: Any, model_type: str = "this") -> str:
    """The Modelfile for `gguf_name` (a file beside it), from the tokenizer's chat template and EOS."""
    prepared = getattr(tokenizer, "_ollama_modelfile", None)
    if isinstance(prepared, str) and FILE_LOCATION in prepared:
        # The notebook's own prompt format (apply_chat_template) wins over the family table, as on CUDA.
        return prepared.replace(FILE_LOCATION, _location(gguf_name))
    eos_token = getattr(tokenizer, "eos_token", None)
    family = family_of_template(getattr(tokenizer, "chat_template", None))
    named = getattr(tokenizer, "unsloth_chat_family", None)
    # Two families may share a Jinja template (Gemma 3 and 3n); the name get_chat_template was given decides.
    if family is not None and named in FAMILIES and FAMILIES[named].template == FAMILIES[family].template:
        family = named
    lines = [f"FROM {_location(gguf_name)}"]
    if family in TEMPLATES:
        template = ollama_template(family, eos_token, getattr(tokenizer, "bos_token", None))
        lines.append(f'TEMPLATE """{template}"""')
    else:
        logger.warning(
            "no Ollama template is known for the chat template of this %s model (not one of the chat table's "
            "families: %s): the Modelfile has no TEMPLATE, so Ollama falls back to its own guess from the GGUF",
            model_type,
            ", ".join(TEMPLATES),
        )
    lines += [f"PARAMETER stop {_quoted(stop)}" for stop in stop_tokens(family, eos_token)]
    return "\n".join(lines) + "\n"
