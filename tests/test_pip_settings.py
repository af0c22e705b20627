"""pip's settings as pip itself reports them, carried over to uv's variables (tools/pip_settings.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tools import pip_settings


def _settings(tmp_path: Path, config: str, monkeypatch, **environment: str) -> dict[str, str]:
    """What real pip reports with this config file read last and only these PIP_ variables (no file: none at all)."""
    (tmp_path / "pip.conf").write_text(config)
    for name in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(name)
    # pip reads the machine's files, then PIP_CONFIG_FILE over them; os.devnull there means no file at all.
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf") if config else os.devnull)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return pip_settings.read(sys.executable)


def test_a_machines_wheel_folder_mirrors_and_cap_reach_uv(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    settings = _settings(
        tmp_path,
        f"[global]\nfind-links = {wheels} https://example.invalid/links\n"
        "extra-index-url = file:///opt/one/simple file:///opt/two/simple\n"
        "constraint = /etc/cap.txt\ncert = /etc/ssl/bundle.crt\n",
        monkeypatch,
    )
    assert pip_settings.uv_environment(settings) == {
        "UV_INDEX_STRATEGY": "unsafe-best-match",
        "UV_FIND_LINKS": f"{wheels},https://example.invalid/links",
        "UV_EXTRA_INDEX_URL": "file:///opt/one/simple file:///opt/two/simple",
        "UV_CONSTRAINT": "/etc/cap.txt",
        "SSL_CERT_FILE": "/etc/ssl/bundle.crt",
    }
    assert pip_settings.local_wheel_folders(settings) == [wheels]


def test_a_pip_variable_wins_over_the_config_file_as_in_pip(tmp_path, monkeypatch):
    settings = _settings(
        tmp_path, "[global]\nfind-links = /from/the/file\n", monkeypatch, PIP_FIND_LINKS="/from/the/environment"
    )
    assert pip_settings.uv_environment(settings)["UV_FIND_LINKS"] == "/from/the/environment"


def test_no_settings_leave_uv_on_its_defaults_but_resolving_as_pip_does(tmp_path, monkeypatch):
    assert pip_settings.uv_environment(_settings(tmp_path, "", monkeypatch)) == {
        "UV_INDEX_STRATEGY": "unsafe-best-match"
    }


def test_no_pip_reads_as_no_settings():
    assert pip_settings.read("/nonexistent/python") == {}
