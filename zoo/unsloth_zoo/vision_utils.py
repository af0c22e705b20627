# SPDX-License-Identifier: LGPL-3.0-or-later
# Copyright 2026 the unsloth_zoo authors.
"""`fetch_image`, as notebooks with their own vision collator import it from CUDA `unsloth_zoo.vision_utils`.

It takes a PIL image, a local path, a `file://` or http(s) URL, or a base64 `data:` URI, and returns an RGB PIL image.
Pillow is imported on first call, so importing this module costs nothing.
"""

from __future__ import annotations

import base64
import io
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Union

__all__ = ["fetch_image", "ImageFetchError"]

_TIMEOUT_S = 10.0


class ImageFetchError(OSError):
    """An image that could not be read, naming where it was asked from."""


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("fetch_image needs Pillow: pip install pillow") from error
    return Image


def _read_url(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            return bytes(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise ImageFetchError(f"fetch_image could not download {url}: {error}") from error


def _read_data_uri(uri: str) -> bytes:
    header, _, payload = uri.partition(",")
    if ";base64" not in header:
        raise ImageFetchError(f"fetch_image reads base64 data URIs only, not {header[:40]!r}")
    try:
        return base64.b64decode(payload, validate=True)
    except ValueError as error:
        raise ImageFetchError(f"fetch_image could not decode the base64 data URI {header[:40]!r}: {error}") from error


def _read_source(source: str) -> bytes:
    if source.startswith("data:"):
        return _read_data_uri(source)
    scheme = urllib.parse.urlparse(source).scheme.lower()
    if scheme in ("http", "https"):
        return _read_url(source)
    path = Path(urllib.request.url2pathname(urllib.parse.urlparse(source).path)) if scheme == "file" else Path(source)
    try:
        return path.read_bytes()
    except OSError as error:
        raise ImageFetchError(f"fetch_image could not read {source}: {error}") from error


def fetch_image(image: Union[str, Path, dict, Any], **_: Any) -> Any:
    """An RGB PIL image from a PIL image, a path, a file/http(s) URL, a data URI, or a dict holding one of those
    under `image` or `image_url` (as chat messages carry them)."""
    Image = _pil()
    if isinstance(image, dict):
        image = image.get("image", image.get("image_url"))
        if isinstance(image, dict):
            image = image.get("url")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if not isinstance(image, (str, Path)):
        raise TypeError(f"fetch_image takes a PIL image, a path, a URL or a data URI, not {type(image).__name__}")
    data = _read_source(str(image))
    try:
        loaded = Image.open(io.BytesIO(data))
        loaded.load()
    except OSError as error:
        raise ImageFetchError(f"fetch_image read {str(image)[:80]} but it is not an image: {error}") from error
    return loaded.convert("RGB")
