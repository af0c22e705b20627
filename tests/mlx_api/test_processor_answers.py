"""The second value of `from_pretrained` on a multimodal checkpoint is the processor CUDA Unsloth returns, answering
what the notebooks read from it: `.tokenizer`, the special tokens and their ids (copied from its tokenizer, as CUDA
Unsloth copies them), `decode` / `batch_decode`, `convert_tokens_to_ids` and `apply_chat_template`.

`FastLanguageModel` hands a checkpoint with towers to `FastModel`, as CUDA Unsloth's does for every family outside
its own text list (the Qwen 3.5 MoE notebook: `model, processor = FastLanguageModel.from_pretrained(...)`). ERNIE 4.5
VL's Hub repo ships its own processor and model code; its notebook's calls on them (`processor.eval()`,
`model.add_image_preprocess(processor)`) answer on MLX, where mlx-vlm's processor already prepares images whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict

import pytest

# Gemma 4's processor builds its audio feature extractor as the real checkpoint does, and transformers warns so.
pytestmark = pytest.mark.filterwarnings("ignore:At least one mel filter has all zero values:UserWarning")
TOKEN_NAMES = ("bos_token", "bos_token_id", "eos_token", "eos_token_id", "pad_token", "pad_token_id")
SENTENCE = "The kettle is red."


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    from tools.kits.tiny_vlm_model import BUILDERS

    root = tmp_path_factory.mktemp("tiny-vlm-processors")
    built: Dict[str, Path] = {}

    def build(family: str) -> Path:
        from tools.kits.tiny_vlm_gemma3n import build_tiny_gemma3n

        if family not in built:
            built[family] = {**BUILDERS, "gemma3n": build_tiny_gemma3n}[family](root / family)
        return built[family]

    return build


def _families() -> tuple:
    from tools.kits.tiny_vlm_model import BUILDERS

    return tuple(BUILDERS)


def _check_answers(processor) -> None:
    tokenizer = processor.tokenizer
    for name in TOKEN_NAMES:
        assert getattr(processor, name) == getattr(tokenizer, name), name
    ids = tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    assert processor.decode(ids) == tokenizer.decode(ids)
    assert processor.batch_decode([ids, ids]) == [tokenizer.decode(ids)] * 2
    piece = tokenizer.convert_ids_to_tokens(ids[0])
    assert processor.convert_tokens_to_ids(piece) == ids[0]
    assert processor.convert_ids_to_tokens(ids[0]) == piece


@pytest.mark.parametrize("family", _families())
def test_vision_processor_answers_as_the_notebooks_read_it(family: str, vlm_dir: Callable[[str], Path]) -> None:
    from unsloth import FastVisionModel

    _, processor = FastVisionModel.from_pretrained(str(vlm_dir(family)))
    _check_answers(processor)


@pytest.mark.parametrize("family", ["gemma4", "gemma3n", "qwen3_5"])
def test_fast_model_processor_has_pad_token_id(family: str, vlm_dir: Callable[[str], Path]) -> None:
    """The Gemma 4 and Gemma 3n text notebooks decode labels with `tokenizer.pad_token_id` on FastModel's processor,
    and the ERNIE collator sets it when it is None; a value set on the processor reaches its tokenizer."""
    from unsloth import FastModel

    _, processor = FastModel.from_pretrained(str(vlm_dir(family)), load_in_4bit=False)
    assert processor.pad_token_id is not None and processor.pad_token_id == processor.tokenizer.pad_token_id
    labels = [-100, *processor.tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]]
    shown = processor.decode([processor.pad_token_id if x == -100 else x for x in labels])
    assert shown.replace(processor.pad_token, " ").strip() == SENTENCE
    processor.pad_token_id = processor.eos_token_id
    assert processor.tokenizer.pad_token_id == processor.eos_token_id


def test_fast_language_model_returns_the_processor_for_a_checkpoint_with_towers(
    vlm_dir: Callable[[str], Path],
) -> None:
    """The Qwen 3.5 MoE notebook's `tokenizer = processor.tokenizer`, then LoRA through FastLanguageModel."""
    from unsloth import FastLanguageModel

    model, processor = FastLanguageModel.from_pretrained(str(vlm_dir("qwen3_5")), load_in_4bit=False)
    assert hasattr(processor, "image_processor")
    tokenizer = processor.tokenizer
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text.startswith("<|im_start|>user")
    _check_answers(processor)
    model = FastLanguageModel.get_peft_model(model, r=4, target_modules=["q_proj", "v_proj"])
    assert model.vision_tower is not None


def test_fast_language_model_keeps_a_text_checkpoint_on_its_tokenizer(tiny_model_dir: Path) -> None:
    from unsloth import FastLanguageModel

    _, tokenizer = FastLanguageModel.from_pretrained(str(tiny_model_dir))
    assert not hasattr(tokenizer, "image_processor") and hasattr(tokenizer, "convert_tokens_to_ids")


@pytest.mark.filterwarnings("ignore:.*trust_remote_code.*:RuntimeWarning")
def test_ernie_repo_code_calls_answer(vlm_dir: Callable[[str], Path]) -> None:
    """The ERNIE 4.5 VL notebook's load and its next cells: `processor.eval()`, `model.add_image_preprocess(processor)`
    and the collator's `tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>")`."""
    import json

    from transformers import AutoModelForCausalLM

    from unsloth import FastVisionModel

    folder = vlm_dir("ernie4_5_moe_vl")
    model, tokenizer = FastVisionModel.from_pretrained(
        str(folder), auto_model=AutoModelForCausalLM, load_in_4bit=False, trust_remote_code=True
    )
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert tokenizer.convert_tokens_to_ids("<|IMAGE_PLACEHOLDER|>") == config["im_patch_id"]
    assert tokenizer.eval() is tokenizer and tokenizer.training is False
    assert tokenizer.train() is tokenizer and tokenizer.training is True
    tokenizer.eval()
    model.add_image_preprocess(tokenizer)
    assert model.image_preprocess is tokenizer.image_processor
    text = tokenizer.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("Assistant: ")
