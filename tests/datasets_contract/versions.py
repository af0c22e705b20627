"""Compare release strings without `packaging`, which the contract sessions do not install."""

from __future__ import annotations

import re

_LEADING_DIGITS = re.compile(r"\d+")


def release_tuple(version: str) -> tuple[int, ...]:
    """`"4.1.0"` -> `(4, 1, 0)`; a segment's trailing text (`"0rc1"`, `"dev0"`) is dropped, and so is everything after it."""
    parts: list[int] = []
    for segment in version.split("."):
        match = _LEADING_DIGITS.match(segment)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(segment):
            break
    return tuple(parts)


def at_least(version: str, minimum: tuple[int, ...]) -> bool:
    """Whether `version` is `minimum` or later, comparing release numbers only (missing trailing parts count as 0)."""
    release = release_tuple(version)
    width = max(len(release), len(minimum))
    return release + (0,) * (width - len(release)) >= minimum + (0,) * (width - len(minimum))
