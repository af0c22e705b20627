# SPDX-License-Identifier: Apache-2.0
# Copyright 2026 the unsloth authors.
"""Make an older unsloth_zoo's SFT map size its workers through the dataset worker-count policy.

Zoos released before `unsloth_zoo.dataset_num_proc` existed size their SFT `Dataset.map(num_proc=...)`
with a heuristic of their own, such as `min(max(os.cpu_count() + 4, 2), 64)`, which forks 64 workers on
a large host. At `import unsloth` the assignment feeding that `num_proc=` is found with `ast`, its value
is replaced by a call to the policy (reached through `unsloth_num_proc`), and the function's code is
swapped in place, so references taken before the patch see it too.
"""

from __future__ import annotations

import __future__
import ast
import functools
import importlib
import importlib.util
import inspect
import logging
import operator
import textwrap
import threading
import types
from typing import Any, List, Optional, Set, cast

POLICY_MODULE = "unsloth_zoo.dataset_num_proc"
TARGET_MODULE = "unsloth_zoo.dataset_utils"
TARGET_FUNCTION = "sft_prepare_dataset"
# The target's parameter holding the trainer config (its `dataset_num_proc` is the caller's request).
ARGS_PARAMETER = "args"
HELPER_NAME = "_unsloth_policy_num_proc"
PATCHED_MARKER = "__unsloth_num_proc_patched__"
MAP_METHOD = "map"
NUM_PROC_KEYWORD = "num_proc"

# Compiler flags of `from __future__` imports, which the zoo's code object records and the recompile must keep.
_FUTURE_FLAGS = functools.reduce(
    operator.or_, (getattr(__future__, name).compiler_flag for name in __future__.all_feature_names), 0
)

logger = logging.getLogger(__name__)
_patch_lock = threading.Lock()
_warned: Set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def policy_num_proc(args: Any) -> Optional[int]:
    """The SFT map's num_proc: `args.dataset_num_proc` as the request, at the map encoding (None = in-process)."""
    import unsloth_num_proc

    # A config that recorded auto intent asks for auto again, not for the count it resolved to.
    return unsloth_num_proc.map_num_proc(unsloth_num_proc.map_request(args))


# --------------------------------------------------------------------------- finding the target (pure ast)


def _own_scope(function: ast.AST) -> List[ast.AST]:
    """Every node of `function`'s body, leaving out nested functions, lambdas and classes (other scopes)."""
    nodes = []
    pending = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return nodes


def num_proc_variables(function: ast.AST) -> Set[str]:
    """Names passed as `num_proc=<name>` to a `.map(...)` call in `function`'s own scope."""
    names = set()
    for node in _own_scope(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == MAP_METHOD:
            for keyword in node.keywords:
                if keyword.arg == NUM_PROC_KEYWORD and isinstance(keyword.value, ast.Name):
                    names.add(keyword.value.id)
    return names


def assignments_to(function: ast.AST, names: Set[str]) -> list:
    """Plain `name = value` and `name: T = value` statements binding one of `names` in `function`'s own scope."""
    found = []
    for node in _own_scope(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id in names:
            found.append(node)
    return found


def _parameter_names(function: ast.FunctionDef) -> Set[str]:
    arguments = function.args
    return {argument.arg for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}


def rewrite_num_proc_assignments(function: ast.FunctionDef) -> int:
    """Point every assignment feeding a map's num_proc at HELPER_NAME(args); the number rewritten (0 = no target)."""
    if ARGS_PARAMETER not in _parameter_names(function):
        return 0
    assignments = assignments_to(function, num_proc_variables(function))
    for assignment in assignments:
        call = ast.Call(
            func=ast.Name(HELPER_NAME, ast.Load()), args=[ast.Name(ARGS_PARAMETER, ast.Load())], keywords=[]
        )
        assignment.value = ast.copy_location(call, assignment.value)
    ast.fix_missing_locations(function)
    return len(assignments)


# --------------------------------------------------------------------------- recompiling


def _parse_definition(function: types.FunctionType) -> ast.Module:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != function.__name__:
        raise ValueError(f"the source of {function.__qualname__} is not a single plain function definition")
    # Line numbers as in the zoo's file, so tracebacks still point at its real lines.
    ast.increment_lineno(tree, function.__code__.co_firstlineno - 1)
    return tree


def _recompile(tree: ast.Module, function: types.FunctionType) -> types.CodeType:
    # Only the code object is kept, so decorators must not be compiled into it.
    cast(ast.FunctionDef, tree.body[0]).decorator_list = []
    flags = function.__code__.co_flags & _FUTURE_FLAGS
    module_code = compile(tree, function.__code__.co_filename, "exec", flags=flags, dont_inherit=True)
    for constant in module_code.co_consts:
        if isinstance(constant, types.CodeType) and constant.co_name == function.__name__:
            return constant
    raise ValueError(f"recompiling {function.__qualname__} produced no code object")


# --------------------------------------------------------------------------- the patch


def _zoo_predates_policy() -> bool:
    if importlib.util.find_spec("unsloth_zoo") is None:
        return False
    try:
        importlib.import_module(POLICY_MODULE)
    except ImportError:
        return True
    return False


def _missing_target(detail: str) -> bool:
    _warn_once(
        f"unsloth could not find the worker count of {TARGET_MODULE}.{TARGET_FUNCTION} ({detail}); "
        f"that map keeps the installed unsloth_zoo's own num_proc. Upgrade unsloth_zoo to size it by the policy."
    )
    return False


def _patch() -> bool:
    if not _zoo_predates_policy():
        return False
    try:
        module = importlib.import_module(TARGET_MODULE)
    except ImportError as error:
        return _missing_target(f"{TARGET_MODULE} does not import: {error}")
    function = getattr(module, TARGET_FUNCTION, None)
    function = inspect.unwrap(function) if callable(function) else None
    if not isinstance(function, types.FunctionType):
        return _missing_target(f"no function {TARGET_FUNCTION}")
    if getattr(function, PATCHED_MARKER, False):
        return True
    tree = _parse_definition(function)
    if rewrite_num_proc_assignments(cast(ast.FunctionDef, tree.body[0])) == 0:
        return _missing_target(f"no assignment to a variable passed as {NUM_PROC_KEYWORD}= to .{MAP_METHOD}()")
    code = _recompile(tree, function)
    function.__globals__[HELPER_NAME] = policy_num_proc
    function.__code__ = code
    setattr(function, PATCHED_MARKER, True)
    return True


def patch_older_zoo() -> bool:
    """Patch an older zoo's SFT map site; True when it sizes through the policy after this call. Never raises.

    Does nothing (False) when the zoo has the policy module or is not installed; patching twice is a no-op.
    """
    try:
        with _patch_lock:
            return _patch()
    except Exception as error:
        _warn_once(
            f"unsloth could not patch {TARGET_MODULE}.{TARGET_FUNCTION} to use the dataset worker-count policy "
            f"({error!r}); that map keeps the installed unsloth_zoo's own num_proc."
        )
        return False
