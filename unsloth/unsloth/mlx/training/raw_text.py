# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""`RawTextDataLoader` and `TextPreprocessor`: plain text files as a training dataset (continued pretraining).

Text is tokenized once and cut into windows of `chunk_size` tokens, each starting `chunk_size - stride` tokens
after the last, so `stride` tokens of context overlap; the last window always reaches the end of the text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any, Dict, List, Sequence

TEXT_SUFFIXES = (".txt", ".md", ".text")
JSON_LINES_SUFFIXES = (".jsonl", ".json")


def token_windows(ids: Sequence[int], chunk_size: int, stride: int) -> List[List[int]]:
    """Overlapping windows of `chunk_size` tokens covering `ids`; fewer tokens than that make one window."""
    ids = list(ids)
    if len(ids) <= chunk_size:
        return [ids] if ids else []
    step = chunk_size - stride
    starts = list(range(0, len(ids) - chunk_size + 1, step))
    if starts[-1] + chunk_size < len(ids):
        starts.append(len(ids) - chunk_size)
    return [ids[start : start + chunk_size] for start in starts]


class RawTextDataLoader:
    def __init__(self, tokenizer: Any, chunk_size: int = 2048, stride: int = 512, return_tokenized: bool = False):
        if chunk_size < 1 or not 0 <= stride < chunk_size:
            raise ValueError(f"need chunk_size >= 1 and 0 <= stride < chunk_size, got {chunk_size} and {stride}")
        self.tokenizer = tokenizer
        self.chunk_size = int(chunk_size)
        self.stride = int(stride)
        self.return_tokenized = bool(return_tokenized)

    def read_text(self, path: str | Path) -> str:
        """A text file's contents, or the `text` fields of a JSON-lines file joined by blank lines."""
        path = Path(path)
        if path.suffix.lower() in JSON_LINES_SUFFIXES:
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            return "\n\n".join(str(row["text"]) for row in lines)
        if path.suffix.lower() in TEXT_SUFFIXES or not path.suffix:
            return path.read_text(encoding="utf-8")
        raise ValueError(f"{path.name}: RawTextDataLoader reads {', '.join(TEXT_SUFFIXES + JSON_LINES_SUFFIXES)} files")

    def chunk_text(self, text: str) -> List[List[int]]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return token_windows(ids, self.chunk_size, self.stride)

    def _dataset(self, windows: List[List[int]]) -> Any:
        from datasets import Dataset

        if self.return_tokenized:
            return Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * len(w) for w in windows]})
        return Dataset.from_dict({"text": [self.tokenizer.decode(window) for window in windows]})

    def load_from_file(self, file_path: str | Path) -> Any:
        return self._dataset(self.chunk_text(self.read_text(file_path)))

    def load_from_files(self, file_paths: Sequence[str | Path]) -> Any:
        return self._dataset([window for path in file_paths for window in self.chunk_text(self.read_text(path))])


class TextPreprocessor:
    def clean_text(self, text: str) -> str:
        """Unicode NFC, Unix line ends, no trailing spaces, at most one blank line in a row, no control characters."""
        text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
        text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")
        text = re.sub(r"[ \t]+\n", "\n", text)
        return re.sub(r"\n{3,}", "\n\n", text).strip()

    def validate_dataset(self, dataset: Any, text_field: str = "text") -> Dict[str, Any]:
        """Row count, empty rows and character lengths of the text field; ValueError when the field is missing."""
        if text_field not in dataset.column_names:
            raise ValueError(f"no {text_field!r} column; the dataset has {dataset.column_names}")
        lengths = [len(text or "") for text in dataset[text_field]]
        return {
            "rows": len(lengths),
            "empty_rows": sum(1 for length in lengths if length == 0),
            "min_chars": min(lengths, default=0),
            "max_chars": max(lengths, default=0),
            "mean_chars": (sum(lengths) / len(lengths)) if lengths else 0.0,
        }
