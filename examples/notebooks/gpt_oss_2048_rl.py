"""The gpt-oss (20B) "Reinforcement Learning 2048 Game" notebook's calls, in its order, on a tiny gpt-oss (mlx-lm's
`gpt_oss`, a short harmony-style template that reads `reasoning_effort`) under its Hub id: a 2048 game, the
sandbox helpers `execute_with_time_limit` / `check_python_modules` / `create_locked_down_function`, three reward
functions that run the model's strategy, and GRPO on prompts whose `reasoning_effort` column reaches the template.

Cell titles give the notebook's code-cell number. The game is written here with the notebook's interface; the
context is 512 tokens instead of 768, training two steps and each `model.generate` 64 tokens.
"""

# %% [0] setup in place of the install cell
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _families import prepare  # noqa: E402

DATA = prepare({"unsloth/gpt-oss-20b": ("gpt_oss", "gpt_oss")})
STEPS = 2

# %% [1] load the MXFP4 id in 4 bits, embedding offload asked for
from unsloth import FastLanguageModel  # noqa: E402
import torch  # noqa: E402, F401

max_seq_length = 512
lora_rank = 4
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name="unsloth/gpt-oss-20b",
    max_seq_length=max_seq_length,
    load_in_4bit=True,
    offload_embedding=True,
)

# %% [2] LoRA on attention and the experts' projections
model = FastLanguageModel.get_peft_model(
    model,
    r=lora_rank,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    lora_alpha=lora_rank * 2,
    use_gradient_checkpointing="unsloth",
    random_state=3407,
)

# %% [3] the 2048 game (same interface as the notebook's: WASD moves, a state, a board view that prints)
import random  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import List, Optional  # noqa: E402


def _slide_row(row: List[int]):
    """Slide one row left, merging equal neighbours once; returns (row, points gained)."""
    tiles = [value for value in row if value]
    out, gained, index = [], 0, 0
    while index < len(tiles):
        if index + 1 < len(tiles) and tiles[index] == tiles[index + 1]:
            out.append(2 * tiles[index])
            gained += 2 * tiles[index]
            index += 2
        else:
            out.append(tiles[index])
            index += 1
    return out + [0] * (len(row) - len(out)), gained


def _slide(board: List[List[int]], key: str):
    """The board after a move: turn it so the move is a left slide, slide, turn back."""
    columns = key in "ws"
    reverse = key in "ds"
    grid = [list(line) for line in zip(*board)] if columns else [list(line) for line in board]
    moved, gained = [], 0
    for line in grid:
        line = line[::-1] if reverse else line
        slid, points = _slide_row(line)
        moved.append(slid[::-1] if reverse else slid)
        gained += points
    result = [list(line) for line in zip(*moved)] if columns else moved
    return result, gained, result != board


@dataclass
class GameBoard:
    size: int
    seed: Optional[int] = None
    target: int = 2048
    probability_fours: float = 0.10
    _rng: random.Random = field(init=False, repr=False)
    _grid: List[List[int]] = field(init=False, repr=False)
    _score: int = field(default=0, init=False, repr=False)
    _state: str = field(default="ongoing", init=False, repr=False)

    def __post_init__(self):
        if self.size < 2:
            raise ValueError("a 2048 board needs a size of at least 2")
        self._rng = random.Random(self.seed)
        self._grid = [[0] * self.size for _ in range(self.size)]
        self._spawn()
        self._spawn()
        self._settle()

    class _View:
        def __init__(self, game):
            self._game = game

        def __iter__(self):
            return iter(self._game._grid)

        def __len__(self):
            return self._game.size

        def __getitem__(self, index):
            return self._game._grid[index]

        def __repr__(self):
            return repr(self._game._grid)

        def do_action(self, key):
            self._game.do_action(key)

        def state(self):
            return self._game.state()

        def pretty(self, colors=True, border=True, dot_for_zero=True):
            return self._game.pretty(colors=colors, border=border, dot_for_zero=dot_for_zero)

    def board(self):
        return GameBoard._View(self)

    def state(self):
        return self._state

    def score(self):
        return self._score

    def do_action(self, key):
        if self._state != "ongoing":
            return
        key = key.strip().lower() if isinstance(key, str) else ""
        if key not in ("w", "a", "s", "d"):
            self._state = "failed"  # anything but one WASD letter ends the game
            return
        grid, gained, changed = _slide(self._grid, key)
        if changed:
            self._grid, self._score = grid, self._score + gained
            self._spawn()
        self._settle()

    def _spawn(self):
        empty = [(r, c) for r in range(self.size) for c in range(self.size) if not self._grid[r][c]]
        if empty:
            r, c = self._rng.choice(empty)
            self._grid[r][c] = 4 if self._rng.random() < self.probability_fours else 2

    def _settle(self):
        if any(self.target in row for row in self._grid):
            self._state = "success"
        elif not any(_slide(self._grid, key)[2] for key in "wasd"):
            self._state = "failed"
        else:
            self._state = "ongoing"

    def pretty(self, colors=True, border=True, dot_for_zero=True):
        width = max(3, len(str(max(max(row) for row in self._grid))))
        shades = [244, 39, 45, 82, 154, 226, 214, 208, 202, 196]

        def cell(value):
            text = ("." if value == 0 and dot_for_zero else str(value)).rjust(width)
            if not colors:
                return text
            shade = shades[min(len(shades) - 1, value.bit_length() - 1 if value else 0)]
            return f"\x1b[38;5;{shade}m{text}\x1b[0m"

        lines = [("|" if border else "").join([""] + [cell(v) for v in row] + [""]) for row in self._grid]
        if border:
            rule = "+" + "+".join("-" * width for _ in range(self.size)) + "+"
            lines = [rule] + lines + [rule]
        return "\n".join(lines)


