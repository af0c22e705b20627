"""tools/kits/warm_python.py: a script run in a child of the warm interpreter gives what a cold `subprocess.run`
gives (output, status, environment, folder, argv, atexit), and a timeout ends the script and what it started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tools.kits import leftover_processes
from tools.kits.hub_home_link import HubHomeLink
from tools.kits.warm_python import WarmPython

SCRIPT = textwrap.dedent(
    """
    import atexit, os, sys
    atexit.register(lambda: print("atexit ran"))
    print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "env", os.environ.get("WARM_CHECK"))
    print("main", __name__, "path0", os.path.basename(sys.path[0]), "preloaded", "decimal" in sys.modules)
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "raise":
        raise ValueError("from the script")
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.fixture(scope="module")
def warm():
    server = WarmPython(["decimal"])
    yield server
    server.close()


@pytest.mark.parametrize("argument", ["0", "3", "raise"])
def test_a_run_gives_what_a_cold_run_gives(warm, tmp_path, argument):
    script = tmp_path / "scripts" / "script.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {**os.environ, "WARM_CHECK": "yes"}
    command = [sys.executable, str(script), argument]
    cold = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir, timeout=60)
    hot = warm.run(command, env=env, cwd=str(workdir), timeout=60)
    assert hot.returncode == cold.returncode == {"0": 0, "3": 3, "raise": 1}[argument]
    # Only the preloaded module tells them apart.
    assert hot.stdout == cold.stdout.replace("preloaded False", "preloaded True"), (hot.stdout, cold.stdout)
    assert f"argv ['{argument}'] cwd work env yes" in hot.stdout and "main __main__ path0 scripts" in hot.stdout
    assert hot.stdout.rstrip().endswith("atexit ran")
    assert hot.stderr.startswith("to stderr\n")
    if argument == "raise":
        assert "ValueError: from the script" in hot.stderr and "Traceback" in hot.stderr
    else:
        assert hot.stderr == cold.stderr


def test_a_run_ends_when_what_it_started_ends_as_with_pipes(warm, tmp_path):
    """`subprocess.run` reads its pipes to their end, so it waits for a child that outlives the script."""
    script = tmp_path / "parent.py"
    script.write_text("import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 1; echo late'])\nprint('early')\n")
    command, env = [sys.executable, str(script)], dict(os.environ)
    cold = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    hot = warm.run(command, env=env, cwd=str(tmp_path), timeout=60)
    assert hot.stdout == cold.stdout == "early\nlate\n"


def test_a_timeout_ends_the_script_and_its_children(warm, tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(
        "import subprocess, time\nprint(subprocess.Popen(['sleep', '300']).pid, flush=True)\ntime.sleep(300)\n"
    )
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        warm.run([sys.executable, str(script)], env=dict(os.environ), cwd=str(tmp_path), timeout=1.5)
    assert time.monotonic() - started < 30
    sleeper = int(timed_out.value.output.split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        facts = leftover_processes.read_process(sleeper, with_environ=False)
        if facts is None or not facts.alive:
            break
        time.sleep(0.05)
    assert facts is None or not facts.alive


def test_only_python_scripts_are_taken(warm):
    with pytest.raises(ValueError, match="SCRIPT ARGS"):
        warm.run(["bash", "-c", "true"], env=dict(os.environ), cwd=".", timeout=5)


def test_what_the_preloads_read_and_write_at_import_is_what_a_cold_run_importing_them_has(tmp_path):
    """The server imports with its own `env`; a preload's writes to `os.environ` reach every run, as in a cold
    start that imports it (mlx_vlm sets TRANSFORMERS_VERBOSITY so)."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "reads_at_import.py").write_text(
        "import os\nSEEN = os.environ.get('WARM_READ')\nos.environ['WARM_WRITTEN'] = 'by the import'\n"
    )
    script = tmp_path / "script.py"
    script.write_text(
        "import os, reads_at_import\nprint(reads_at_import.SEEN, os.environ.get('WARM_WRITTEN'), "
        "os.environ.get('WARM_READ'))\n"
    )
    server_env = {**os.environ, "PYTHONPATH": str(modules), "WARM_READ": "server"}
    server = WarmPython(["reads_at_import"], env=server_env)
    try:
        run_env = {**os.environ, "PYTHONPATH": str(modules), "WARM_READ": "server"}
        command = [sys.executable, str(script)]
        cold = subprocess.run(command, capture_output=True, text=True, env=run_env, cwd=tmp_path, timeout=60)
        hot = server.run(command, env=run_env, cwd=str(tmp_path), timeout=60)
        assert hot.stdout == cold.stdout == "server by the import server\n"
        # A run that asks for another value still sees the one the module read at import, so the server and its
        # runs must be given the same: that is what `HubHomeLink.environment()` is for.
        hot = server.run(command, env={**run_env, "WARM_READ": "run"}, cwd=str(tmp_path), timeout=60)
        assert hot.stdout == "server by the import run\n"
    finally:
        server.close()


def test_each_replay_reads_and_writes_only_its_own_hub_cache_through_the_shared_path(tmp_path):
    """The Hub path read once at import is a link pointed at each run's own folder in turn: a run sees only what
    its own folder holds, and what it writes there is not seen by the next."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "hub_constants.py").write_text("import os\nHF_HOME = os.environ['HF_HOME']\n")
    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys, hub_constants\nprint(sorted(os.listdir(hub_constants.HF_HOME)))\n"
        "open(os.path.join(hub_constants.HF_HOME, sys.argv[1]), 'w').close()\n"
    )
    home = HubHomeLink(tmp_path / "session")
    env = {**os.environ, "PYTHONPATH": str(modules), **home.environment()}
    server = WarmPython(["hub_constants"], env=env)
    try:
        outputs = {}
        for name in ("first", "second"):
            (tmp_path / name / "hf-home").mkdir(parents=True)
            (tmp_path / name / "hf-home" / f"model-of-{name}").write_text(name)
            home.point_at(tmp_path / name / "hf-home")
            run = server.run(
                [sys.executable, str(script), f"written-by-{name}"], env=env, cwd=str(tmp_path), timeout=60
            )
            assert run.returncode == 0, run.stderr
            outputs[name] = run.stdout
    finally:
        server.close()
    assert outputs == {"first": "['model-of-first']\n", "second": "['model-of-second']\n"}
    assert sorted(os.listdir(tmp_path / "first" / "hf-home")) == ["model-of-first", "written-by-first"]
    assert sorted(os.listdir(tmp_path / "second" / "hf-home")) == ["model-of-second", "written-by-second"]


def test_a_server_whose_preload_fails_says_so_when_waited_for():
    server = WarmPython(["a_module_that_is_not_there"])  # starting does not wait, so two servers start side by side
    with pytest.raises(RuntimeError, match="did not start"):
        server.wait_ready()
    server.close()
