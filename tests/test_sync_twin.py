"""tools/sync_twin.py: the twin is the source with its license header swapped for unsloth's and a banner."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tools import sync_twin

ZOO_HEADER = "# SPDX-License-Identifier: LGPL-3.0-or-later\n# Copyright 2026 the unsloth_zoo authors.\n"
TWIN_HEADER = (
    "# SPDX-License-Identifier: Apache-2.0\n"
    "# Copyright 2026 the unsloth authors.\n"
    "#\n"
    "# GENERATED FILE: DO NOT EDIT.\n"
    "# Generated from zoo/unsloth_zoo/dataset_num_proc.py by `nox -s sync`.\n"
    "# Edit that source instead, then rerun `nox -s sync` to refresh this copy.\n"
)
# Odd on purpose: spacing, a semicolon, a backslash continuation, tabs in a comment, trailing spaces.
BODY = (
    '"""Sample policy."""\n'
    "\n"
    "CAP   =  8  # kept exactly, odd spacing and all\n"
    "def  pick( a,b = 'x' ) :\n"
    "    first = a ; second = b\n"
    "    #\tindented comment with a tab   \n"
    "    return (first ,\n"
    "            second) \\\n"
    "        if a else None\n"
    "\n"
    "\n"
    "\n"
    "# a trailing comment with no newline at the end"
)
SOURCE = ZOO_HEADER + BODY
EXPECTED_TWIN = TWIN_HEADER + BODY


def run(argv: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = sync_twin.main(argv, stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    source_dir, target_dir = tmp_path / "zoo", tmp_path / "unsloth"
    source_dir.mkdir()
    target_dir.mkdir()
    source = source_dir / "dataset_num_proc.py"
    source.write_bytes(SOURCE.encode("utf-8"))
    return source, target_dir / "dataset_num_proc.py"


def paths(pair: tuple[Path, Path], *extra: str) -> list[str]:
    source, target = pair
    return ["--source", str(source), "--target", str(target), *extra]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


# --------------------------------------------------------------------------- render_twin


def test_header_is_replaced_and_body_kept_byte_for_byte():
    assert sync_twin.render_twin(SOURCE) == EXPECTED_TWIN


def test_banner_says_generated_names_the_source_and_the_command():
    banner = [line for line in sync_twin.render_twin(SOURCE).splitlines() if line.startswith("#")][:6]
    text = "\n".join(banner)

    assert banner[:2] == ["# SPDX-License-Identifier: Apache-2.0", "# Copyright 2026 the unsloth authors."]
    assert "do not edit" in text.lower()
    assert "generated" in text.lower()
    assert "zoo/unsloth_zoo/dataset_num_proc.py" in text
    assert "`nox -s sync`" in text
    assert "LGPL" not in sync_twin.render_twin(SOURCE)


def test_crlf_source_keeps_crlf_everywhere():
    crlf_source = SOURCE.replace("\n", "\r\n")

    assert sync_twin.render_twin(crlf_source) == EXPECTED_TWIN.replace("\n", "\r\n")


def test_header_lines_after_the_license_are_kept_after_the_banner():
    source = ZOO_HEADER + "#\n# More about this module.\n\n" + BODY

    assert sync_twin.render_twin(source) == TWIN_HEADER + "#\n# More about this module.\n\n" + BODY


def test_only_the_header_changes_in_a_module_with_unicode_and_decorators():
    body = '"""Ünïcödé docstring."""\n\n@staticmethod\ndef f():  # «comment»\n    return "→"\n'

    assert sync_twin.render_twin(ZOO_HEADER + body) == TWIN_HEADER + body


BAD_HEADERS = {
    "no header": BODY,
    "other license": "# SPDX-License-Identifier: MIT\n# Copyright 2026 the unsloth_zoo authors.\n" + BODY,
    "only the first line": "# SPDX-License-Identifier: LGPL-3.0-or-later\n" + BODY,
    "lines swapped": "# Copyright 2026 the unsloth_zoo authors.\n# SPDX-License-Identifier: LGPL-3.0-or-later\n" + BODY,
    "indented": "  # SPDX-License-Identifier: LGPL-3.0-or-later\n# Copyright 2026 the unsloth_zoo authors.\n" + BODY,
    "already a twin": EXPECTED_TWIN,
    "after the first statement": '"""Doc."""\n' + ZOO_HEADER + "x = 1\n",
}


@pytest.mark.parametrize("source", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
def test_source_without_the_zoo_header_is_refused(source):
    with pytest.raises(sync_twin.MissingLicenseHeader):
        sync_twin.render_twin(source)


# --------------------------------------------------------------------------- main: writing


def test_sync_writes_the_twin(pair):
    code, stdout, stderr = run(paths(pair))

    assert (code, stderr) == (0, "")
    assert pair[1].read_bytes() == EXPECTED_TWIN.encode("utf-8")
    assert "wrote" in stdout


def test_second_sync_changes_nothing_and_check_then_passes(pair):
    assert run(paths(pair))[0] == 0
    before = os.stat(pair[1])

    code, stdout, _ = run(paths(pair))

    after = os.stat(pair[1])
    assert code == 0 and "up to date" in stdout
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert pair[1].read_bytes() == EXPECTED_TWIN.encode("utf-8")
    assert run(paths(pair, "--check"))[0] == 0


def test_sync_replaces_a_stale_twin_atomically_and_keeps_its_mode(pair, tmp_path):
    source, target = pair
    target.write_text("stale\n", encoding="utf-8")
    target.chmod(0o640)
    stale_inode = os.stat(target).st_ino

    assert run(paths(pair))[0] == 0

    assert target.read_bytes() == EXPECTED_TWIN.encode("utf-8")
    assert os.stat(target).st_ino != stale_inode  # Replaced by rename, not rewritten in place.
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(path.name for path in target.parent.iterdir()) == ["dataset_num_proc.py"]


# --------------------------------------------------------------------------- main: --check


def test_check_in_sync_exits_0_and_writes_nothing(pair, tmp_path):
    pair[1].write_bytes(EXPECTED_TWIN.encode("utf-8"))
    before = snapshot(tmp_path)

    code, stdout, _ = run(paths(pair, "--check"))

    assert code == 0 and "up to date" in stdout
    assert snapshot(tmp_path) == before


def test_check_stale_exits_1_with_a_labelled_diff_and_the_command(pair, tmp_path):
    source, target = pair
    target.write_bytes(EXPECTED_TWIN.replace("CAP   =  8", "CAP   =  7").encode("utf-8"))
    before = snapshot(tmp_path)

    code, stdout, _ = run(paths(pair, "--check"))

    assert code == 1
    lines = stdout.splitlines()
    assert any(line.startswith("--- ") and str(target) in line for line in lines)
    assert any(line.startswith("+++ ") and str(source) in line for line in lines)
    assert "-CAP   =  7  # kept exactly, odd spacing and all" in lines
    assert "+CAP   =  8  # kept exactly, odd spacing and all" in lines
    assert "run `nox -s sync` to regenerate" in stdout
    assert snapshot(tmp_path) == before


def test_check_catches_a_hand_edited_banner(pair, tmp_path):
    pair[1].write_bytes(EXPECTED_TWIN.replace("DO NOT EDIT", "edit freely").encode("utf-8"))
    before = snapshot(tmp_path)

    code, stdout, _ = run(paths(pair, "--check"))

    assert code == 1
    assert "-# GENERATED FILE: edit freely." in stdout.splitlines()
    assert snapshot(tmp_path) == before


def test_check_with_no_twin_exits_1_and_creates_nothing(pair, tmp_path):
    before = snapshot(tmp_path)

    code, stdout, _ = run(paths(pair, "--check"))

    assert code == 1
    assert "`nox -s sync`" in stdout
    assert not pair[1].exists()
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- main: bad input


@pytest.mark.parametrize("check", [[], ["--check"]], ids=["sync", "check"])
def test_missing_header_exits_2_and_writes_nothing(pair, tmp_path, check):
    pair[0].write_text(BODY, encoding="utf-8")
    before = snapshot(tmp_path)

    code, _, stderr = run(paths(pair, *check))

    assert code == 2
    assert str(pair[0]) in stderr
    assert "# SPDX-License-Identifier: LGPL-3.0-or-later" in stderr
    assert snapshot(tmp_path) == before


def test_unparseable_source_exits_2_naming_file_and_line(pair):
    pair[0].write_text(ZOO_HEADER + '"""Doc."""\nx = 1\ndef broken(:\n', encoding="utf-8")

    code, _, stderr = run(paths(pair))

    assert code == 2
    assert str(pair[0]) in stderr and "line 5" in stderr
    assert not pair[1].exists()


def test_missing_source_exits_2(pair):
    pair[0].unlink()

    code, _, stderr = run(paths(pair))

    assert code == 2
    assert str(pair[0]) in stderr and "does not exist" in stderr


def test_unknown_option_exits_2_without_raising_system_exit():
    code, _, stderr = run(["--no-such-option"])

    assert code == 2
    assert "--no-such-option" in stderr


def test_help_exits_0_and_mentions_check():
    code, stdout, _ = run(["--help"])

    assert code == 0 and "--check" in stdout
