"""Deterministic chat-style training rows built from the shared corpus.

`build_sft_rows(n)` gives SFT rows (`messages` and rendered `text`); `build_preference_rows`,
`build_unpaired_rows` and `build_stepwise_rows` give rows shaped for preference, unpaired-label and
step-labelled trainers. The same `n` and `seed` always give the same rows, and the first `k` rows of a
longer build equal a build of `k`.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import datasets

CORPUS_DIR = Path(__file__).resolve().parents[2] / "shared" / "corpus"
QA_FILE_NAME = "questions_and_answers.txt"
DEFAULT_SEED = 3407

SYSTEM_PART = "<|system|>\n"
INSTRUCTION_PART = "<|user|>\n"
RESPONSE_PART = "<|assistant|>\n"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"

# Written as one line with quoted "\n" literals so the trim_blocks/lstrip_blocks options transformers uses change nothing.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ '<|eos|>' }}{% else %}{{ '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a friendly assistant who answers clearly and briefly.",
    "You are a patient teacher. Explain things simply and accurately.",
    "You are a knowledgeable guide. Give practical, concrete advice.",
    "You answer questions about cooking, gardening, astronomy, physics and travel.",
    "Be concise. Answer in plain English without unnecessary detail.",
)
QUESTION_LEAD_INS = (
    "",
    "",
    "",
    "Quick question. ",
    "Could you help me with something? ",
    "My friend asked me this and I did not know the answer. ",
    "I have always wondered about this. ",
    "Please answer briefly. ",
)
UNHELPFUL_REPLY = "I am not sure about that. You could try looking it up."
FOLLOW_UP_LEAD_INS = ("A related point: ", "It may also help to know this. ", "One more thing worth knowing: ")

T = TypeVar("T")


@dataclass(frozen=True)
class QuestionAnswer:
    topic: str
    question: str
    answer: str


@dataclass(frozen=True)
class Corpus:
    """The corpus split into topics, paragraphs of sentences, and question-answer pairs."""

    topics: tuple[str, ...]
    paragraphs: dict[str, tuple[tuple[str, ...], ...]]
    pairs: tuple[QuestionAnswer, ...]
    pairs_by_topic: dict[str, tuple[QuestionAnswer, ...]]


@dataclass(frozen=True)
class Exchange:
    system: str
    user: str
    assistant: str


# ---- parsing (pure) ----

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def split_sentences(paragraph: str) -> list[str]:
    """Split prose into sentences at end punctuation followed by a capital letter."""
    return [sentence for sentence in _SENTENCE_BREAK.split(" ".join(paragraph.split())) if sentence]


def parse_prose(text: str) -> tuple[tuple[str, ...], ...]:
    """Paragraphs (separated by blank lines) as tuples of sentences."""
    blocks = (block.strip() for block in re.split(r"\n\s*\n", text))
    return tuple(tuple(split_sentences(block)) for block in blocks if block)


def parse_question_answers(text: str) -> tuple[QuestionAnswer, ...]:
    """Read `## topic` headings followed by `Q:` and `A:` lines; topics are named like the prose files' stems."""
    pairs: list[QuestionAnswer] = []
    topic = "general"
    question: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("## "):
            topic = line[3:].strip().replace(" ", "_")
        elif line.startswith("Q: "):
            question = line[3:].strip()
        elif line.startswith("A: ") and question is not None:
            pairs.append(QuestionAnswer(topic, question, line[3:].strip()))
            question = None
    return tuple(pairs)


def assemble_corpus(prose_by_topic: dict[str, str], question_answer_text: str) -> Corpus:
    """Build the parsed corpus from raw texts keyed by topic."""
    topics = tuple(sorted(prose_by_topic))
    paragraphs = {topic: parse_prose(prose_by_topic[topic]) for topic in topics}
    pairs = parse_question_answers(question_answer_text)
    pairs_by_topic = {topic: tuple(pair for pair in pairs if pair.topic == topic) for topic in topics}
    return Corpus(topics, paragraphs, pairs, pairs_by_topic)


# ---- reading the corpus (I/O) ----


@functools.lru_cache(maxsize=4)
def load_corpus(corpus_dir: Path = CORPUS_DIR) -> Corpus:
    """Read every topic file of the corpus folder once per process."""
    prose_by_topic = {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted(corpus_dir.glob("*.txt"))
        if path.name != QA_FILE_NAME
    }
    question_answer_text = (corpus_dir / QA_FILE_NAME).read_text(encoding="utf-8")
    return assemble_corpus(prose_by_topic, question_answer_text)


