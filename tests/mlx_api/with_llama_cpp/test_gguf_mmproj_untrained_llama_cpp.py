"""The cheap llama.cpp check of a vision family's GGUF export: a tiny untrained model of each family in `FAMILIES`,
exported in f16 (language model plus mmproj) and read by libmtmd, must give MLX's logits at the first generated
position of an image prompt, and MLX's greedy tokens while MLX's top-1 margin is clear of the export's rounding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

from ..conftest import NEUTRAL_CWD
from .agreement import runner_failure
from .test_gguf_mmproj_llama_cpp import QUESTION, QWEN_IMAGE, RUNNER, Family, _build, _mlx_greedy, _square

NEW_TOKENS = 4
EMBEDDINGS_RUNNER = Path(__file__).with_name("llama_cpp_mtmd_embeddings.py")
# f16 rounds each weight by up to 2^-11 of itself; the trained families' tests measure first-logit gaps of 1e-3..2e-2
# of the largest logit, so a gap past 2e-2 is an export that computes something else, not rounding.
LARGEST_GAP = 2e-2
# A greedy token is compared only while MLX's top two logits stand further apart than this many measured gaps (two
# would do if every position erred as the first does; twice that leaves room for the positions after it).
CLEAR_MARGIN = 4
GLM_IMAGE = "<|begin_of_image|><|image|><|end_of_image|>"
QWEN3_SIDE = 96  # 9 image tokens: the 4 x 4 learned positions resized to 6 x 6 patches, merged 2 x 2
FAMILIES = {
    "qwen3_vl_moe": Family("build_tiny_qwen3_vl_moe", QWEN3_SIDE, QWEN_IMAGE, "<__media__>", "image_token_id"),
    "qwen3_5": Family("build_tiny_qwen3_5", QWEN3_SIDE, QWEN_IMAGE, "<__media__>", "image_token_id"),
    "qwen3_5_moe": Family("build_tiny_qwen3_5_moe", QWEN3_SIDE, QWEN_IMAGE, "<__media__>", "image_token_id"),
    # The Hub's Pixtral: 4 x 4 patches of 8 pixels, libmtmd writes the rows' [IMG_BREAK] and the [IMG_END] itself.
    "llava": Family("build_tiny_pixtral_as_hub", 32, "[IMG]", "<__media__>", "image_token_index"),
    # Mistral 3: the same tower, its 8 x 8 patches merged 2 x 2 into llama.cpp's fewest tokens for Pixtral (8) or more.
    "mistral3": Family("build_tiny_mistral3", 64, "[IMG]", "<__media__>", "image_token_index"),
    # Idefics 3 and SmolVLM: a 64-pixel square cut in 2 x 2 tiles of 32 and a global view, 4 tokens each; libmtmd
    # writes the markers around each tile and the global view itself.
    "idefics3": Family("build_tiny_idefics3", 64, "<image>", "<__media__>", "image_token_id"),
    "smolvlm": Family("build_tiny_smolvlm", 64, "<image>", "<__media__>", "image_token_id"),
    # GLM-4.1V: 6 x 6 patches of 8 pixels, its learned position grid's size (mlx-vlm resizes that grid bilinearly,
    # llama.cpp bicubically, alike only at its own size), merged 2 x 2; libmtmd writes the image markers itself.
    "glm4v": Family("build_tiny_glm4v", 48, GLM_IMAGE, "<__media__>", "image_token_id"),
    "glm4v_moe": Family("build_tiny_glm4v_moe", 48, GLM_IMAGE, "<__media__>", "image_token_id"),
    "glm_ocr": Family("build_tiny_glm_ocr", 48, GLM_IMAGE, "<__media__>", "image_token_id"),
}
# Tokens the processor writes inside an image that libmtmd counts as image positions (their embeddings in mmproj).
IMAGE_CHUNK_TOKENS = {"llava": ("[IMG_BREAK]",), "mistral3": ("[IMG_BREAK]",)}
# Families whose processor bounds an image's pixels times its frames (GLM-4V's counts an image as two).
FRAMES = {"glm4v": 2, "glm4v_moe": 2, "glm_ocr": 2}
# Builders whose mlx-vlm processor reads a flat list of images (GLM-OCR's, where torch is absent).
FLAT_IMAGES = {"build_tiny_glm_ocr"}
# The processor's outputs beside the pixels that the model reads (Qwen's patch grid, Mistral 3's image size, Idefics 3's
# pixel mask).
_EXTRAS = ("image_grid", "image_sizes", "pixel_attention_mask")


def _build_for(name: str, family: Family, folder: Path) -> Path:
    """The family's tiny model, its processor told to keep the square's size; a Pixtral tower (no learned positions)
    told it takes a square that size."""
    folder = _build(family, folder)
    settings = folder / "preprocessor_config.json"
    preprocessor = json.loads(settings.read_text(encoding="utf-8"))
    if name in FRAMES:
        pixels = FRAMES[name] * family.side**2
        preprocessor["size"] = {"shortest_edge": pixels, "longest_edge": pixels}
        settings.write_text(json.dumps(preprocessor), encoding="utf-8")
    if "longest_edge" in (preprocessor.get("size") or {}) and family.side > preprocessor["size"]["longest_edge"]:
        preprocessor["size"] = {"longest_edge": family.side}
        settings.write_text(json.dumps(preprocessor), encoding="utf-8")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config["vision_config"]["image_size"] = family.side
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _prompt(processor: Any, family: Family, colour: str) -> tuple:
    import mlx.core as mx

    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    images: list = [_square(family.side, colour)]
    images = images if family.builder in FLAT_IMAGES else [images]
    inputs = processor(images=images, text=[text], add_special_tokens=False)
    ids = [int(token) for token in np.asarray(inputs["input_ids"])[0]]
    extras = {name: mx.array(np.asarray(value)) for name, value in inputs.items() if name.startswith(_EXTRAS)}
    return text, ids, np.asarray(inputs["pixel_values"]), extras


@pytest.fixture(scope="module", params=list(FAMILIES))
def compared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    from unsloth import FastVisionModel

    family = FAMILIES[request.param]
    root = tmp_path_factory.mktemp(f"{request.param}-untrained-mmproj")
    model, processor = FastVisionModel.from_pretrained(str(_build_for(request.param, family, root / "model")))
    FastVisionModel.for_inference(model)
    text, ids, pixels, extras = _prompt(processor, family, "blue")
    first, tokens = _mlx_greedy(model, ids, pixels, extras, NEW_TOKENS)
    margins = []
    sequence = list(ids)
    for token in tokens:  # MLX's top-1 margin at each greedy step
        logits, _ = _mlx_greedy(model, sequence, pixels, extras, 1)
        ordered = np.sort(logits)
        margins.append(float((ordered[-1] - ordered[-2]) / np.abs(logits).max()))
        sequence.append(token)
    _, other_ids, other_pixels, other_extras = _prompt(processor, family, "red")
    other_first, _ = _mlx_greedy(model, other_ids, other_pixels, other_extras, 1)
    paths = model.save_pretrained_gguf(str(root / "gguf"), processor, quantization_method="f16")
    (root / "square.rgb").write_bytes(_square(family.side, "blue").tobytes())
    assert family.image_text in text
    image_token = int(getattr(model.config, family.image_token))
    command = [sys.executable, str(RUNNER), str(paths[-1]), str(root / "square.rgb"), str(family.side)]
    command += [str(family.side), str(image_token), text.replace(family.image_text, family.mtmd_text)]
    command += [str(NEW_TOKENS), *map(str, paths[:-1])]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=NEUTRAL_CWD, env={**os.environ, "UNSLOTH_MLX": "1"}
    )
    assert result.returncode == 0, runner_failure(result.returncode, result.stderr)
    (reloaded,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    scale = np.abs(first).max()
    folded = {processor.tokenizer.convert_tokens_to_ids(token) for token in IMAGE_CHUNK_TOKENS.get(request.param, ())}
    return {
        "family": request.param,
        "ids": [image_token if token in folded else token for token in ids],
        "tokens": tokens,
        "margins": margins,
        "reloaded": reloaded,
        "gap": float(np.abs(np.array(reloaded["first_logits"]) - first).max() / scale),
        "image_effect": float(np.abs(other_first - first).max() / scale),
    }


def test_llama_cpp_reads_the_image_prompt_with_mlxs_logits_and_greedy_tokens(compared) -> None:
    reloaded, gap = compared["reloaded"], compared["gap"]
    clear = 0
    while clear < NEW_TOKENS and compared["margins"][clear] > CLEAR_MARGIN * gap:
        clear += 1
    print(
        f"{compared['family']}: first-logits gap {gap:.2e}, another colour moves them {compared['image_effect']:.2e}, "
        f"{clear} clear greedy steps, margins {[round(margin, 3) for margin in compared['margins']]}"
    )
    assert reloaded["prompt"] == compared["ids"]
    # An untrained model still reads the image: a projector llama.cpp ran differently would move the logits as much.
    assert compared["image_effect"] > 5 * LARGEST_GAP
    assert gap < LARGEST_GAP
    assert clear >= 1, "no greedy step of this seed's untrained model is clear of the gap: pick another seed"
    assert reloaded["tokens"][:clear] == compared["tokens"][:clear]


# A square whose every patch differs, so that image tokens in another order give other embeddings.
def _gradient(side: int) -> Any:
    from PIL import Image

    ramp = np.arange(side, dtype=np.uint8) * (255 // side)
    pixels = np.stack([np.broadcast_to(ramp, (side, side)), np.broadcast_to(ramp[:, None], (side, side))], axis=-1)
    return Image.fromarray(np.concatenate([pixels, np.full((side, side, 1), 128, np.uint8)], axis=-1))


def test_llama_cpps_llama4_projector_reads_the_token_grid_transposed(tmp_path) -> None:
    """Why Llama 4's mmproj is refused (`Llama4Projector.llama_cpp_differs`): libmtmd's image embeddings are MLX's with
    the token grid transposed. Failing here means llama.cpp keeps the grid's order now: lift the refusal."""
    import mlx.core as mx

    from tools.kits.tiny_vlm_llama4 import LLAMA4_IMAGE_SIDE, build_tiny_llama4
    from unsloth import FastVisionModel
    from unsloth.mlx.gguf.export import write_files
    from unsloth.mlx.gguf.projectors import PROJECTORS
    from unsloth.mlx.gguf.projectors.mmproj import write_mmproj
    from unsloth.mlx.vision.merged import merged_weights

    folder = build_tiny_llama4(tmp_path / "model")
    model, processor = FastVisionModel.from_pretrained(str(folder))
    image = _gradient(LLAMA4_IMAGE_SIDE)
    pixels = mx.array(np.asarray(processor(images=[[image]], text=["<|image|>"])["pixel_values"]))
    tower = model.vision_model(pixels)
    mine = np.array(model.multi_modal_projector(tower.reshape(-1, tower.shape[-1])).astype(mx.float32))
    family, weights = PROJECTORS["llama4"], merged_weights(model)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    preprocessor = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    (language,) = write_files(*family.language(config, weights), tmp_path / "gguf", processor.tokenizer, ["f16"])
    write_mmproj(tmp_path / "gguf" / "mmproj.gguf", family, config, weights, preprocessor, "f16")
    (tmp_path / "image.rgb").write_bytes(image.tobytes())
    side = str(LLAMA4_IMAGE_SIDE)
    command = [
        sys.executable,
        str(EMBEDDINGS_RUNNER),
        str(tmp_path / "gguf" / "mmproj.gguf"),
        str(tmp_path / "image.rgb"),
    ]
    result = subprocess.run(
        [*command, side, side, str(language)], capture_output=True, text=True, timeout=300, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, runner_failure(result.returncode, result.stderr)
    (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    theirs = np.array(row["embeddings"])
    grid = int(round(len(mine) ** 0.5))
    transposed = np.arange(grid * grid).reshape(grid, grid).T.reshape(-1)
    scale = np.abs(mine).max()
    as_is, once_transposed = (float(np.abs(order - theirs).max() / scale) for order in (mine, mine[transposed]))
    print(f"llama4: libmtmd's image embeddings {as_is:.2e} from MLX's, {once_transposed:.2e} once transposed")
    assert as_is > 0.5  # the tokens of the other diagonal swapped
    # mlx-vlm's x*sigmoid(1.702x) against llama.cpp's GELU, and f16: well below the swap.
    assert once_transposed < 5e-2
