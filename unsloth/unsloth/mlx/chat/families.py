# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The chat formats CUDA Unsloth notebooks name, each as its model family publishes it, in one table.

Each family carries its Jinja template (written here, rendered by the tokenizer's `apply_chat_template`), the
markers that open a user turn and an assistant turn (what `train_on_responses_only` looks for), and the marker
that ends an assistant turn. Standard library only, so both `chat_templates` modules can import it cheaply.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

DEFAULT_INSTRUCTION_PART = "<|user|>\n"
DEFAULT_RESPONSE_PART = "<|assistant|>\n"


class ChatFamily(NamedTuple):
    template: str
    instruction_part: str
    response_part: str
    # The text that ends an assistant turn; None when the template ends it with the tokenizer's own eos_token.
    stop_marker: Optional[str]


def _llama_3_1(date_rule: str) -> str:
    """Llama 3.1 onwards: a system header with the knowledge cut-off and a date, every turn trimmed."""
    return (
        r"{{- bos_token -}}"
        r"{%- if date_string is not defined -%}" + date_rule + r"{%- endif -%}"
        r"{%- if messages and messages[0]['role'] == 'system' -%}"
        r"{%- set system_message = messages[0]['content'] | trim -%}{%- set loop_messages = messages[1:] -%}"
        r"{%- else -%}{%- set system_message = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
        r"{{- '<|start_header_id|>system<|end_header_id|>\n\n' -}}"
        r"{{- 'Cutting Knowledge Date: December 2023\n' -}}"
        r"{{- 'Today Date: ' + date_string + '\n\n' -}}"
        r"{{- system_message + '<|eot_id|>' -}}"
        r"{%- for message in loop_messages -%}"
        r"{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}"
        r"{%- endfor -%}"
        r"{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"
    )


_FIXED_DATE = r"{%- set date_string = '26 Jul 2024' -%}"
# Llama 3.2 stamps today's date when the renderer offers strftime_now (transformers does).
_TODAYS_DATE = (
    r"{%- if strftime_now is defined -%}{%- set date_string = strftime_now('%d %b %Y') -%}"
    r"{%- else -%}" + _FIXED_DATE + r"{%- endif -%}"
)

LLAMA_3 = (
    r"{%- for message in messages -%}"
    r"{%- if loop.first -%}{{- bos_token -}}{%- endif -%}"
    r"{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"
)

CHATML = (
    r"{%- for message in messages -%}"
    r"{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

QWEN_2_5 = (
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}"
    r"{%- else -%}"
    r"{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' -}}"
    r"{%- endif -%}"
    r"{%- for message in messages -%}{%- if not (loop.first and message['role'] == 'system') -%}"
    r"{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    r"{%- endif -%}{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

# Qwen 3: assistant turns after the last user turn carry a think block (empty when there was no reasoning).
QWEN_3 = (
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}"
    r"{%- endif -%}"
    r"{%- set ns = namespace(last_query=-1) -%}"
    r"{%- for message in messages -%}{%- if message['role'] == 'user' -%}{%- set ns.last_query = loop.index0 -%}"
    r"{%- endif -%}{%- endfor -%}"
    r"{%- for message in messages -%}"
    r"{%- if message['role'] == 'assistant' -%}"
    r"{%- set content = message['content'] -%}"
    r"{%- set reasoning = message['reasoning_content'] if message['reasoning_content'] is string else '' -%}"
    r"{%- if not reasoning and '</think>' in content -%}"
    r"{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
    r"{%- set content = content.split('</think>')[-1].lstrip('\n') -%}"
    r"{%- endif -%}"
    r"{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}"
    r"{{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}"
    r"{%- else -%}{{- '<|im_start|>assistant\n' + content -}}{%- endif -%}"
    r"{{- '<|im_end|>\n' -}}"
    r"{%- elif not (loop.first and message['role'] == 'system') -%}"
    r"{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    r"{%- endif -%}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}"
    r"{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}"
    r"{%- endif -%}"
)

GEMMA_2 = (
    r"{{- bos_token -}}"
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{{- raise_exception('System role not supported by gemma-2; put the instructions in the first user turn') -}}"
    r"{%- endif -%}"
    r"{%- for message in messages -%}"
    r"{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    r"{{- '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
)

# Gemma 3 has no system turn either: the system text opens the first user turn, followed by a blank line.
GEMMA_3 = (
    r"{{- bos_token -}}"
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{%- set first_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    r"{%- else -%}{%- set first_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    r"{%- for message in loop_messages -%}"
    r"{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    r"{{- '<start_of_turn>' + role + '\n' + (first_prefix if loop.first else '') + message['content'] | trim -}}"
    r"{{- '<end_of_turn>\n' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
)

PHI_3 = (
    r"{%- for message in messages -%}"
    r"{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- else -%}{{- eos_token -}}{%- endif -%}"
)

PHI_4 = (
    r"{%- for message in messages -%}"
    r"{{- '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%}"
)

# Mistral Instruct: no system turn; the system text opens the first instruction, followed by a blank line.
MISTRAL = (
    r"{{- bos_token -}}"
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{%- set system_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    r"{%- else -%}{%- set system_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    r"{%- for message in loop_messages -%}"
    r"{%- if message['role'] == 'user' -%}"
    r"{{- '[INST] ' + (system_prefix if loop.first else '') + message['content'] + ' [/INST]' -}}"
    r"{%- else -%}{{- message['content'] + eos_token -}}{%- endif -%}"
    r"{%- endfor -%}"
)

ZEPHYR = (
    r"{%- for message in messages -%}"
    r"{{- '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' -}}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)

ALPACA = (
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{{- messages[0]['content'] + '\n\n' -}}{%- set loop_messages = messages[1:] -%}"
    r"{%- else -%}"
    r"{{- 'Below is an instruction that describes a task. "
    r"Write a response that appropriately completes the request.\n\n' -}}"
    r"{%- set loop_messages = messages -%}{%- endif -%}"
    r"{%- for message in loop_messages -%}"
    r"{%- if message['role'] == 'user' -%}{{- '### Instruction:\n' + message['content'] + '\n\n' -}}"
    r"{%- else -%}{{- '### Response:\n' + message['content'] + eos_token + '\n\n' -}}{%- endif -%}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- '### Response:\n' -}}{%- endif -%}"
)

# Vicuna v1.1 as FastChat writes it: the system line, then "USER: ... ASSISTANT: ...</s>" pairs.
VICUNA = (
    r"{%- if messages and messages[0]['role'] == 'system' -%}"
    r"{{- messages[0]['content'] + ' ' -}}{%- set loop_messages = messages[1:] -%}"
    r"{%- else -%}"
    r"{{- 'A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    r"detailed, and polite answers to the user\'s questions. ' -}}"
    r"{%- set loop_messages = messages -%}{%- endif -%}"
    r"{%- for message in loop_messages -%}"
    r"{%- if message['role'] == 'user' -%}{{- 'USER: ' + message['content'] + ' ' -}}"
    r"{%- else -%}{{- 'ASSISTANT: ' + message['content'] + eos_token -}}{%- endif -%}"
    r"{%- endfor -%}"
    r"{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"
)

_LLAMA_PARTS = ("<|start_header_id|>user<|end_header_id|>\n\n", "<|start_header_id|>assistant<|end_header_id|>\n\n")
_CHATML_PARTS = ("<|im_start|>user\n", "<|im_start|>assistant\n")
_GEMMA_PARTS = ("<start_of_turn>user\n", "<start_of_turn>model\n")

FAMILIES: Dict[str, ChatFamily] = {
    "llama-3": ChatFamily(LLAMA_3, *_LLAMA_PARTS, "<|eot_id|>"),
    "llama-3.1": ChatFamily(_llama_3_1(_FIXED_DATE), *_LLAMA_PARTS, "<|eot_id|>"),
    "llama-3.2": ChatFamily(_llama_3_1(_TODAYS_DATE), *_LLAMA_PARTS, "<|eot_id|>"),
    "llama-3.3": ChatFamily(_llama_3_1(_FIXED_DATE), *_LLAMA_PARTS, "<|eot_id|>"),
    "qwen-2.5": ChatFamily(QWEN_2_5, *_CHATML_PARTS, "<|im_end|>"),
    "qwen-3": ChatFamily(QWEN_3, *_CHATML_PARTS, "<|im_end|>"),
    "gemma-2": ChatFamily(GEMMA_2, *_GEMMA_PARTS, "<end_of_turn>"),
    "gemma-3": ChatFamily(GEMMA_3, *_GEMMA_PARTS, "<end_of_turn>"),
    "phi-3": ChatFamily(PHI_3, "<|user|>\n", "<|assistant|>\n", "<|end|>"),
    "phi-4": ChatFamily(PHI_4, "<|im_start|>user<|im_sep|>", "<|im_start|>assistant<|im_sep|>", "<|im_end|>"),
    "mistral": ChatFamily(MISTRAL, "[INST]", "[/INST]", None),
    "chatml": ChatFamily(CHATML, *_CHATML_PARTS, "<|im_end|>"),
    "zephyr": ChatFamily(ZEPHYR, "<|user|>\n", "<|assistant|>\n", None),
    "alpaca": ChatFamily(ALPACA, "### Instruction:\n", "### Response:\n", None),
    # The space after the colon belongs to the answer's first word in byte-level tokenizers, so it is not marked.
    "vicuna": ChatFamily(VICUNA, "USER:", "ASSISTANT:", None),
}

# Other spellings CUDA Unsloth notebooks use for the same formats.
ALIASES: Dict[str, str] = {
    "llama3": "llama-3",
    "llama-31": "llama-3.1",
    "llama-32": "llama-3.2",
    "llama-33": "llama-3.3",
    "qwen2.5": "qwen-2.5",
    "qwen-25": "qwen-2.5",
    "qwen25": "qwen-2.5",
    "qwen3": "qwen-3",
    "gemma2": "gemma-2",
    "gemma": "gemma-2",
    "gemma3": "gemma-3",
    "phi-35": "phi-3",
    "phi-3.5": "phi-3",
    "phi3": "phi-3",
    "phi4": "phi-4",
}


def family_name(chat_template: str) -> str:
    """The table's name for `chat_template`; ValueError listing every name (and alias) known."""
    name = ALIASES.get(chat_template, chat_template)
    if name not in FAMILIES:
        choices = ", ".join(sorted({*FAMILIES, *ALIASES}))
        raise ValueError(
            f"chat_template={chat_template!r} is not available; choose one of {choices}, "
            "or pass a (jinja_template, eos_token) tuple"
        )
    return name


def response_parts(chat_template: str) -> Tuple[str, str]:
    """The (instruction_part, response_part) markers `train_on_responses_only` needs for this format."""
    family = FAMILIES[family_name(chat_template)]
    return family.instruction_part, family.response_part


def family_of_template(template: Optional[str]) -> Optional[str]:
    """The table's name whose Jinja source ends `template` (a mapping or system prologue may precede it)."""
    if not template:
        return None
    # llama-3.1 and llama-3.3 share one source; either name gives the same markers.
    for name, family in FAMILIES.items():
        if template.endswith(family.template):
            return name
    return None