# ---- rendering (pure) ----


def render_chat(messages: Sequence[dict[str, str]]) -> str:
    """Render messages the way CHAT_TEMPLATE does: each turn after its role marker, assistant turns end with EOS."""
    parts = []
    for message in messages:
        ending = EOS_TOKEN if message["role"] == "assistant" else "\n"
        parts.append(f"<|{message['role']}|>\n{message['content']}{ending}")
    return "".join(parts)


def exchange_messages(exchange: Exchange) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": exchange.system},
        {"role": "user", "content": exchange.user},
        {"role": "assistant", "content": exchange.assistant},
    ]


def sft_row(exchange: Exchange) -> dict[str, Any]:
    messages = exchange_messages(exchange)
    return {"messages": messages, "text": render_chat(messages)}


# ---- choosing (pure given the generator) ----


def pick(rng: random.Random, items: Sequence[T]) -> T:
    """Choose an item using only `rng.random()`, whose sequence is stable across Python versions."""
    return items[int(rng.random() * len(items))]


def pick_between(rng: random.Random, low: int, high: int) -> int:
    """An integer from low to high inclusive, again using only `rng.random()`."""
    return low + int(rng.random() * (high - low + 1))


def topic_words(topic: str) -> str:
    return topic.replace("_", " ")


def pick_paragraph(rng: random.Random, corpus: Corpus, topic: str) -> tuple[str, ...]:
    return pick(rng, corpus.paragraphs[topic])


def pick_sentence(rng: random.Random, corpus: Corpus, topic: str) -> str:
    return pick(rng, pick_paragraph(rng, corpus, topic))


