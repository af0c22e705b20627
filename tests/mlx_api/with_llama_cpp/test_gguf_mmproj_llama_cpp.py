"""A vision model's GGUF export read by llama.cpp's own multimodal library: a tiny model of each family in `FAMILIES`
(mlx-vlm's classes) is LoRA-trained until it names the colour of a square, exported as its language model's GGUF plus
the projector's mmproj, and libmtmd, fed the same square, must continue the prompt with MLX's greedy tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from ..conftest import NEUTRAL_CWD
from .agreement import runner_failure

RUNNER = Path(__file__).with_name("llama_cpp_mtmd_greedy.py")
NEW_TOKENS = 8
COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30)}
QUESTION = "What colour is this square?"
# (file, least greedy tokens equal, largest first-logits gap relative to the largest logit)
EXPECTED = {"f16": ("unsloth.F16.gguf", NEW_TOKENS, 2e-2), "q8_0": ("unsloth.Q8_0.gguf", NEW_TOKENS - 1, 1e-1)}


@dataclass(frozen=True)
class Family:
    builder: str  # its builder in tools.kits.tiny_vlm_model
    side: int  # the square's side in pixels
    image_text: str  # what the processor's chat template writes for an image
    mtmd_text: str  # what libmtmd is given there (it writes the markers around its media marker itself)
    image_token: str  # the config's key for the image placeholder's id
    steps: int = 40  # training steps until it names the colour


QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
FAMILIES = {
    # Gemma 3's processor writes "\n\n" around <start_of_image>...<end_of_image>; libmtmd writes those two markers.
    "gemma3": Family("build_tiny_gemma3", 32, "<start_of_image>", "\n\n<__media__>\n\n", "image_token_index"),
    # 140 pixels: 25 tokens, at least llama.cpp's fewest (8) for Qwen, in two windows a side of Qwen 2.5's tower.
    "qwen2_5_vl": Family("build_tiny_qwen25_vl", 140, QWEN_IMAGE, "<__media__>", "image_token_id", steps=30),
    # 96 pixels: 9 tokens, the 4 x 4 learned positions resized to 6 x 6 patches; a deepstack layer.
    "qwen3_vl": Family("build_tiny_qwen3_vl", 96, QWEN_IMAGE, "<__media__>", "image_token_id", steps=20),
}


def _square(side: int, colour: str) -> Any:
    from PIL import Image

    return Image.new("RGB", (side, side), COLOURS[colour])


def _rows(side: int) -> List[Dict[str, Any]]:
    def conversation(colour: str) -> Dict[str, Any]:
        user = [{"type": "text", "text": QUESTION}, {"type": "image", "image": _square(side, colour)}]
        reply = [{"type": "text", "text": f"It is {colour}."}]
        return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]}

    return [conversation(colour) for colour in COLOURS] * 4


def _train(model: Any, processor: Any, rows: List[Dict[str, Any]], folder: Path, steps: int) -> None:
    from trl import SFTConfig, SFTTrainer

    from unsloth.trainer import UnslothVisionDataCollator

    args = SFTConfig(
        per_device_train_batch_size=2,
        max_steps=steps,
        learning_rate=5e-3,
        warmup_steps=0,
        seed=3407,
        output_dir=str(folder / "out"),
        report_to="none",
        save_strategy="no",
        remove_unused_columns=False,
        dataset_text_field="",
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=256,
        dataset_order="default",
    )
    collator = UnslothVisionDataCollator(model, processor)
    SFTTrainer(model=model, tokenizer=processor, data_collator=collator, train_dataset=rows, args=args).train()


def _mlx_greedy(model: Any, ids: List[int], pixels: Any, extras: Dict[str, Any], count: int) -> tuple:
    """The first generated position's logits and `count` greedy tokens from the causal pass training runs."""
    import mlx.core as mx

    from unsloth.mlx.vision.backend import causal_logits

    sequence, first = list(ids), None
    for _ in range(count):
        logits = causal_logits(model, mx.array([sequence]), mx.array(pixels), extras)[0, -1].astype(mx.float32)
        first = np.array(logits, dtype=np.float64) if first is None else first
        sequence.append(int(mx.argmax(logits).item()))
    return first, sequence[len(ids) :]


