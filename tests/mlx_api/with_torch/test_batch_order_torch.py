"""Rule 3's batch order with torch installed: the rows each step trains on are CUDA Unsloth's, epoch by epoch.

Hugging Face's trainer (through accelerate's seedable sampler) draws epoch e's order as `torch.randperm(n)` from a
generator seeded with `seed + e`, and batches are consecutive slices of it; the test derives that order itself.
"""

from __future__ import annotations

import numpy as np

from unsloth import UnslothTrainer


class RecordingTrainer(UnslothTrainer):
    """Writes down the token rows of every micro-batch that reaches the forward pass."""

    def _build_step_functions(self) -> None:
        super()._build_step_functions()
        self.seen_batches = []
        forward_backward = self._forward_backward

        def recording(tokens, lengths):
            self.seen_batches.append(
                [np.array(tokens[row, : int(lengths[row])]).tolist() for row in range(tokens.shape[0])]
            )
            return forward_backward(tokens, lengths)

        self._forward_backward = recording


def test_batches_follow_torch_randperm_seeded_with_seed_plus_epoch(load_public, chat_rows, quiet_args) -> None:
    import torch

    model, tokenizer = load_public(lora=True)
    args = quiet_args(max_steps=None, num_train_epochs=2, seed=1234)
    trainer = RecordingTrainer(model, args, None, chat_rows, None, tokenizer)
    # The arguments name the order the rows are read in: left unset, CUDA Unsloth's (torch_randperm).
    assert trainer.cuda_batch_order is True and trainer.args.dataset_order == "torch_randperm"
    trainer.train()
    rows = [row.tolist() for row in trainer.train_rows.source_rows]
    expected = []
    for epoch in range(2):
        generator = torch.Generator()
        generator.manual_seed(1234 + epoch)
        order = torch.randperm(len(rows), generator=generator).tolist()
        expected += [[rows[index] for index in order[start : start + 2]] for start in range(0, len(rows), 2)]
    assert trainer.seen_batches == expected
    assert expected[:4] != [[rows[i] for i in range(start, start + 2)] for start in range(0, 8, 2)]  # really shuffled


def test_real_training_arguments_are_accepted_as_args(load_public, chat_rows, tmp_path) -> None:
    from transformers import TrainingArguments

    model, tokenizer = load_public()
    # As older notebooks pass them: transformers' own class, its __post_init__ filling accelerator_config and more.
    hf = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=2,
        learning_rate=1e-3,
        optim="adamw_8bit",
        save_strategy="no",
        report_to="none",
    )
    trainer = UnslothTrainer(model, hf, None, chat_rows, None, tokenizer)
    assert (trainer.args.max_steps, trainer.args.optim, trainer.args.learning_rate) == (2, "adamw", 1e-3)
    assert trainer.train().global_step == 2