def ask_question(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    pair = pick(rng, corpus.pairs)
    answer = pair.answer
    if rng.random() < 0.3 and pair.topic in corpus.paragraphs:
        answer = f"{answer} {pick(rng, FOLLOW_UP_LEAD_INS)}{pick_sentence(rng, corpus, pair.topic)}"
    return pick(rng, QUESTION_LEAD_INS) + pair.question, answer


def ask_two_questions(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    first, second = pick(rng, corpus.pairs), pick(rng, corpus.pairs)
    return f"I have two questions. {first.question} And also: {second.question}", f"{first.answer}\n\n{second.answer}"


def ask_for_paragraph(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    topic = pick(rng, corpus.topics)
    return f"Write a short paragraph about {topic_words(topic)}.", " ".join(pick_paragraph(rng, corpus, topic))


def ask_to_continue(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    topic = pick(rng, corpus.topics)
    paragraph = pick_paragraph(rng, corpus, topic)
    if len(paragraph) < 2:
        return f"Say something about {topic_words(topic)}.", " ".join(paragraph)
    cut = pick_between(rng, 1, len(paragraph) - 1)
    opening, rest = " ".join(paragraph[:cut]), " ".join(paragraph[cut:])
    return f"Continue this passage about {topic_words(topic)}:\n\n{opening}", rest


def ask_for_main_point(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    paragraph = pick_paragraph(rng, corpus, pick(rng, corpus.topics))
    return f"What is the main point of this paragraph?\n\n{' '.join(paragraph)}", paragraph[0]


def ask_for_facts(rng: random.Random, corpus: Corpus) -> tuple[str, str]:
    topic = pick(rng, corpus.topics)
    count = pick_between(rng, 2, 5)
    facts = [pick_sentence(rng, corpus, topic) for _ in range(count)]
    listing = "\n".join(f"{number}. {fact}" for number, fact in enumerate(facts, start=1))
    return f"Give me {count} facts about {topic_words(topic)}.", listing


# Weights favour plain questions, as real chat sets do, while long prompts keep token lengths varied.
REQUEST_KINDS = (
    (ask_question, 40),
    (ask_two_questions, 10),
    (ask_for_paragraph, 15),
    (ask_to_continue, 15),
    (ask_for_main_point, 10),
    (ask_for_facts, 10),
)
_WEIGHTED_KINDS = tuple(kind for kind, weight in REQUEST_KINDS for _ in range(weight))


def make_exchange(rng: random.Random, corpus: Corpus) -> Exchange:
    system = pick(rng, SYSTEM_PROMPTS)
    user, assistant = pick(rng, _WEIGHTED_KINDS)(rng, corpus)
    return Exchange(system, user, assistant)


def make_exchanges(n_rows: int, seed: int, corpus: Corpus) -> list[Exchange]:
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    rng = random.Random(seed)
    return [make_exchange(rng, corpus) for _ in range(n_rows)]


def make_preference_row(rng: random.Random, corpus: Corpus) -> dict[str, str]:
    wanted, other = make_exchange(rng, corpus), make_exchange(rng, corpus)
    rejected = other.assistant if other.assistant != wanted.assistant else UNHELPFUL_REPLY
    return {"prompt": wanted.user, "chosen": wanted.assistant, "rejected": rejected}


def make_unpaired_row(rng: random.Random, corpus: Corpus) -> dict[str, Any]:
    wanted, other = make_exchange(rng, corpus), make_exchange(rng, corpus)
    desirable = rng.random() < 0.5 or other.assistant == wanted.assistant
    completion = wanted.assistant if desirable else other.assistant
    return {"prompt": wanted.user, "completion": completion, "label": desirable}


def make_stepwise_row(rng: random.Random, corpus: Corpus) -> dict[str, Any]:
    pair = pick(rng, corpus.pairs)
    other_topics = [topic for topic in corpus.topics if topic != pair.topic] or list(corpus.topics)
    completions: list[str] = []
    labels: list[bool] = []
    for step in split_sentences(pair.answer):
        if rng.random() < 0.25:
            completions.append(pick_sentence(rng, corpus, pick(rng, other_topics)))
            labels.append(False)
        else:
            completions.append(step)
            labels.append(True)
    return {"prompt": pair.question, "completions": completions, "labels": labels}


# ---- public builders ----


def build_sft_rows(n_rows: int, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Chat rows with `messages` (system, user, assistant) and their rendered `text`."""
    return [sft_row(exchange) for exchange in make_exchanges(n_rows, seed, load_corpus())]


def build_sft_dataset(n_rows: int, *, seed: int = DEFAULT_SEED) -> datasets.Dataset:
    """The rows of `build_sft_rows` as a `datasets.Dataset` with columns `messages` and `text`."""
    import datasets

    rows = build_sft_rows(n_rows, seed=seed)
    return datasets.Dataset.from_dict(
        {"messages": [row["messages"] for row in rows], "text": [row["text"] for row in rows]}
    )


def build_preference_rows(n_rows: int, *, seed: int = DEFAULT_SEED) -> list[dict[str, str]]:
    """Rows with `prompt`, `chosen` (the matching answer) and `rejected` (an answer to something else)."""
    return _build_rows(make_preference_row, n_rows, seed)


def build_unpaired_rows(n_rows: int, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Rows with `prompt`, `completion` and `label` (True when the completion answers the prompt)."""
    return _build_rows(make_unpaired_row, n_rows, seed)


def build_stepwise_rows(n_rows: int, *, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Rows with `prompt`, `completions` (one sentence per step) and `labels` (False for off-topic steps)."""
    return _build_rows(make_stepwise_row, n_rows, seed)


def _build_rows(make_row: Callable[[random.Random, Corpus], Any], n_rows: int, seed: int) -> list[dict[str, Any]]:
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    rng = random.Random(seed)
    corpus = load_corpus()
    return [make_row(rng, corpus) for _ in range(n_rows)]


# ---- user files ----


def parse_jsonl_rows(lines: Iterable[str], text_field: str, *, source: str = "<jsonl>") -> list[dict[str, str]]:
    """Rows `{"text": ...}` taken from `text_field` of each JSON object line; blank lines are skipped."""
    rows = []
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{source}:{line_number}: not valid JSON ({error.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise ValueError(f"{source}:{line_number}: expected an object with a string field {text_field!r}")
        rows.append({"text": record[text_field]})
    if not rows:
        raise ValueError(f"{source}: no rows (the file is empty or holds only blank lines)")
    return rows


def read_jsonl_rows(path: str | Path, text_field: str) -> list[dict[str, str]]:
    """Read a JSON Lines file into `{"text": ...}` rows, naming the file and line of any bad record."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as handle:
            return parse_jsonl_rows(handle, text_field, source=str(path))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start} of its line)") from None
