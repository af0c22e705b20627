"""Rule 4: `from trl import SFTTrainer, SFTConfig` on MLX, trl absent (a stand-in) or installed without dependencies.

Run with `--expect-trl=absent` in a session without trl and `--expect-trl=installed` in one with `trl --no-deps`.
Each case runs in a fresh interpreter, since which `trl` a process sees is decided by its first import.
"""

from __future__ import annotations

import pytest

from .conftest import run_python

PROBE = """
import json, sys
{before}
import unsloth
import trl
from unsloth import UnslothTrainer, UnslothTrainingArguments
from unsloth.mlx import activation
from unsloth.mlx.compat import trl_shim
star = {{}}
listed = list(trl.__all__)
try:
    exec("from trl import *", star)
    star_error = None
except Exception as error:
    star_error = type(error).__name__ + ": " + str(error)
mlx_trained = trl_shim.mlx_rl_names()
stubs = [name for name in trl.__all__ if name.endswith("Trainer") and name != "SFTTrainer" and name not in mlx_trained]
refusals = {{}}
for name in stubs:
    try:
        getattr(trl, name)(None, args=None)
    except NotImplementedError as error:
        refusals[name] = str(error)
first = (trl.SFTTrainer, trl.SFTConfig, [getattr(trl, name) for name in stubs])
activation.install_shims()
trl_shim.patch_trl(sys.modules["trl"]) if hasattr(trl, trl_shim.PATCHED_MARK) else None
again = (trl.SFTTrainer, trl.SFTConfig, [getattr(trl, name) for name in stubs])
config = trl.SFTConfig(output_dir="out")
print(json.dumps({{
    "sft_trainer": trl.SFTTrainer is UnslothTrainer,
    "sft_config": issubclass(trl.SFTConfig, UnslothTrainingArguments),
    "epochs": [config.num_train_epochs, config.max_steps],
    "star": sorted(name for name in ("SFTTrainer", "SFTConfig") if name in star),
    "star_error": star_error,
    "listed": listed,
    "star_sft_is_ours": star.get("SFTTrainer") is UnslothTrainer,
    "stubs": stubs,
    "refusals": refusals,
    "idempotent": first[0] is again[0] and first[1] is again[1] and all(a is b for a, b in zip(first[2], again[2])),
    "same_module": sys.modules["trl"] is trl,
    "file": getattr(trl, "__file__", None),
    "version": trl.__version__,
    "stand_in": getattr(trl, trl_shim.STAND_IN_MARK, False),
    "patched": getattr(trl, trl_shim.PATCHED_MARK, False),
    "original_trainers": original_trainers,
    "original_all": original_all,
    "torch_loaded": "torch" in sys.modules,
    "mlx_trained": {{name: getattr(trl, name).__module__ for name in mlx_trained}},
}}))
"""

BEFORE_NOTHING = "original_trainers = None\noriginal_all = None"
BEFORE_REAL_TRL = (
    "import trl as real_trl\noriginal_trainers = sorted(n for n in real_trl.__all__ if n.endswith('Trainer'))\n"
    "original_all = list(real_trl.__all__)"
)


def _check_common(found: dict) -> None:
    assert found["sft_trainer"] and found["sft_config"]
    assert found["epochs"] == [3, -1]  # TRL's default of three epochs when no length is given
    if found["stand_in"]:
        assert found["star"] == ["SFTConfig", "SFTTrainer"] and found["star_sft_is_ours"]
    else:
        # Without torch the real trl lists only the names that load, so a star import works and brings ours.
        assert "SFTTrainer" in found["listed"] and len(found["listed"]) > 20
        assert found["star_error"] is None and found["star_sft_is_ours"]
        assert found["star"] == ["SFTConfig", "SFTTrainer"]
    assert found["stubs"] and set(found["refusals"]) == set(found["stubs"])
    for name, message in found["refusals"].items():
        assert message.startswith(f"{name} is not available on MLX: only SFT training")
    assert "KTOTrainer" in found["stubs"] and not {"DPOTrainer", "ORPOTrainer"} & set(found["stubs"])
    assert found["mlx_trained"]["DPOTrainer"] == "unsloth.mlx.rl.dpo"
    assert found["mlx_trained"]["ORPOConfig"] == "unsloth.mlx.rl.orpo_config"
    assert found["idempotent"] and found["same_module"]
    assert found["torch_loaded"] is False  # trainers were read from trl.__all__, never touched through getattr


def test_trl_imported_after_unsloth(trl_situation: str) -> None:
    found = run_python(PROBE.format(before=BEFORE_NOTHING))
    _check_common(found)
    if trl_situation == "absent":
        assert found["stand_in"] and not found["patched"] and found["file"] is None
        assert found["version"] == "0.0.0+unsloth-mlx"
    else:
        assert found["patched"] and not found["stand_in"]
        assert found["file"].endswith("trl/__init__.py") and found["version"][0].isdigit()


def test_trl_imported_before_unsloth_is_patched_in_place(trl_situation: str) -> None:
    if trl_situation == "absent":
        pytest.skip("without trl there is nothing to import before unsloth")
    found = run_python(PROBE.format(before=BEFORE_REAL_TRL))
    _check_common(found)
    assert found["patched"] and not found["stand_in"]
    # Every trainer the real trl listed, except SFT, became a refusing stub; only names needing torch left the listing.
    assert sorted(found["stubs"]) == [
        name for name in found["original_trainers"] if name != "SFTTrainer" and name not in found["mlx_trained"]
    ]
    # ORPO's names join the top level, where TRL 0.2x had them and notebooks import them from.
    assert set(found["listed"]) <= set(found["original_all"]) | set(found["mlx_trained"])
    assert set(found["original_trainers"]) <= set(found["listed"])
    assert "create_reference_model" in set(found["original_all"]) - set(found["listed"])  # trl.models needs torch


def test_stand_in_is_not_offered_while_the_gate_is_off(trl_situation: str) -> None:
    code = (
        "import json, unsloth\n"
        "try:\n"
        "    import trl\n"
        "    print(json.dumps({'imported': True, 'mark': hasattr(trl, '__unsloth_mlx_patched__')}))\n"
        "except ImportError:\n"
        "    print(json.dumps({'imported': False, 'mark': False}))\n"
    )
    found = run_python(code, gate="0")
    assert found == {"imported": trl_situation == "installed", "mark": False}
