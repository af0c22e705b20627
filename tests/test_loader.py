"""The zoo-first loader, against install combinations built for real on disk.

Each case runs in a fresh `python -S` whose sys.path holds only the site directory built here,
so the editable installs of the development environment cannot answer for it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ZOO_PACKAGE = REPO / "zoo" / "unsloth_zoo"
UNSLOTH_PACKAGE = REPO / "unsloth" / "unsloth"
LOADER = REPO / "unsloth" / "unsloth_num_proc.py"

PROBE = textwrap.dedent(
    """
    import json, logging, sys
    logging.basicConfig(level=logging.WARNING, format="WARNING %(message)s")

    class Block:
        def __init__(self, name): self.name = name
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] == self.name:
                raise ModuleNotFoundError(f"No module named {{fullname!r}} (blocked)")
            return None

    for name in {blocked!r}:
        sys.meta_path.insert(0, Block(name))
    if {import_unsloth!r}:
        import unsloth
    import unsloth_num_proc
    first = unsloth_num_proc.load_policy()
    second = unsloth_num_proc.load_policy()
    print(json.dumps({{
        "name": getattr(first, "__name__", None),
        "file": getattr(first, "__file__", None),
        "same": first is second,
        "unsloth_imported": "unsloth" in sys.modules,
        "init_ran": hasattr(sys, "_unsloth_init_ran"),
        "answer": first.get_dataset_num_proc(1, serial_as_none=False) if first else None,
    }}))
    """
)


def build_site(root: Path, *, zoo: str, unsloth: bool) -> Path:
    """zoo: "current" (with the policy), "older" (package without it) or "none"."""
    site = root / "site"
    site.mkdir()
    if zoo == "current":
        shutil.copytree(ZOO_PACKAGE, site / "unsloth_zoo", ignore=shutil.ignore_patterns("__pycache__"))
    elif zoo == "older":
        (site / "unsloth_zoo").mkdir()
        (site / "unsloth_zoo" / "__init__.py").write_text('__version__ = "2025.1.1"\n')
    if unsloth:
        shutil.copytree(UNSLOTH_PACKAGE, site / "unsloth", ignore=shutil.ignore_patterns("__pycache__"))
        init = site / "unsloth" / "__init__.py"
        init.write_text(init.read_text() + "\nimport sys as _sys\n_sys._unsloth_init_ran = True\n")
    shutil.copy(LOADER, site / "unsloth_num_proc.py")
    return site


def run_probe(site: Path, *, blocked=(), import_unsloth=False) -> tuple[dict, str]:
    code = f"import sys; sys.path.insert(0, {str(site)!r})\n" + PROBE.format(
        blocked=list(blocked), import_unsloth=import_unsloth
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, cwd=site)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_current_zoo_serves_the_policy(tmp_path):
    site = build_site(tmp_path, zoo="current", unsloth=True)
    seen, _ = run_probe(site)
    assert seen["name"] == "unsloth_zoo.dataset_num_proc"
    assert seen["file"] == str(site / "unsloth_zoo" / "dataset_num_proc.py")
    assert seen["same"] and not seen["unsloth_imported"] and not seen["init_ran"]


def test_older_zoo_without_unsloth_imported_loads_the_copy_off_disk(tmp_path):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    seen, _ = run_probe(site)
    assert seen["name"] == "_unsloth_dataset_num_proc_fallback"
    assert seen["file"] == str(site / "unsloth" / "dataset_num_proc.py")
    assert seen["same"], "two calls must return the same module object"
    assert not seen["unsloth_imported"] and not seen["init_ran"], "unsloth/__init__.py must not run"
    assert seen["answer"] in (1, None)


def test_no_zoo_at_all_loads_the_copy_off_disk(tmp_path):
    site = build_site(tmp_path, zoo="current", unsloth=True)
    seen, _ = run_probe(site, blocked=["unsloth_zoo"])
    assert seen["name"] == "_unsloth_dataset_num_proc_fallback"
    assert seen["file"] == str(site / "unsloth" / "dataset_num_proc.py")
    assert seen["same"] and not seen["init_ran"]


def test_older_zoo_with_unsloth_imported_uses_the_packaged_copy(tmp_path):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    seen, _ = run_probe(site, import_unsloth=True)
    assert seen["name"] == "unsloth.dataset_num_proc"
    assert seen["file"] == str(site / "unsloth" / "dataset_num_proc.py")
    assert seen["same"] and seen["init_ran"]


def test_nothing_installed_returns_none_with_one_warning(tmp_path):
    site = build_site(tmp_path, zoo="none", unsloth=False)
    seen, stderr = run_probe(site)
    assert seen["name"] is None and seen["answer"] is None
    warnings = [line for line in stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "unsloth_zoo.dataset_num_proc" in warnings[0]


def test_broken_fallback_file_moves_on_and_leaves_no_half_module(tmp_path):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    (site / "unsloth" / "dataset_num_proc.py").write_text("def broken(:\n")
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "import unsloth_num_proc\n"
        "print(unsloth_num_proc.load_policy(), unsloth_num_proc.OFF_DISK_MODULE_NAME in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False"]
    assert "SyntaxError" in result.stderr


def test_in_this_environment_the_zoo_answers():
    import unsloth_num_proc
    from unsloth_zoo import dataset_num_proc

    assert unsloth_num_proc.load_policy() is dataset_num_proc


@pytest.mark.parametrize("forbidden", ["libcst"])
def test_packages_never_import_tool_dependencies(forbidden):
    sources = list((REPO / "zoo").rglob("*.py")) + list((REPO / "unsloth").rglob("*.py"))
    offenders = [
        str(path)
        for path in sources
        if f"import {forbidden}" in path.read_text() or f"from {forbidden}" in path.read_text()
    ]
    assert offenders == []


def _truncate_before(text: str, marker: str) -> str:
    """The file cut at a line boundary before `marker`: still valid Python, missing everything after."""
    return text[: text.index(marker)]


@pytest.mark.parametrize("cut", ["empty", "truncated"])
def test_empty_or_truncated_fallback_is_one_clear_warning_then_none(tmp_path, cut):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    fallback = site / "unsloth" / "dataset_num_proc.py"
    fallback.write_text(
        "" if cut == "empty" else _truncate_before(fallback.read_text(), "def explain_dataset_num_proc(")
    )
    seen, stderr = run_probe(site)
    assert seen["name"] is None and seen["answer"] is None
    warnings = [line for line in stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, stderr
    assert (
        str(fallback) in warnings[0] and "empty or truncated" in warnings[0] and "get_dataset_num_proc" in warnings[0]
    )
    assert "pip install" in warnings[0]


def test_truncated_fallback_leaves_no_half_module_registered(tmp_path):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    fallback = site / "unsloth" / "dataset_num_proc.py"
    fallback.write_text(_truncate_before(fallback.read_text(), "def get_dataset_num_proc("))
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "import unsloth_num_proc\n"
        "print(unsloth_num_proc.load_policy(), unsloth_num_proc.OFF_DISK_MODULE_NAME in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False"]


def test_a_zoo_policy_lacking_the_api_is_passed_over_for_the_fallback(tmp_path):
    site = build_site(tmp_path, zoo="older", unsloth=True)
    (site / "unsloth_zoo" / "dataset_num_proc.py").write_text("def get_dataset_num_proc(desired=None):\n    return 1\n")
    seen, _ = run_probe(site)
    assert seen["name"] == "_unsloth_dataset_num_proc_fallback"


def test_a_zoo_policy_without_the_closure_keyword_is_passed_over_for_the_fallback(tmp_path):
    # Every map site passes closure=; a zoo from before it would raise TypeError at the first map.
    site = build_site(tmp_path, zoo="current", unsloth=True)
    policy_file = site / "unsloth_zoo" / "dataset_num_proc.py"
    text = policy_file.read_text()
    assert text.count("    closure: Any = None,\n") == 2
    policy_file.write_text(text.replace("    closure: Any = None,\n", "").replace(", closure=closure", ""))
    seen, stderr = run_probe(site)
    assert seen["name"] == "_unsloth_dataset_num_proc_fallback", stderr
    assert seen["answer"] == 1


def test_a_deciding_function_swapped_for_an_older_one_is_refused_at_the_next_load():
    # The signature check is cached by function object, so a replaced function is checked afresh.
    import types

    import unsloth_num_proc
    import unsloth_zoo.dataset_num_proc as policy

    module = types.ModuleType("swapped_policy")
    module.__dict__.update({name: getattr(policy, name) for name in unsloth_num_proc.REQUIRED_API})
    assert unsloth_num_proc._require_api(module) is module

    def get_dataset_num_proc(desired=None, rows=None):
        return None

    module.get_dataset_num_proc = get_dataset_num_proc
    with pytest.raises(ImportError, match=r"get_dataset_num_proc\(closure_bytes=\)"):
        unsloth_num_proc._require_api(module)

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, desired=None, rows=None, closure_bytes=None, closure=None, main_first=None, batched=None):
            return None

    module.get_dataset_num_proc = Unhashable()
    assert unsloth_num_proc._require_api(module) is module
