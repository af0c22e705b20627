"""CUDA Unsloth's chat template table (`CHAT_TEMPLATES` in `unsloth/chat_templates.py`), read from the pinned wheel.

Upstream's module imports torch and transformers internals at the top, so it is never imported: its syntax tree is
walked and only the top-level assignments to plain names and to the table's keys, the loops and `try` blocks made
of them, and the helper functions they call are run, with no builtins but `KeyError`. A statement that needs
anything else (an import, a logger) is left out; the tables it fills are what tests compare against.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from tools.kits.upstream_wheel import upstream_source

CHAT_TEMPLATES_PATH = "unsloth/chat_templates.py"
OLLAMA_TEMPLATES_PATH = "unsloth/ollama_template_mappers.py"
SYSTEM_PLACEHOLDER = "{system_message}"
# What the module's statements may use besides what they define themselves.
_BUILTINS = {"KeyError": KeyError}


@dataclass(frozen=True)
class UpstreamChatTable:
    # name -> (jinja template, stop word or (token mapping, stop word), may map the EOS, Ollama Modelfile or None)
    templates: Dict[str, Tuple[Any, ...]]
    default_system_messages: Dict[str, Optional[str]]
    # Every name the run statements bound (helper templates such as the empty-thought Gemma 4 variant).
    namespace: Dict[str, Any]
    skipped: List[str]


def _called_names(node: ast.AST) -> set:
    return {call.func.id for call in ast.walk(node) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)}


def _is_data_statement(node: ast.stmt) -> bool:
    """Assignments, and loops or `try` blocks holding only assignments."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return True
    if isinstance(node, ast.For):
        return all(_is_data_statement(child) for child in node.body) and not node.orelse
    if isinstance(node, ast.Try):
        handlers = [child for handler in node.handlers for child in handler.body]
        return all(_is_data_statement(child) for child in [*node.body, *handlers])
    return False


def run_data_statements(source: str, namespace: Dict[str, Any]) -> List[str]:
    """Run `source`'s top-level data statements (and the functions they call) into `namespace`; the skipped ones'
    first lines are returned."""
    tree = ast.parse(source)
    statements = [node for node in tree.body if _is_data_statement(node)]
    wanted = set().union(*(_called_names(node) for node in statements)) if statements else set()
    helpers = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted}
    namespace.setdefault("__builtins__", dict(_BUILTINS))
    skipped = []
    for node in tree.body:
        if node in statements or node in helpers.values():
            module = ast.Module(body=[node], type_ignores=[])
            try:
                exec(compile(module, "<upstream>", "exec"), namespace)  # noqa: S102 (data statements only)
            except NameError:
                skipped.append((ast.get_source_segment(source, node) or "?").splitlines()[0])
    return skipped


@functools.lru_cache(maxsize=None)
def upstream_chat_table() -> UpstreamChatTable:
    ollama: Dict[str, Any] = {}
    skipped = run_data_statements(upstream_source(OLLAMA_TEMPLATES_PATH), ollama)
    namespace: Dict[str, Any] = {"OLLAMA_TEMPLATES": ollama["OLLAMA_TEMPLATES"]}
    skipped += run_data_statements(upstream_source(CHAT_TEMPLATES_PATH), namespace)
    return UpstreamChatTable(
        templates=dict(namespace["CHAT_TEMPLATES"]),
        default_system_messages=dict(namespace["DEFAULT_SYSTEM_MESSAGE"]),
        namespace=namespace,
        skipped=skipped,
    )


def _escaped(text: str) -> str:
    """`text` as it must be written inside a quoted Jinja literal to render as itself."""
    return text.replace("\\", "\\\\").replace("'", "\\'").replace('"', '\\"')


def upstream_template(name: str, system_message: Optional[str] = None, gemma_tokenizer: bool = False) -> str:
    """The Jinja text upstream's `get_chat_template(tokenizer, name)` stores: the table's template with its system
    placeholder filled with `system_message` or the name's default. On a Gemma tokenizer upstream swaps "chatml"
    for "gemma_chatml" and puts a BOS in front of a template that does not start with one."""
    table = upstream_chat_table()
    if gemma_tokenizer and name == "chatml":
        name = "gemma_chatml"
    template = table.templates[name][0]
    if gemma_tokenizer and not template.startswith(("{{ bos_token }}", "{{- bos_token }}")):
        template = "{{ bos_token }}" + template
    default = table.default_system_messages.get(name)
    if default is None:
        return template
    return template.replace(SYSTEM_PLACEHOLDER, _escaped(default if system_message is None else system_message))


def upstream_stop_word(name: str) -> str:
    """The table's stop word for `name` ("eos_token" meaning the tokenizer's own EOS)."""
    stop = upstream_chat_table().templates[name][1]
    return stop[1] if isinstance(stop, (tuple, list)) else stop
