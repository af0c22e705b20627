"""Fixtures for the public MLX API tests: the MLX gate switched on, one tiny llama per session, subprocess runs.

`--expect-trl=installed|absent` says which `trl` situation this session was built for, so a session installed
the wrong way fails instead of quietly testing the other case.
"""

from __future__ import annotations

import importlib.util
import os


def _absent(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return True


MISSING = [name for name in ("mlx.core", "mlx_lm", "transformers") if _absent(name)]
# Without the MLX stack (plain `pytest`, the `tests` session) this folder is skipped and the gate left alone.
collect_ignore_glob = ["test_*.py", "with_*"] if MISSING else []
if not MISSING:
    # The gate is read when `unsloth` is imported, so it is switched on before anything imports it.
    os.environ["UNSLOTH_MLX"] = "1"
    os.environ.pop("UNSLOTH_FORCE_GPU_PATH", None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import importlib.metadata  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Dict  # noqa: E402

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
# Subprocesses start in an empty folder: from the repository root, its unsloth/ folder would shadow the package.
NEUTRAL_CWD = tempfile.mkdtemp(prefix="mlx-api-cwd-")
QUESTIONS = [
    ("What colour is the kettle?", "The kettle is red."),
    ("Where do bees carry pollen?", "Bees carry pollen to the hive."),
    ("How many times does the river bend?", "The river bends twice."),
    ("Where does the bread cool?", "The bread cools by the door."),
    ("What does the lighthouse blink?", "The lighthouse blinks green."),
    ("What settles on the pines?", "Snow settles on the pines."),
    ("How many herons wait?", "Two herons wait in the reeds."),
    ("How slow is the library clock?", "The clock is four minutes slow."),
]


@pytest.fixture(autouse=True)
def _runs_in_a_folder_of_its_own(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A default output_dir lands in the test's own folder (tests/hygiene.py fails a test that writes into the checkout)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def pytest_report_header() -> list:
    return [f"tests/mlx_api not collected: {', '.join(MISSING)} not installed"] if MISSING else []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--expect-trl",
        choices=("auto", "installed", "absent"),
        default="auto",
        help="fail unless trl is installed / absent in this environment (auto: accept either)",
    )


def trl_installed() -> bool:
    """Whether a real trl distribution is installed (not whether `import trl` works: the stand-in makes it work)."""
    try:
        importlib.metadata.distribution("trl")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="session")
def trl_situation(request: pytest.FixtureRequest) -> str:
    expected = request.config.getoption("--expect-trl")
    actual = "installed" if trl_installed() else "absent"
    if expected != "auto" and expected != actual:
        pytest.fail(f"this session expects trl {expected}, but it is {actual}")
    return actual


@pytest.fixture(scope="session", autouse=True)
def mlx_gate_is_on() -> None:
    import unsloth

    if not unsloth._ON_MLX:
        pytest.fail(
            "unsloth did not switch to the MLX backend although UNSLOTH_MLX=1 (was it imported before this conftest?)"
        )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tools.kits.tiny_mlx_model import build_tiny_mlx_model

    root = tmp_path_factory.mktemp("tiny-llama-api")
    return build_tiny_mlx_model(root / "model", tokenizer_cache_dir=root / "tokenizers")


@pytest.fixture
def load_public(tiny_model_dir: Path) -> Callable[..., tuple]:
    """A fresh tiny model and tokenizer through `FastLanguageModel`; `lora=True` adds rank-8 LoRA (alpha 16)."""

    def load(lora: bool = False, **kwargs: Any) -> tuple:
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir), **kwargs)
        if lora:
            model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
        return model, tokenizer

    return load


def chat_text(question: str, answer: str) -> str:
    """The zephyr-format text (the tiny tokenizer's special tokens are zephyr's), EOS closing each turn."""
    return f"<|user|>\n{question}<|eos|>\n<|assistant|>\n{answer}<|eos|>\n"


@pytest.fixture
def chat_rows() -> list:
    return [{"text": chat_text(question, answer)} for question, answer in QUESTIONS]


@pytest.fixture
def quiet_args(tmp_path: Path) -> Callable[..., Any]:
    """UnslothTrainingArguments writing into this test's folder: short, no checkpoints, unless told otherwise."""

    def make(**overrides: Any) -> Any:
        from unsloth import UnslothTrainingArguments

        values: Dict[str, Any] = {
            "output_dir": str(tmp_path / "out"),
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "max_steps": 4,
            "warmup_steps": 0,
            "learning_rate": 3e-3,
            "save_strategy": "no",
            "max_seq_length": 64,
        }
        values.update(overrides)
        # An override of None removes the keyword, as if the notebook had never written it.
        return UnslothTrainingArguments(**{name: value for name, value in values.items() if value is not None})

    return make


class EventRecorder:
    """A Hugging Face-shaped callback writing down each event it sees with the global step."""

    def __init__(self) -> None:
        self.events: list = []
        self.logs: list = []

    def _note(self, name: str, state: Any, **kwargs: Any) -> None:
        self.events.append((name, state.global_step))
        if name == "on_log":
            self.logs.append(dict(kwargs["logs"]))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._note("on_train_begin", state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._note("on_step_end", state)

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._note("on_log", state, **kwargs)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._note("on_train_end", state)

    def names(self) -> list:
        return [name for name, _ in self.events]


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


def run_python(code: str, *, gate: str = "1", timeout: float = 120) -> Dict[str, Any]:
    """Run `code` in a fresh interpreter (this one's) and return the JSON object its last stdout line prints."""
    environment = {**os.environ, "UNSLOTH_MLX": gate}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=environment, cwd=NEUTRAL_CWD
    )
    if result.returncode != 0:
        raise AssertionError(f"subprocess failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def python_run() -> Callable[..., Dict[str, Any]]:
    return run_python