# %% [4] a 5x5 game aiming for 8
game = GameBoard(size=5, seed=42, target=8, probability_fours=0.10)
print(game.board().pretty(), game.state())

# %% [5] the game object itself
game  # noqa: B018  (a notebook cell shows its last value)

# %% [6] move left
game.do_action("A")
print(game.board().pretty(), game.state())

# %% [7] move up
game.do_action("W")
print(game.board().pretty(), game.state())

# %% [8] move right
game.do_action("D")
print(game.board().pretty(), game.state())

# %% [9] up again
game.do_action("W")
print(game.board().pretty(), game.state())

# %% [10] right again
game.do_action("D")
print(game.board().pretty(), game.state())

# %% [11] a key that is not one WASD letter fails the game
game = GameBoard(size=3, seed=42, target=8, probability_fours=0.10)
game.do_action("AA")
game.do_action("W")
game.do_action("A")
print(game.board().pretty(), game.state())

# %% [12] play a strategy to the end, under a two-second limit
from typing import Callable  # noqa: E402
from unsloth import execute_with_time_limit  # noqa: E402


def _execute_strategy(strategy: Callable, game: GameBoard):
    assert callable(strategy)
    steps = 0
    while game.state() == "ongoing":
        action = strategy(list(game.board()))
        steps += 1
        if type(action) is not str:
            return steps, "failed"
        game.do_action(action)
    return steps, game.state()


@execute_with_time_limit(2)
def execute_strategy(strategy: Callable, game: GameBoard):
    return _execute_strategy(strategy, game)


# %% [13] always "up" never ends the game on a big board: the limit stops it
def always_move_left(board):
    return "W"


game = GameBoard(size=8, seed=42, target=2048, probability_fours=0.10)
try:
    execute_strategy(always_move_left, game)
except TimeoutError as e:
    print(f"Timed out with error = {str(e)}")


# %% [14] five seconds for training
@execute_with_time_limit(5)
def execute_strategy(strategy: Callable, game: GameBoard):
    return _execute_strategy(strategy, game)


# %% [15] standard-library imports pass the module check
from unsloth import check_python_modules  # noqa: E402

sample = """
def strategy(board):
    import math
    from typing import Callable
    return "W"
"""
ok, info = check_python_modules(sample)
print("Only Python imports?", ok)
print(info)

# %% [16] a third-party import does not
sample = """
def strategy(board):
    from numpy import matmul
    return "W"
"""
ok, info = check_python_modules(sample)
print("Only Python imports?", ok)
print(info)

# %% [17] a locked-down function cannot reach the notebook's globals
from unsloth import create_locked_down_function  # noqa: E402

function = """
def import_numpy():
    np.matmul
    print("Success")
"""
f = create_locked_down_function(function)
try:
    f()
except Exception as e:
    print(str(e))

# %% [18] but its own nested functions work
from unsloth import create_locked_down_function  # noqa: E402

function = """
def add(a, b):
    def adder(a):
        return a + b
    return adder(b) + b
"""
f = create_locked_down_function(function)
try:
    print(f(10, 20))
except Exception as e:
    print(str(e))

# %% [19] the prompt asking for a strategy function
prompt = """
Write a short 2048 strategy in plain Python.
The board is a list of lists of numbers.
Return one of "W", "A", "S", "D" for the best next move.
Answer with the function in backticks, like this:
```python
def strategy(board):
    return "W"
```
Put every helper inside def strategy.
""".strip()
print(prompt)

