# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""The sandbox helpers RL notebooks import from `unsloth` to score code the model wrote.

`check_python_modules` reads which modules a piece of code imports, `create_locked_down_function` builds its one
function with no access to anything global, and `execute_with_time_limit` stops a call that runs too long. Standard
library only, on every platform and backend.
"""

from __future__ import annotations

import ast
import builtins
import functools
import signal
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Tuple, TypeVar

_Result = TypeVar("_Result")


def check_python_modules(code: str) -> Tuple[bool, Dict[str, Any]]:
    """(True, info) when `code` imports only standard-library modules, absolutely; info lists what it imports."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return False, {"error": f"SyntaxError: {error}", "stdlib": [], "non_stdlib": [], "relative_imports": 0}
    imported: List[str] = []
    relative = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                relative += 1
            elif node.module:
                imported.append(node.module.split(".")[0])
    stdlib = sorted({name for name in imported if name in sys.stdlib_module_names})
    other = sorted({name for name in imported if name not in sys.stdlib_module_names})
    # A relative import names a package the sandbox does not have, so it fails the check like a third-party one.
    return not other and not relative, {"stdlib": stdlib, "non_stdlib": other, "relative_imports": relative}


def create_locked_down_function(code: str) -> Callable[..., Any]:
    """The one function `code` defines, built so that it sees builtins only: no module globals, no earlier imports."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        raise ValueError(f"the code does not parse: {error}") from error
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    others = [
        type(node).__name__
        for node in tree.body
        if not isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Expr))
    ]
    if len(functions) != 1 or others:
        found = ", ".join(node.name for node in functions) or "none"
        raise ValueError(
            f"the code must define exactly one function and nothing else at the top level (functions: {found}"
            + (f"; other statements: {', '.join(others)})" if others else ")")
        )
    namespace: Dict[str, Any] = {"__builtins__": builtins}
    exec(compile(tree, "<generated function>", "exec", dont_inherit=True), namespace)  # noqa: S102 - the sandbox's job
    function = namespace[functions[0].name]
    return types.FunctionType(function.__code__, {"__builtins__": builtins}, function.__name__, function.__defaults__)


def _limited_by_alarm(function: Callable[..., _Result], seconds: float, args: Any, kwargs: Any) -> _Result:
    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{function.__name__} ran past its time limit of {seconds:g} s")

    previous_handler = signal.signal(signal.SIGALRM, stop)
    previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return function(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay:  # an alarm someone else set keeps ticking, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(previous_delay - seconds, 1e-3))


def _limited_by_thread(function: Callable[..., _Result], seconds: float, args: Any, kwargs: Any) -> _Result:
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"time-limited {function.__name__}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        # Python cannot stop a thread: it runs on in the background, and the caller gets the timeout now.
        raise TimeoutError(f"{function.__name__} ran past its time limit of {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def execute_with_time_limit(seconds: float) -> Callable[[Callable[..., _Result]], Callable[..., _Result]]:
    """A decorator: each call raises `TimeoutError` once it has run `seconds` of wall-clock time."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"execute_with_time_limit needs a positive number of seconds, not {seconds!r}")

    def decorate(function: Callable[..., _Result]) -> Callable[..., _Result]:
        @functools.wraps(function)
        def limited(*args: Any, **kwargs: Any) -> _Result:
            # SIGALRM interrupts the call itself, but only in the main thread of a platform that has it.
            if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
                return _limited_by_alarm(function, float(seconds), args, kwargs)
            return _limited_by_thread(function, float(seconds), args, kwargs)

        return limited

    return decorate
