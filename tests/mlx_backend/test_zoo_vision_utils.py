"""`unsloth_zoo.vision_utils.fetch_image` as the Muse Glimmer notebooks call it (no network: a path, a file URL, a
data URI, a PIL image, an unreachable URL), and `unsloth_zoo.rl_replacements` refusing by name on import."""

from __future__ import annotations

import base64
import importlib
import io

import pytest
from PIL import Image

from unsloth_zoo.vision_utils import ImageFetchError, fetch_image

RED = (200, 10, 20)


@pytest.fixture
def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", (3, 2), RED + (255,)).save(buffer, format="PNG")
    return buffer.getvalue()


def _is_red_rgb(image) -> bool:
    return image.mode == "RGB" and image.size == (3, 2) and image.getpixel((1, 1)) == RED


def test_local_path_and_file_url(tmp_path, png_bytes):
    path = tmp_path / "red square.png"
    path.write_bytes(png_bytes)
    assert _is_red_rgb(fetch_image(str(path)))
    assert _is_red_rgb(fetch_image(path.as_uri()))


def test_base64_data_uri(png_bytes):
    uri = "data:image/png;base64," + base64.b64encode(png_bytes).decode()
    assert _is_red_rgb(fetch_image(uri))
    assert _is_red_rgb(fetch_image({"type": "image_url", "image_url": {"url": uri}}))


def test_pil_image_becomes_rgb():
    assert _is_red_rgb(fetch_image(Image.new("RGBA", (3, 2), RED + (255,))))
    assert _is_red_rgb(fetch_image({"type": "image", "image": Image.new("RGB", (3, 2), RED)}))


def test_unreachable_url_names_the_url_quickly():
    with pytest.raises(ImageFetchError, match=r"could not download http://127\.0\.0\.1:9/x\.png"):
        fetch_image("http://127.0.0.1:9/x.png")


def test_missing_file_and_non_image_are_named(tmp_path):
    with pytest.raises(ImageFetchError, match="could not read .*absent.png"):
        fetch_image(str(tmp_path / "absent.png"))
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(ImageFetchError, match="not an image"):
        fetch_image(str(tmp_path / "notes.txt"))
    with pytest.raises(TypeError, match="not int"):
        fetch_image(3)


def test_rl_replacements_import_is_refused_by_name():
    with pytest.raises(ImportError, match="torch.compile has no meaning on MLX"):
        importlib.import_module("unsloth_zoo.rl_replacements")