# %% [20] generate with low reasoning effort
text = tokenizer.apply_chat_template(
    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True, reasoning_effort="low"
)

from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=1.0,
    max_new_tokens=64,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
)


# %% [21] pull the function out of a reply
def extract_function(text):
    if text.count("```") < 2:
        return None
    start = text.find("```") + 3
    body = text[start : text.find("```", start)].strip().removeprefix("python\n")
    body = body[body.find("def") :]
    return body if body.startswith("def strategy(board):") else None


print(extract_function(prompt))

# %% [22] code that does not parse
ok, info = check_python_modules("def a")
ok, info  # noqa: B018  (a notebook cell shows its last value)


# %% [23] reward: a function that passes the checks and can be built
def function_works(completions, **kwargs):
    scores = []
    for completion in completions:
        function = extract_function(completion[0]["content"])
        info = check_python_modules(function)[1] if function is not None else {}
        if function is None or "error" in info:
            scores.append(-2.0)
            continue
        try:
            create_locked_down_function(function)
            scores.append(1.0)
        except Exception:
            scores.append(-0.5)
    return scores


# %% [24] reward: no imports beyond the standard library
def no_cheating(completions, **kwargs):
    scores = []
    for completion in completions:
        function = extract_function(completion[0]["content"])
        if function is None:
            scores.append(-1.0)
        else:
            scores.append(1.0 if check_python_modules(function)[0] else -20.0)
    return scores


# %% [25] reward: the strategy plays a game on a seeded board
import numpy as np  # noqa: E402

PRINTER = 0


def strategy_succeeds(completions, **kwargs):
    global PRINTER
    scores = []
    seed = np.random.randint(10000)
    for completion in completions:
        function = extract_function(completion[0]["content"])
        if PRINTER % 5 == 0:
            print(function)
        PRINTER += 1
        info = check_python_modules(function)[1] if function is not None else {}
        if function is None or "error" in info:
            scores.append(0)
            continue
        try:
            new_strategy = create_locked_down_function(function)
        except Exception:
            scores.append(0)
            continue
        try:
            game = GameBoard(size=6, seed=seed, target=2048, probability_fours=0.10)
            steps, game_state = execute_strategy(new_strategy, game)
            print(f"Steps = {steps} State = {game_state}")
            print(game.board().pretty())
            scores.append(20.0 if game_state == "success" else 2.0)
        except TimeoutError:
            print("Timeout")
            scores.append(-1.0)
        except Exception as e:
            print(f"Exception = {str(e)}")
            scores.append(-3.0)
    return scores


# %% [26] one prompt repeated, each row asking for low reasoning effort
from datasets import Dataset  # noqa: E402

dataset = Dataset.from_list(
    [{"prompt": [{"role": "user", "content": prompt.strip()}], "answer": 0, "reasoning_effort": "low"}] * 1000
)
maximum_length = len(
    tokenizer.apply_chat_template([{"role": "user", "content": prompt.strip()}], add_generation_prompt=True)
)
print(maximum_length)
dataset[0]

# %% [27] the GRPO config
max_prompt_length = maximum_length + 1
max_completion_length = max_seq_length - max_prompt_length

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

training_args = GRPOConfig(
    temperature=1.0,
    learning_rate=5e-5,
    weight_decay=0.001,
    warmup_ratio=0.1,
    lr_scheduler_type="linear",
    optim="adamw_8bit",
    logging_steps=1,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=1,
    num_generations=2,
    max_prompt_length=max_prompt_length,
    max_completion_length=max_completion_length,
    max_steps=STEPS,
    save_steps=100,
    report_to="none",
    output_dir="outputs",
)

# %% [28] GRPO with the three rewards
trainer = GRPOTrainer(
    model=model,
    processing_class=tokenizer,
    reward_funcs=[function_works, no_cheating, strategy_succeeds],
    args=training_args,
    train_dataset=dataset,
)

# %% [29] train
trainer.train()

# %% [30] generate after training
text = tokenizer.apply_chat_template(
    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True, reasoning_effort="low"
)

from transformers import TextStreamer  # noqa: E402

_ = model.generate(
    **tokenizer(text, return_tensors="pt").to("cuda"),
    temperature=1.0,
    max_new_tokens=64,
    streamer=TextStreamer(tokenizer, skip_prompt=False),
)

# %% [31] merged saves, off as published
if False:
    model.save_pretrained_merged("finetuned_model", tokenizer, save_method="mxfp4")
if False:
    model.save_pretrained_merged("finetuned_model", tokenizer, save_method="merged_16bit")