def _build(family: Family, folder: Path) -> Path:
    """The family's tiny model, its processor told to keep the square's size (as llama.cpp's preprocessing does)."""
    from tools.kits import tiny_vlm_model

    folder = getattr(tiny_vlm_model, family.builder)(folder)
    settings = folder / "preprocessor_config.json"
    preprocessor = json.loads(settings.read_text(encoding="utf-8"))
    if "min_pixels" in preprocessor:
        preprocessor.update(min_pixels=family.side**2, max_pixels=family.side**2)
    if "shortest_edge" in (preprocessor.get("size") or {}):  # Qwen 3 VL's processor spells the same bounds so
        preprocessor["size"] = {"shortest_edge": family.side**2, "longest_edge": family.side**2}
    settings.write_text(json.dumps(preprocessor), encoding="utf-8")
    return folder


@pytest.fixture(scope="module", params=list(FAMILIES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    import mlx.core as mx

    from unsloth import FastVisionModel

    family = FAMILIES[request.param]
    root = tmp_path_factory.mktemp(f"{request.param}-mmproj")
    mx.random.seed(0)
    model, processor = FastVisionModel.from_pretrained(str(_build(family, root / "model")))
    model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0, random_state=3407)
    FastVisionModel.for_training(model)
    _train(model, processor, _rows(family.side), root, family.steps)
    FastVisionModel.for_inference(model)
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = _square(family.side, "blue")
    inputs = processor(images=[[image]], text=[text], add_special_tokens=False)
    ids = [int(token) for token in np.asarray(inputs["input_ids"])[0]]
    extras = {name: mx.array(np.asarray(value)) for name, value in inputs.items() if name.startswith("image_grid")}
    first, tokens = _mlx_greedy(model, ids, np.asarray(inputs["pixel_values"]), extras, NEW_TOKENS)
    paths = model.save_pretrained_gguf(str(root / "gguf"), processor, quantization_method=list(EXPECTED))
    (root / "square.rgb").write_bytes(image.tobytes())
    assert family.image_text in text
    mtmd_text = text.replace(family.image_text, family.mtmd_text)
    image_token = int(getattr(model.config, family.image_token))
    command = [sys.executable, str(RUNNER), str(paths[-1]), str(root / "square.rgb"), str(family.side)]
    command += [str(family.side), str(image_token), mtmd_text, str(NEW_TOKENS), *map(str, paths[:-1])]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=NEUTRAL_CWD, env={**os.environ, "UNSLOTH_MLX": "1"}
    )
    assert result.returncode == 0, runner_failure(result.returncode, result.stderr)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    answer = processor.tokenizer.decode(tokens)
    return {
        "family": request.param,
        "paths": paths,
        "ids": ids,
        "first": first,
        "tokens": tokens,
        "answer": answer,
        "reloaded": rows,
    }


def test_the_files_are_named_and_ordered_as_cuda_unsloth_writes_them(exported) -> None:
    names = [Path(path).name for path in exported["paths"]]
    assert names == ["unsloth.F16.gguf", "unsloth.Q8_0.gguf", "unsloth.F16-mmproj.gguf"]


@pytest.mark.parametrize("method", list(EXPECTED))
def test_llama_cpp_reads_the_image_and_answers_as_mlx_does(exported, method) -> None:
    file_name, least_equal, largest_gap = EXPECTED[method]
    reloaded = {Path(row["path"]).name: row for row in exported["reloaded"]}[file_name]
    assert reloaded["prompt"] == exported["ids"]
    equal = sum(mine == theirs for mine, theirs in zip(reloaded["tokens"], exported["tokens"]))
    gap = float(np.abs(np.array(reloaded["first_logits"]) - exported["first"]).max() / np.abs(exported["first"]).max())
    print(f"{exported['family']} {method}: {equal}/{NEW_TOKENS} equal, gap {gap:.2e} ({exported['answer']!r})")
    assert "blue" in exported["answer"]
    assert equal >= least_equal, (reloaded["tokens"], exported["tokens"])
    assert gap < largest_gap
