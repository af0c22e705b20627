# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""What the table holds for one chat family."""

from __future__ import annotations

from typing import NamedTuple, Optional

# Stand-ins for the tokenizer's own tokens in markers and Ollama templates, filled in when they are used.
BOS = "{bos}"
EOS = "{eos}"


class ChatFamily(NamedTuple):
    # Jinja, rendered by the tokenizer's `apply_chat_template`.
    template: str
    # The text opening a user turn and an assistant turn, what `train_on_responses_only` looks for; `{bos}` stands
    # for the tokenizer's BOS.
    instruction_part: str
    response_part: str
    # The text that ends an assistant turn; None when the template ends it with the tokenizer's own eos_token.
    stop_marker: Optional[str]
    # The Ollama Modelfile's TEMPLATE, in Go's text/template (see `go.py`).
    ollama: str
