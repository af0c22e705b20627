"""Every published vision, OCR and multimodal-audio notebook's checkpoint either trains on MLX or is refused by name
with its reason, read from the same derived list `FastVisionModel` checks (`vision/backend.py`).

The table is facts: each notebook's Hub id as its `from_pretrained` (or `snapshot_download`) cell writes it, the
`model_type` of that checkpoint's config.json, and the mlx-vlm module that builds the architecture. Copies of a
notebook under the AMD-, Kaggle- and HuggingFace Course- prefixes use the same ids and are not repeated."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from unsloth.mlx.vision.backend import AUDIO_FAMILIES, IMAGES_REFUSED, REFUSED, trainable_families, vision_families
from unsloth.mlx.vision.collator import UNSUPPORTED_PARTS


class Notebook(NamedTuple):
    name: str
    hub_id: str
    config_model_type: str
    family: str
    expected: str  # "trains", or a phrase the refusal must contain
    architecture: str = ""  # the config's first architecture, where it routes the checkpoint


TRAINS = "trains"
OCR_2_ENCODERS = "its encoders are built at full size whatever the config says"
VIDEO = "video"
OCR, OCR_2 = "DeepseekOCRForCausalLM", "DeepseekOCR2ForCausalLM"

NOTEBOOKS = (
    # DeepSeek-OCR's config says deepseek_vl_v2 (architecture DeepseekOCRForCausalLM); backend.ARCHITECTURE_ROUTES
    # loads it as deepseekocr, the module mlx-vlm's conversions rewrite it to. DeepSeek-OCR 1 trains on images
    # (its full-size SAM encoder, tests/mlx_api/test_vision_deepseekocr.py); DeepSeek-OCR 2 is refused.
    Notebook("Deepseek_OCR_(3B)", "unsloth/DeepSeek-OCR", "deepseek_vl_v2", "deepseekocr", TRAINS, OCR),
    Notebook("Deepseek_OCR_(3B)-Eval", "unsloth/DeepSeek-OCR", "deepseek_vl_v2", "deepseekocr", TRAINS, OCR),
    Notebook("Deepseek_OCR_(3B)-Evaluation", "unsloth/DeepSeek-OCR", "deepseek_vl_v2", "deepseekocr", TRAINS, OCR),
    Notebook(
        "Deepseek_OCR_2_(3B)", "unsloth/DeepSeek-OCR-2", "deepseek_vl_v2", "deepseekocr_2", OCR_2_ENCODERS, OCR_2
    ),
    Notebook(
        "ERNIE_4_5_VL_28B_A3B_PT_Vision", "unsloth/ERNIE-4.5-VL-28B-A3B-PT", "ernie4_5_moe_vl", "ernie4_5_moe_vl",
        TRAINS,
    ),
    # Gemma 3n loads with its towers and trains on text, audio and images (its full-size MobileNet-V5 tower).
    Notebook("Gemma3N_(2B)-Inference", "unsloth/gemma-3n-E2B-it", "gemma3n", "gemma3n", TRAINS),
    Notebook("Gemma3N_(4B)-Audio", "unsloth/gemma-3n-E4B-it", "gemma3n", "gemma3n", TRAINS),
    Notebook("Gemma3N_(4B)-Vision", "unsloth/gemma-3n-E4B", "gemma3n", "gemma3n", TRAINS),
    Notebook("Gemma3_(4B)-Vision", "unsloth/gemma-3-4b-pt", "gemma3", "gemma3", TRAINS),
    Notebook("Gemma3_(4B)-Vision-GRPO", "unsloth/gemma-3-4b-it", "gemma3", "gemma3", TRAINS),
    Notebook("Gemma4_(12B)_Vision", "unsloth/gemma-4-12b-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(12B)_Audio", "unsloth/gemma-4-12b-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(26B_A4B)-Vision", "unsloth/gemma-4-26B-A4B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(31B)-Vision", "unsloth/gemma-4-31B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E2B)-Vision", "unsloth/gemma-4-E2B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E2B)-Audio", "unsloth/gemma-4-E2B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E2B)_GRPO", "unsloth/gemma-4-E2B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E2B)_Reinforcement_Learning_2048_Game", "unsloth/gemma-4-E2B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E2B)_Reinforcement_Learning_Sudoku_Game", "unsloth/gemma-4-E2B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E4B)-Vision", "unsloth/gemma-4-E4B-it", "gemma4", "gemma4", TRAINS),
    Notebook("Gemma4_(E4B)-Audio", "unsloth/gemma-4-E4B-it", "gemma4", "gemma4", TRAINS),
    Notebook("LFM2.5_VL_(1.6B)-Vision", "LiquidAI/LFM2.5-VL-1.6B", "lfm2_vl", "lfm2_vl", TRAINS),
    Notebook("Llama3.2_(11B)-Vision", "unsloth/Llama-3.2-11B-Vision-Instruct", "mllama", "mllama", TRAINS),
    Notebook("Ministral_3_VL_(3B)_Vision", "unsloth/Ministral-3-3B-Instruct-2512", "mistral3", "mistral3", TRAINS),
    Notebook(
        "Ministral_3_(3B)_Reinforcement_Learning_Sudoku_Game", "unsloth/Ministral-3-3B-Instruct-2512", "mistral3",
        "mistral3", TRAINS,
    ),
    Notebook(
        "Muse_Glimmer_(30B)-Multimodal", "unsloth/Muse-Glimmer-30B-unsloth-bnb-4bit", "muse_glimmer", "muse_glimmer",
        VIDEO,
    ),
    Notebook(
        "Muse_Glimmer_(30B)-Vision", "unsloth/Muse-Glimmer-30B-unsloth-bnb-4bit", "muse_glimmer", "muse_glimmer",
        TRAINS,
    ),
    Notebook("Paddle_OCR_(1B)_Vision", "unsloth/PaddleOCR-VL", "paddleocr_vl", "paddleocr_vl", TRAINS),
    # Pixtral's config says llava with a pixtral vision_config; backend.CONFIG_ROUTES loads it as pixtral.
    Notebook("Pixtral_(12B)-Vision", "unsloth/Pixtral-12B-2409", "llava", "pixtral", TRAINS),
    Notebook("Qwen2.5_VL_(7B)-Vision", "unsloth/Qwen2.5-VL-7B-Instruct-bnb-4bit", "qwen2_5_vl", "qwen2_5_vl", TRAINS),
    Notebook("Qwen2_5_7B_VL_GRPO", "unsloth/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", "qwen2_5_vl", TRAINS),
    Notebook("Qwen2_VL_(7B)-Vision", "unsloth/Qwen2-VL-7B-Instruct", "qwen2_vl", "qwen2_vl", TRAINS),
    Notebook("Qwen3_5_(0_8B)_Vision", "unsloth/Qwen3.5-0.8B", "qwen3_5", "qwen3_5", TRAINS),
    Notebook("Qwen3_5_(2B)_Vision", "unsloth/Qwen3.5-2B", "qwen3_5", "qwen3_5", TRAINS),
    Notebook("Qwen3_5_(4B)_Vision", "unsloth/Qwen3.5-4B", "qwen3_5", "qwen3_5", TRAINS),
    Notebook("Qwen3_5_(4B)_Vision_GRPO", "unsloth/Qwen3.5-4B", "qwen3_5", "qwen3_5", TRAINS),
    Notebook("Qwen3_VL_(8B)-Vision", "unsloth/Qwen3-VL-8B-Instruct-unsloth-bnb-4bit", "qwen3_vl", "qwen3_vl", TRAINS),
    Notebook(
        "Qwen3_VL_(8B)-Vision-GRPO", "unsloth/Qwen3-VL-8B-Instruct-unsloth-bnb-4bit", "qwen3_vl", "qwen3_vl", TRAINS,
    ),
)  # fmt: skip


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[notebook.name for notebook in NOTEBOOKS])
def test_each_vision_notebook_checkpoint_trains_or_is_refused_by_name(notebook: Notebook) -> None:
    assert notebook.family in vision_families(), f"mlx-vlm no longer ships {notebook.family!r}"
    if notebook.expected == TRAINS:
        assert notebook.family in trainable_families()
        # An audio notebook's rows reach the family's audio tower (tests/mlx_api/test_vision_audio.py).
        assert "Audio" not in notebook.name or notebook.family in AUDIO_FAMILIES
    elif notebook.expected == VIDEO:
        # The family trains on images; the notebook's video rows are refused by the collator, by name.
        assert notebook.family in trainable_families() and VIDEO in UNSUPPORTED_PARTS
    elif notebook.family in IMAGES_REFUSED:
        # The family trains on text and audio; the notebook's image parts are refused by the collator, by name.
        assert notebook.family in trainable_families() and notebook.expected in IMAGES_REFUSED[notebook.family]
    else:
        assert notebook.expected in REFUSED[notebook.family]


def test_the_config_model_type_reaches_the_module_named_in_the_table() -> None:
    from mlx_vlm.utils import get_model_type

    from unsloth.mlx.vision.backend import routed_model_type

    for notebook in NOTEBOOKS:
        vision = {"model_type": "pixtral"} if notebook.config_model_type == "llava" else {}
        config = {"model_type": notebook.config_model_type, "vision_config": vision}
        if notebook.architecture:
            config["architectures"] = [notebook.architecture]
        reached = routed_model_type(config) or get_model_type(config)
        assert reached == notebook.family, notebook.name


def test_the_tally_of_notebooks_that_train() -> None:
    training = [notebook for notebook in NOTEBOOKS if notebook.expected == TRAINS]
    assert (len(NOTEBOOKS), len({notebook.hub_id for notebook in NOTEBOOKS}), len(training)) == (38, 26, 36)
