"""Issue 49 item 1: the speech notebooks' codecs that only a git clone or a download provides (Spark's `sparktts`,
Oute's `outetts` and `dac`, Llasa's `xcodec2`) fail their import with what is missing and where it comes from,
while availability probes still read them as absent and a real clone still imports."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

import unsloth  # noqa: F401  (the MLX gate is on here: importing unsloth installs the finder)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("sparktts", "git clone https://github.com/SparkAudio/Spark-TTS"),
        ("outetts", "git clone https://github.com/edwko/OuteTTS"),
        ("dac", "pip install descript-audio-codec"),
        ("xcodec2", "pip install xcodec2==0.1.5"),
    ],
)
def test_an_absent_network_codec_is_named_with_where_it_comes_from(name, source) -> None:
    with pytest.raises(ModuleNotFoundError, match="needs the network") as raised:
        importlib.import_module(f"{name}.models")
    assert source in str(raised.value) and raised.value.name == name
    assert importlib.util.find_spec(name) is None


def test_a_cloned_codec_imports_for_real(tmp_path, monkeypatch) -> None:
    (tmp_path / "sparktts").mkdir()
    (tmp_path / "sparktts" / "__init__.py").write_text("CLONED = True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sparktts", raising=False)
    assert importlib.import_module("sparktts").CLONED is True
    monkeypatch.delitem(sys.modules, "sparktts")
