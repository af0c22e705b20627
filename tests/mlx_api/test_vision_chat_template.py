"""`get_chat_template(processor, family)` on a vision processor, then the Gemma 3 vision notebook's inference and
trainer cells: the template goes on the processor and its tokenizer, and an image part renders as the placeholder
the processor expands, so the prompt carries the image."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_vision import QUESTION, conversation, load, square, vision_config, vision_dirs  # noqa: F401

FAMILY_NAMES = {
    "gemma3": ("gemma-3", "<start_of_image>"),
    "qwen2_5_vl": ("qwen-2.5", "<|vision_start|><|image_pad|><|vision_end|>"),
}


@pytest.mark.parametrize("family", sorted(FAMILY_NAMES))
def test_the_template_goes_on_the_processor_and_renders_the_image(vision_dirs, family) -> None:  # noqa: F811
    from unsloth import get_chat_template

    _, processor = load(vision_dirs, family, lora=False)
    name, placeholder = FAMILY_NAMES[family]
    returned = get_chat_template(processor, name)
    assert returned is processor
    assert processor.chat_template == processor.tokenizer.chat_template
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    assert placeholder + QUESTION in text


def test_the_gemma_3_notebook_cells_after_get_chat_template(vision_dirs, tmp_path: Path) -> None:  # noqa: F811
    from trl import SFTTrainer

    from unsloth import FastVisionModel, get_chat_template
    from unsloth.trainer import UnslothVisionDataCollator

    model, processor = load(vision_dirs, "gemma3")
    processor = get_chat_template(processor, "gemma-3")
    FastVisionModel.for_inference(model)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    input_text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(square("gemma3", "red"), input_text, add_special_tokens=False, return_tensors="pt").to("cuda")
    result = model.generate(**inputs, max_new_tokens=4, use_cache=True, temperature=1.0, top_p=0.95, top_k=64)
    assert result.shape[1] > inputs["input_ids"].shape[1]

    FastVisionModel.for_training(model)
    trainer = SFTTrainer(
        model=model,
        train_dataset=[conversation("gemma3", colour) for colour in ("red", "blue")] * 2,
        processing_class=processor.tokenizer,
        data_collator=UnslothVisionDataCollator(model, processor),
        args=vision_config(tmp_path, max_steps=2),
    )
    stats = trainer.train()
    assert stats.global_step == 2


VISION_UPLOADS = r"""
import json, sys
sys.path.insert(0, {root!r})
from tools.kits.hub_stand_in import HubStandIn
hub = HubStandIn().__enter__()
import os
os.environ["HF_ENDPOINT"] = hub.endpoint
from unsloth import FastVisionModel
model, processor = FastVisionModel.from_pretrained({model!r})
model = FastVisionModel.get_peft_model(model, r=8, lora_alpha=16, random_state=0)
model.push_to_hub("me/vision-lora", processor, token="hf_StandInSecret0123456789")
model.push_to_hub_merged("me/vision-merged", processor, token="hf_StandInSecret0123456789")
try:
    model.push_to_hub_gguf("me/vision-gguf", processor, token="hf_StandInSecret0123456789")
    gguf = None
except NotImplementedError as error:
    gguf = str(error)
print(json.dumps({{"files": {{repo: sorted(files) for repo, files in hub.record.files.items()}}, "gguf": gguf}}))
"""


def test_vision_models_push_what_their_saves_write_gguf_with_its_mmproj_included(vision_dirs) -> None:  # noqa: F811
    import json
    import os
    import subprocess
    import sys

    from .conftest import NEUTRAL_CWD, REPO_ROOT

    # The upload goes to a local stand-in, so the suite's offline switches are lifted for this one process.
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
    environment = {key: value for key, value in os.environ.items() if key not in offline}
    code = VISION_UPLOADS.format(root=str(REPO_ROOT), model=str(vision_dirs["gemma3"]))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=environment, cwd=NEUTRAL_CWD
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"adapters.safetensors", "adapter_config.json", "tokenizer.json"} <= set(found["files"]["me/vision-lora"])
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(found["files"]["me/vision-merged"])
    assert found["gguf"] is None
    assert {"unsloth.Q8_0.gguf", "unsloth.F16-mmproj.gguf", "Modelfile"} <= set(found["files"]["me/vision-gguf"])


def test_gguf_of_a_family_without_a_projector_converter_is_refused_by_name(tmp_path) -> None:
    from tools.kits.tiny_vlm_model import BUILDERS
    from unsloth import FastVisionModel

    # Llama 3.2 Vision's cross-attention tower: llama.cpp has no mmproj converter for it.
    model, processor = FastVisionModel.from_pretrained(str(BUILDERS["mllama"](tmp_path / "mllama")))
    with pytest.raises(NotImplementedError) as error:
        model.save_pretrained_gguf(str(tmp_path / "gguf"), processor)
    assert "model_type 'mllama'" in str(error.value)
    assert "has no mmproj converter for it" in str(error.value)
    assert not (tmp_path / "gguf").exists() or not list((tmp_path / "gguf").iterdir())
