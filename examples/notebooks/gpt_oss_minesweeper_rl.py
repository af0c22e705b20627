"""The gpt-oss (20B) "Reinforcement Learning GRPO Minesweeper Game BF16" notebook's calls, in its order, on a tiny
gpt-oss (mlx-lm's `gpt_oss`, a short harmony-style template) under its Hub id: a Minesweeper game, JSON-action
prompts, two reward functions that replay each row's game from its seed, GRPO with a `TrainerCallback` that plays
games with `model.generate` between steps, then evaluation games and a LoRA save.

Cell titles give the notebook's code-cell number. The game is written here with the notebook's interface. Cut to
fit a test: 16 game states instead of 1000, two training steps, the callback every step (not every 50) over one
game, 5 evaluation games instead of 100, and 64 new tokens per reply instead of 128. On mlx's CPU backend (this
project's CI) the experts' `gather_mm` runs in float32 only, so there the load asks for float32 instead of
`torch.bfloat16`; with Metal it asks for bfloat16 as published.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/gpt-oss-20b-BF16": ("gpt_oss", "gpt_oss")})
STEPS = 2
NEW_TOKENS = 64
import mlx.core as mx  # noqa: E402

BF16_EXPERTS = mx.metal.is_available()

# %% [1] load the BF16 id in 16 bits
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402

max_seq_length = 1024
lora_rank = 16

model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/gpt-oss-20b-BF16",
    load_in_4bit=False,
    max_seq_length=max_seq_length,
    torch_dtype=torch.bfloat16 if BF16_EXPERTS else torch.float32,
)
print(f"Model device: {model.device}")

# %% [2] LoRA on attention and the experts' projections
model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=lora_rank * 2,
    use_gradient_checkpointing="unsloth",
    random_state=3407,
)

# %% [3] the Minesweeper game (the notebook's interface: reveal / flag actions as dicts, a visible board, a state)
import random  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import List, Optional, Set, Tuple  # noqa: E402


@dataclass
class MinesweeperGame:
    rows: int
    cols: int
    num_mines: int
    seed: Optional[int] = None
    _board: List[List[int]] = field(init=False, repr=False)  # -1 marks a mine, else the count of mines around
    _revealed: Set[Tuple[int, int]] = field(init=False, repr=False, default_factory=set)
    _flagged: Set[Tuple[int, int]] = field(init=False, repr=False, default_factory=set)
    _state: str = field(default="ongoing", init=False, repr=False)

    def __post_init__(self):
        if self.num_mines >= self.rows * self.cols:
            raise ValueError("more mines than the board can hold")
        cells = [(r, c) for r in range(self.rows) for c in range(self.cols)]
        mines = set(random.Random(self.seed).sample(cells, self.num_mines))
        self._board = [
            [-1 if (r, c) in mines else sum(n in mines for n in self._around(r, c)) for c in range(self.cols)]
            for r in range(self.rows)
        ]

    def _around(self, row, col):
        return [
            (r, c)
            for r in range(row - 1, row + 2)
            for c in range(col - 1, col + 2)
            if (r, c) != (row, col) and 0 <= r < self.rows and 0 <= c < self.cols
        ]

    def _open(self, row, col):
        """Reveal a cell, and every cell around a zero, breadth first."""
        waiting = [(row, col)]
        while waiting:
            cell = waiting.pop()
            if cell in self._revealed or cell in self._flagged:
                continue
            self._revealed.add(cell)
            if self._board[cell[0]][cell[1]] == 0:
                waiting.extend(self._around(*cell))

    def do_action(self, action: dict) -> str:
        if self._state != "ongoing":
            return "game_over"
        try:
            kind, row, col = action["type"], int(action["row"]), int(action["col"])
        except (KeyError, TypeError, ValueError):
            return "invalid_format"
        if kind not in ("reveal", "flag"):
            return "invalid_format"
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            return "out_of_bounds"
        cell = (row, col)
        if kind == "flag":
            if cell in self._revealed:
                return "invalid_flag"
            self._flagged ^= {cell}
            return "ok"
        if cell in self._revealed:
            return "already_revealed"
        if cell in self._flagged:
            return "flagged_cell"
        if self._board[row][col] == -1:
            self._revealed.add(cell)
            self._state = "failed"
            return "mine"
        self._open(row, col)
        if len(self._revealed) == self.rows * self.cols - self.num_mines:
            self._state = "success"
            return "win"
        return "ok"

    def get_visible_board(self) -> List[List[str]]:
        def shown(r, c):
            if (r, c) in self._flagged:
                return "F"
            if (r, c) in self._revealed:
                return "*" if self._board[r][c] == -1 else str(self._board[r][c])
            return "."

        return [[shown(r, c) for c in range(self.cols)] for r in range(self.rows)]

    def state(self) -> str:
        return self._state

    def pretty_print(self) -> str:
        lines = ["    " + " ".join(f"{c:2d}" for c in range(self.cols))]
        lines += [f"{r:2d} | " + "  ".join(row) for r, row in enumerate(self.get_visible_board())]
        return "\n".join(lines)


# %% [4] a game, and one reveal
game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=42)
print(game.pretty_print())
print(f"State: {game.state()}")
game.do_action({"type": "reveal", "row": 0, "col": 0})
print("\nAfter revealing (0,0):")
print(game.pretty_print())
print(f"State: {game.state()}")

# %% [5] the game state as a JSON prompt, and the reply's last JSON action
import json  # noqa: E402
import re  # noqa: E402


def format_state_for_llm(game: MinesweeperGame) -> str:
    state = {
        "board": game.get_visible_board(),
        "rows": game.rows,
        "cols": game.cols,
        "mines": game.num_mines,
        "flags_placed": len(game._flagged),
        "cells_revealed": len(game._revealed),
    }
    return (
        "You are playing Minesweeper. Read the state and give your next move.\n\n"
        f"State:\n{json.dumps(state, indent=2)}\n\n"
        '"." is hidden, "F" flagged, "0"-"8" the mines around a cell, "*" a revealed mine.\n'
        'Answer with JSON: {"type": "reveal", "row": R, "col": C} or {"type": "flag", "row": R, "col": C}\n'
        "Your action:"
    )


def parse_llm_action(response: str):
    best = None
    for match in re.finditer(r"\{[^{}]*\}", response):
        try:
            action = json.loads(match.group())
        except json.JSONDecodeError:
            continue
        if isinstance(action, dict) and {"type", "row", "col"} <= action.keys():
            if action["type"] in ("reveal", "flag"):
                best = action
    return best


game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=42)
prompt = format_state_for_llm(game)
print(prompt[:500] + "...")

# %% [6] the base model's move
from transformers import TextStreamer  # noqa: E402

game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=42)
prompt = format_state_for_llm(game)
text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
print("=== Base Model Response ===")
output = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=1.0,
    max_new_tokens=NEW_TOKENS,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)

# %% [7] rewards: a parsable action, and the move's worth on the row's replayed game
import numpy as np  # noqa: E402


def _is_logically_safe(game, row, col):
    """A neighbouring revealed number already has all its mines flagged, so this cell cannot be one."""
    for r, c in game._around(row, col):
        number = game._board[r][c]
        if (r, c) in game._revealed and number > 0:
            if sum(cell in game._flagged for cell in game._around(r, c)) == number:
                return True
    return False


def valid_json_reward(completions, **kwargs):
    return [-5.0 if parse_llm_action(c[0]["content"]) is None else 1.0 for c in completions]


def gameplay_reward(completions, **kwargs):
    seeds, histories = kwargs.get("seed", []), kwargs.get("move_history", [])
    scores = []
    for index, completion in enumerate(completions):
        action = parse_llm_action(completion[0]["content"])
        if action is None:
            scores.append(-10.0)
            continue
        game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=seeds[index])
        for previous in json.loads(histories[index]):
            game.do_action(previous)
        row, col = action["row"], action["col"]
        if not (isinstance(row, int) and isinstance(col, int) and 0 <= row < 6 and 0 <= col < 6):
            scores.append(-15.0)
            continue
        mine = game._board[row][col] == -1
        if action["type"] == "flag":
            if (row, col) in game._revealed:
                scores.append(-12.0)
            elif (row, col) in game._flagged:
                scores.append(-8.0)
            elif len(game._flagged) >= game.num_mines:
                scores.append(-10.0)
            else:
                scores.append(15.0 if mine else -10.0)
            continue
        if (row, col) in game._revealed:
            scores.append(-12.0)
        elif (row, col) in game._flagged:
            scores.append(-8.0)
        elif mine:
            scores.append(-25.0)
        else:
            safe_by_logic = _is_logically_safe(game, row, col)
            won = game.do_action(action) == "win"
            scores.append((15.0 if safe_by_logic else 10.0) + (100.0 if won else 0.0))
    return scores


print("Rewards: +100 win, +15 mine flagged or deduced reveal, +10 safe reveal, -25 mine revealed")

# %% [8] game states after a few random reveals, each row keeping its seed and moves
from datasets import Dataset  # noqa: E402


def generate_game_states(num_samples=1000, rows=6, cols=6, num_mines=5, rng_seed=42):
    np.random.seed(rng_seed)
    random.seed(rng_seed)
    items = []
    for _ in range(3 * num_samples):
        if len(items) == num_samples:
            break
        seed = int(np.random.randint(100000))
        game = MinesweeperGame(rows=rows, cols=cols, num_mines=num_mines, seed=seed)
        history = []
        for _ in range(np.random.randint(0, 6)):
            hidden = [(r, c) for r, line in enumerate(game.get_visible_board()) for c, v in enumerate(line) if v == "."]
            if not hidden or game.state() != "ongoing":
                break
            r, c = random.choice(hidden)
            history.append({"type": "reveal", "row": r, "col": c})
            game.do_action(history[-1])
        if game.state() == "ongoing":
            items.append(
                {
                    "prompt": [{"role": "user", "content": format_state_for_llm(game)}],
                    "seed": seed,
                    "move_history": json.dumps(history),
                }
            )
    return Dataset.from_list(items)


dataset = generate_game_states(num_samples=16, rows=6, cols=6, num_mines=5)
fresh = sum(1 for item in dataset if item["move_history"] == "[]")
print(f"{len(dataset)} states, {fresh} fresh")
print(dataset[0]["prompt"][0]["content"][:400] + "...")

# %% [9] the GRPO config
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

max_prompt_length = 600
max_completion_length = max_seq_length - max_prompt_length

training_args = GRPOConfig(
    temperature=1.0,
    learning_rate=5e-5,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="linear",
    optim="adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=4,
    num_generations=4,
    max_prompt_length=max_prompt_length,
    max_completion_length=max_completion_length,
    max_steps=STEPS,
    save_steps=100,
    report_to="none",
    output_dir="minesweeper_custom_outputs",
)
print(f"  Max steps: {training_args.max_steps}, generations per state: {training_args.num_generations}")

# %% [10] a callback that plays games with the model between steps
from transformers import TrainerCallback  # noqa: E402


class MinesweeperEvalCallback(TrainerCallback):
    def __init__(self, eval_every_steps=50, num_games=5):
        self.eval_every_steps = eval_every_steps
        self.num_games = num_games

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.eval_every_steps != 0:
            return
        tokenizer = processing_class
        if tokenizer is None or model is None:
            return
        was_training = model.training
        model.eval()
        wins = 0
        for i in range(self.num_games):
            game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=10000 + i)
            moves = 0
            while game.state() == "ongoing" and moves < 50:
                text = tokenizer.apply_chat_template(
                    [{"role": "user", "content": format_state_for_llm(game)}],
                    tokenize=False,
                    add_generation_prompt=True,
                )
                output = model.generate(
                    **tokenizer(text, return_tensors="pt").to(model.device),
                    temperature=0.7,
                    max_new_tokens=NEW_TOKENS,
                    do_sample=True,
                )
                action = parse_llm_action(tokenizer.decode(output[0], skip_special_tokens=True))
                if action is None:
                    break
                game.do_action(action)
                moves += 1
            wins += game.state() == "success"
        print(f"\n[Eval @ step {state.global_step}] Win rate: {wins}/{self.num_games}\n")
        if was_training:
            model.train()


eval_callback = MinesweeperEvalCallback(eval_every_steps=1, num_games=1)

# %% [11] GRPO with both rewards and the callback
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[valid_json_reward, gameplay_reward],
    args=training_args,
    train_dataset=dataset,
    callbacks=[eval_callback],
)
trainer.train()

# %% [12] the trained model on a new game
test_game = MinesweeperGame(rows=6, cols=6, num_mines=5, seed=999)
test_text = tokenizer.apply_chat_template(
    [{"role": "user", "content": format_state_for_llm(test_game)}], tokenize=False, add_generation_prompt=True
)
print("=== Trained Model Response ===")
output = model.generate(
    **tokenizer(test_text, return_tensors="pt").to("cuda"),
    temperature=0.7,
    max_new_tokens=NEW_TOKENS,
    streamer=TextStreamer(tokenizer, skip_prompt=True),
)
action = parse_llm_action(tokenizer.decode(output[0]))
print(f"\nParsed action: {action}")
if action:
    test_game.do_action(action)
    print(test_game.pretty_print())


# %% [13] whole games played by the model
def play_full_game(model, tokenizer, rows=6, cols=6, num_mines=5, seed=None, max_moves=50):
    game = MinesweeperGame(rows=rows, cols=cols, num_mines=num_mines, seed=seed)
    moves = 0
    while game.state() == "ongoing" and moves < max_moves:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": format_state_for_llm(game)}], tokenize=False, add_generation_prompt=True
        )
        output = model.generate(
            **tokenizer(text, return_tensors="pt").to("cuda"),
            temperature=0.7,
            max_new_tokens=NEW_TOKENS,
            do_sample=True,
        )
        action = parse_llm_action(tokenizer.decode(output[0]))
        if action is None:
            break
        game.do_action(action)
        moves += 1
    return game, moves


NUM_EVAL_GAMES = 5
wins = total_moves = 0
for i in range(NUM_EVAL_GAMES):
    game, moves = play_full_game(model, tokenizer, seed=i)
    wins += game.state() == "success"
    total_moves += moves
    print(f"Game {i + 1}: {game.state()} after {moves} moves")
print(f"Win rate: {wins}/{NUM_EVAL_GAMES}, average moves {total_moves / NUM_EVAL_GAMES:.1f}")

# %% [14] save the LoRA adapter; merged saves off as published
model.save_pretrained("gpt_oss_lora")
tokenizer.save_pretrained("gpt_oss_lora")
if False:
    model.save_pretrained_merged("gpt_oss_finetune_16bit", tokenizer, save_method="merged_16bit")
