"""The import hooks both paths use (the TRL map patch and the MLX shims): a failed patch warns, never fails the import."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unsloth.import_hooks import import_hooks


def test_a_failing_patch_warns_by_name_without_blaming_mlx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hooked_probe_module.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hooked_probe_module", raising=False)

    def broken(module: object) -> None:
        raise RuntimeError("no such attribute")

    import_hooks().after_import("hooked_probe_module", broken)
    with pytest.warns(RuntimeWarning) as caught:
        import hooked_probe_module
    assert hooked_probe_module.VALUE == 7
    message = str(caught[0].message)
    assert message.startswith("unsloth could not patch hooked_probe_module: ") and "MLX" not in message
