"""The RL notebooks' sandbox helpers, imported from `unsloth` as the notebooks import them, on any backend."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from unsloth import check_python_modules, create_locked_down_function, execute_with_time_limit

STRATEGY = '''
def strategy(board):
    """Move towards the emptiest side."""
    import math
    empty = sum(row.count(0) for row in board)
    return "W" if math.isfinite(empty) and empty % 2 == 0 else "A"
'''


def test_stdlib_imports_pass_and_others_are_named():
    assert check_python_modules("import math\nfrom collections import deque\n") == (
        True,
        {"stdlib": ["collections", "math"], "non_stdlib": [], "relative_imports": 0},
    )
    ok, info = check_python_modules("import numpy as np\nimport os.path\nfrom torch.nn import Linear\n")
    assert not ok and info["non_stdlib"] == ["numpy", "torch"] and info["stdlib"] == ["os"]
    ok, info = check_python_modules("from . import helpers\n")
    assert not ok and info["relative_imports"] == 1


def test_code_that_does_not_parse_fails_the_check_with_the_reason():
    ok, info = check_python_modules("def broken(:\n")
    assert not ok and info["error"].startswith("SyntaxError")


def test_the_locked_down_function_runs_and_sees_no_globals():
    strategy = create_locked_down_function(STRATEGY)
    assert strategy([[0, 0], [2, 4]]) == "W" and strategy([[0, 2], [2, 4]]) == "A"
    assert strategy.__globals__ == {"__builtins__": __import__("builtins")}
    peeking = create_locked_down_function("import os\ndef peek():\n    return os.getcwd()\n")
    with pytest.raises(NameError, match="'os'"):
        peeking()  # the top-level import ran, but the function cannot see it


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("x = 1\n", "exactly one function"),
        ("def a():\n    pass\ndef b():\n    pass\n", "functions: a, b"),
        ("def a():\n    pass\nSECRET = 3\n", "other statements: Assign"),
        ("def a(:\n", "does not parse"),
    ],
)
def test_anything_but_one_function_is_refused_by_name(code, message):
    with pytest.raises(ValueError, match=message):
        create_locked_down_function(code)


def test_a_call_past_its_limit_raises_timeout_error_and_the_alarm_is_restored():
    def spin():
        while True:
            pass

    before = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="spin ran past its time limit of 0.2 s"):
        execute_with_time_limit(0.2)(spin)()
    assert time.monotonic() - started < 2
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_call_within_its_limit_returns_its_value_and_its_errors():
    @execute_with_time_limit(2)
    def add(a, b=1):
        return a + b

    assert add(2, b=3) == 5 and add.__name__ == "add"
    with pytest.raises(TypeError):
        add("a", b=1)


def test_off_the_main_thread_the_limit_still_holds():
    seen = {}

    def worker():
        try:
            execute_with_time_limit(0.2)(time.sleep)(5)
        except TimeoutError as error:
            seen["error"] = error

    thread = threading.Thread(target=worker)
    started = time.monotonic()
    thread.start()
    thread.join(10)
    assert isinstance(seen.get("error"), TimeoutError) and time.monotonic() - started < 3


@pytest.mark.parametrize("seconds", [0, -1, "5", True, float("nan")])
def test_a_limit_that_is_not_a_positive_number_is_refused(seconds):
    with pytest.raises(ValueError, match="positive number of seconds"):
        execute_with_time_limit(seconds)
