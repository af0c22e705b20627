# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Chat formats: the family table, get_chat_template, responses-only masking and ShareGPT conversions."""
