"""`unsloth_zoo.utils` as CUDA notebooks import it: `Version` with CUDA unsloth_zoo's parsing, with or without
`packaging`, and the rank helpers alone and over two ranks started here (the ring backend, over TCP)."""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from test_mlx_distributed import free_ports


class _BlockPackaging(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "packaging" or name.startswith("packaging."):
            raise ImportError(f"{name} is blocked for this test")
        return None


@pytest.fixture(params=["packaging", "stdlib"])
def Version(request, monkeypatch):
    if request.param == "stdlib":
        for name in [name for name in sys.modules if name == "packaging" or name.startswith("packaging.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [_BlockPackaging(), *sys.meta_path])
    from unsloth_zoo.utils import Version

    return Version


def test_a_package_name_reads_the_installed_version(Version) -> None:
    installed = importlib.metadata.version("numpy")
    assert str(Version("numpy")) == installed.split("+")[0]
    assert Version("numpy") == Version(installed)


def test_a_module_reads_its_version(Version) -> None:
    module = types.ModuleType("made_up_module")
    module.__version__ = "1.2.3"
    assert Version(module) == Version("1.2.3")


def test_a_package_without_distribution_metadata_reads_its_imported_module(Version, monkeypatch) -> None:
    # The MLX install's `trl` is a stand-in module that pip never installed, so importlib.metadata cannot see it.
    module = types.ModuleType("made_up_stand_in")
    module.__version__ = "0.23.1"
    monkeypatch.setitem(sys.modules, "made_up_stand_in", module)
    assert Version("made_up_stand_in") == Version("0.23.1")


def test_a_package_without_distribution_metadata_is_imported_for_its_version(Version, tmp_path, monkeypatch) -> None:
    (tmp_path / "made_up_unimported.py").write_text('__version__ = "3.1.4"\n', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "made_up_unimported", raising=False)
    assert Version("made_up_unimported") == Version("3.1.4")


def test_a_suffix_after_the_release_sorts_just_above_it(Version) -> None:
    assert str(Version("4.57.0.dev0")) == "4.57.0.1"
    assert Version("4.57.0.dev0") > Version("4.57.0") and Version("4.57.0.dev0") < Version("4.57.1")
    assert str(Version("2.8.0+cu128")) == "2.8.0.1"
    assert Version("v0.9.2") == Version("0.9.2")


def test_releases_compare_as_numbers(Version) -> None:
    assert Version("0.10.0") > Version("0.9.9")
    assert Version("2.0") == Version("2.0.0")
    assert Version("0.20.0") >= Version("0.20") and not Version("0.19.1") >= Version("0.20")


def test_no_version_at_all_is_refused_by_name(Version) -> None:
    with pytest.raises(RuntimeError, match="Could not get version for `not a version`"):
        Version("not a version")


def test_without_packaging_the_stdlib_release_is_used(monkeypatch) -> None:
    monkeypatch.setattr(sys, "meta_path", [_BlockPackaging(), *sys.meta_path])
    for name in [name for name in sys.modules if name == "packaging" or name.startswith("packaging.")]:
        monkeypatch.delitem(sys.modules, name)
    from unsloth_zoo.utils import ReleaseVersion, Version

    found = Version("1.4.2")
    assert isinstance(found, ReleaseVersion) and (found.major, found.minor, found.micro) == (1, 4, 2)


def test_alone_every_process_is_the_main_one() -> None:
    from unsloth_zoo import utils

    assert utils.is_main_process() and not utils.is_distributed() and utils.current_rank() == 0
    assert utils.distributed_function(1, lambda value: value * 2, 21) == 42
    assert utils.distributed_any(0) is False and utils.distributed_any([1]) is True


def test_get_dtype_names_mlx_dtypes() -> None:
    import mlx.core as mx

    from unsloth_zoo.utils import _get_dtype

    assert _get_dtype("bfloat16") is mx.bfloat16 and _get_dtype("torch.float16") is mx.float16
    assert _get_dtype(mx.float32) is mx.float32 and _get_dtype("nonsense") is None


RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from unsloth_zoo import utils

    rank = int(os.environ["MLX_RANK"])
    made = utils.distributed_function(1, lambda: {"made_by": os.environ["MLX_RANK"], "values": [1, 2.5, "x"]})
    anyone = utils.distributed_any(rank == 1)
    nobody = utils.distributed_any(False)
    def fail():
        raise ValueError("rank 0 could not")
    try:
        utils.distributed_function(1, fail)
        failed = None
    except Exception as error:
        failed = f"{type(error).__name__}: {error}"
    print(json.dumps({"main": utils.is_main_process(), "rank": utils.current_rank(), "made": made,
                      "any": anyone, "none": nobody, "failed": failed}))
    """
)


def test_over_two_ranks_rank_zeros_result_reaches_both(tmp_path) -> None:
    hostfile = tmp_path / "hostfile.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in free_ports(2)]), encoding="utf-8")
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLX_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            env={**base, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile), "UNSLOTH_MLX_DISTRIBUTED_TIMEOUT": "60"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:  # a rank still running when the other failed or timed out is reaped, not left waiting
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], [error[-2000:] for _, error in outputs]
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    for rank, report in enumerate(reports):
        assert report["main"] is (rank == 0) and report["rank"] == rank
        assert report["made"] == {"made_by": "0", "values": [1, 2.5, "x"]}
        assert report["any"] is True and report["none"] is False
    assert reports[0]["failed"] == "ValueError: rank 0 could not"
    assert reports[1]["failed"].startswith("RankFailure:") and "rank 0 could not" in reports[1]["failed"]


def test_get_lock_sits_beside_its_target_and_excludes_a_second_holder(tmp_path) -> None:
    from filelock import Timeout

    from unsloth_zoo.utils import get_lock, get_quant_type

    target = tmp_path / "model" / "weights.safetensors"
    target.parent.mkdir()
    with get_lock(str(target)):
        assert (tmp_path / "model" / ".locks" / ".lock.weights.safetensors").exists()
        with pytest.raises(Timeout):
            get_lock(str(target), timeout=0).acquire()
    assert get_quant_type(types.SimpleNamespace(quantization_config={"quant_method": "bitsandbytes"})) == "bitsandbytes"
    assert get_quant_type(types.SimpleNamespace()) is None
