"""Verifiable instructions (IFEval's kind): a short piece of writing on a topic under 1-3
constraints that a program checks, e.g. 'at most 25 words', 'all lowercase', 'exactly 3
bullet points', 'end with the phrase "The end."'.

Each row carries its constraints as plain data, `{"kind": ..., parameters}`, so the
`instructions` verifier (payoff.rewards.instructions) needs nothing else to score it:

    {"prompt": "Write a short note about tea. Do not use any commas in your response. ...",
     "constraints": [{"kind": "no_commas"}, {"kind": "max_words", "n": 25}],
     "topic": "tea", "answer": "<a reply that satisfies them all>", "key": "..."}

The held-out split is held out twice over (`split_seed` decides both, by hashing): 20% of
the topics (`held_out_topics`) and 20% of the compatible pairs of constraint kinds
(`held_out_pairs`) never appear in training. Training rows have 1-3 constraints on a
training topic, every pair of them a training pair; test rows have 2 constraints forming a
held-out pair, on a held-out topic; 'ood' rows have 3 constraints, at least one pair
held out, on a held-out topic. `answer` is one reply that satisfies every constraint of
its row (what SFT or payoff's tiny base model learns from; the verifier never reads it).
"""

from __future__ import annotations

import itertools
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from payoff.core.errors import ConfigError
from payoff.envs.tasks.base import Row, Task, register_task

# topic -> two words a reply about it naturally uses (what exclude_keyword forbids)
TOPICS: dict[str, tuple[str, str]] = {
    "the ocean": ("water", "waves"),
    "coffee": ("cup", "morning"),
    "winter": ("snow", "cold"),
    "a city park": ("trees", "grass"),
    "the moon": ("night", "sky"),
    "bicycles": ("wheels", "ride"),
    "libraries": ("books", "read"),
    "cats": ("pet", "fur"),
    "mountains": ("climb", "peak"),
    "music": ("songs", "sound"),
    "gardening": ("plants", "soil"),
    "trains": ("travel", "tracks"),
    "the desert": ("sand", "hot"),
    "friendship": ("friends", "trust"),
    "the sun": ("light", "warm"),
    "school": ("students", "learn"),
    "birds": ("fly", "wings"),
    "a rainy day": ("rain", "umbrella"),
    "computers": ("data", "screen"),
    "the forest": ("trees", "animals"),
    "chess": ("game", "pieces"),
    "bread": ("flour", "bake"),
    "summer": ("beach", "hot"),
    "rivers": ("water", "flow"),
    "dogs": ("pet", "loyal"),
    "space travel": ("rocket", "stars"),
    "tea": ("cup", "leaves"),
    "honeybees": ("honey", "flowers"),
    "farms": ("animals", "crops"),
    "volcanoes": ("lava", "eruption"),
    "museums": ("art", "history"),
    "football": ("ball", "team"),
    "swimming": ("water", "pool"),
    "the internet": ("online", "websites"),
    "kites": ("wind", "fly"),
    "apples": ("fruit", "tree"),
    "clocks": ("time", "hours"),
    "bridges": ("river", "cross"),
    "lighthouses": ("ships", "light"),
    "cooking soup": ("pot", "vegetables"),
}
FORMS = ("paragraph", "note", "description", "blog post", "story")
INCLUDE_WORDS = ("simple", "future", "color", "quiet", "family", "journey", "magic", "careful")
END_PHRASES = (
    "Is there anything else I can help with?",
    "Thank you for reading.",
    "That is all.",
    "The end.",
)
START_WORDS = ("Today", "Yes", "Imagine", "Here", "Once")
JSON_KEYS = ("text", "summary", "answer")

# kind -> its parameters' values (each drawn uniformly)
KINDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "max_words": {"n": (15, 20, 25, 30, 40)},
    "min_words": {"n": (20, 30, 40)},
    "max_sentences": {"n": (1, 2, 3)},
    "lowercase": {},
    "uppercase": {},
    "include_keyword": {"word": INCLUDE_WORDS},
    "exclude_keyword": {},  # the word: one of the topic's own (TOPICS)
    "bullets": {"n": (2, 3, 4)},
    "json": {"key": JSON_KEYS},
    "ends_with": {"phrase": END_PHRASES},
    "starts_with": {"word": START_WORDS},
    "no_commas": {},
    "title": {},
    "placeholders": {"n": (1, 2, 3)},
}
# Pairs of kinds never asked together: they contradict each other (lowercase, uppercase),
# or together ask for something odd enough to be ambiguous (a JSON object that ends with a
# phrase; bullet points in one sentence; whether a title's line counts as a sentence).
CONFLICTS = frozenset(
    frozenset(pair)
    for pair in [
        ("lowercase", "uppercase"),
        ("max_words", "min_words"),
        ("min_words", "max_sentences"),
        ("max_sentences", "bullets"),
        ("max_sentences", "title"),  # is a title line a sentence? ambiguous
        ("json", "bullets"),
        ("json", "title"),
        ("json", "starts_with"),
        ("json", "ends_with"),
        ("json", "uppercase"),
        ("json", "max_sentences"),
        ("title", "starts_with"),
    ]
)
PAIRS = tuple(pair for pair in itertools.combinations(KINDS, 2) if frozenset(pair) not in CONFLICTS)


def instruction(constraint: dict[str, Any]) -> str:
    """The sentence of the prompt that asks for `constraint`."""
    kind, n = constraint["kind"], constraint.get("n")
    s = "" if n == 1 else "s"
    texts = {
        "max_words": f"Answer in at most {n} words.",
        "min_words": f"Answer with at least {n} words.",
        "max_sentences": f"Use at most {n} sentence{s}.",
        "lowercase": "Write your entire response in lowercase letters; no capital letters "
        "are allowed.",
        "uppercase": "Write your entire response in English capital letters only.",
        "include_keyword": f'Include the word "{constraint.get("word")}" in your response.',
        "exclude_keyword": f'Do not use the word "{constraint.get("word")}" anywhere in your '
        "response.",
        "bullets": f"Your answer must contain exactly {n} bullet points, each on its own line "
        'starting with "* ".',
        "json": "Wrap your entire response in JSON: one object with the key "
        f'"{constraint.get("key")}".',
        "ends_with": f'End your response with the exact phrase "{constraint.get("phrase")}" '
        "and nothing after it.",
        "starts_with": f'Start your response with the word "{constraint.get("word")}".',
        "no_commas": "Do not use any commas in your response.",
        "title": "Give your answer a title wrapped in double angular brackets, such as "
        "<<my title>>.",
        "placeholders": f"Include at least {n} placeholder{s} in square brackets, such as [name].",
    }
    return texts[kind]


def _ranked(names: list[str], seed: int, what: str) -> list[str]:
    """`names` in an order fixed by `seed` (crc32, the same in every process and Python)."""
    return sorted(names, key=lambda name: zlib.crc32(f"{seed}/{what}/{name}".encode()))


@dataclass
class InstructionsOptions:
    """The split and the prompts.

    split_seed: decides which topics and pairs of constraint kinds are held out (a hash of
        the seed and the name ranks them; the first `held_out_share` of each are held out).
    held_out_share: the share of topics and of compatible kind pairs kept for evaluation.
    max_constraints: at most this many constraints in a training row (1 to 3).
    """

    split_seed: int = 0
    held_out_share: float = 0.2
    max_constraints: int = 3

    def validate(self) -> None:
        if not 0.05 <= self.held_out_share <= 0.5:
            raise ConfigError(
                f"task.options.held_out_share must be in 0.05..0.5, got {self.held_out_share}"
            )
        if not 1 <= self.max_constraints <= 3:
            raise ConfigError(
                f"task.options.max_constraints must be 1, 2 or 3, got {self.max_constraints}"
            )


@register_task("instructions")
class Instructions(Task):
    """Short writing under verifiable constraints (IFEval's kind), scored per constraint."""

    default_rewards = ("instructions",)

    options: InstructionsOptions

    def __init__(self, **options: object):
        super().__init__(**options)
        o = self.options
        topics = _ranked(list(TOPICS), o.split_seed, "topic")
        cut = round(o.held_out_share * len(topics))
        self.held_out_topics = sorted(topics[:cut])
        self.train_topics = sorted(topics[cut:])
        pairs = _ranked(["+".join(p) for p in PAIRS], o.split_seed, "pair")
        cut = round(o.held_out_share * len(pairs))
        self.held_out_pairs = {frozenset(p.split("+")) for p in pairs[:cut]}
        self.train_pairs = {frozenset(p.split("+")) for p in pairs[cut:]}

    def _draw(self, rng: np.random.Generator, split: str) -> Row:
        # _problem draws from the split's own topics and pairs: no hashing of keys needed
        return self._problem(rng, split)

    def _kinds(self, rng: np.random.Generator, split: str) -> list[str]:
        """Constraint kinds for a row of `split` (see the module's docstring)."""
        if split == "test":
            pairs = sorted(sorted(p) for p in self.held_out_pairs)
            return list(pairs[int(rng.integers(len(pairs)))])
        count = 3 if split == "ood" else int(rng.integers(1, self.options.max_constraints + 1))
        kinds = list(KINDS)
        for _ in range(10_000):
            chosen = [str(k) for k in rng.choice(kinds, size=count, replace=False)]
            pairs = [frozenset(p) for p in itertools.combinations(chosen, 2)]
            if any(p in CONFLICTS for p in pairs):
                continue
            if split == "ood" and any(p in self.held_out_pairs for p in pairs):
                return chosen
            if split == "train" and all(p in self.train_pairs for p in pairs):
                return chosen
        raise ConfigError(f"task 'instructions' found no {split!r} combination of constraints")

    def _problem(self, rng: np.random.Generator, split: str) -> Row:
        topics = self.train_topics if split == "train" else self.held_out_topics
        for _ in range(1_000):
            topic = topics[int(rng.integers(len(topics)))]
            kinds = self._kinds(rng, split)
            constraints = [_parameters(kind, topic, rng) for kind in sorted(kinds)]
            answer = exemplar(topic, constraints)
            if answer is not None:
                break
        else:
            raise ConfigError("task 'instructions' could not build a satisfiable row")
        order = [int(i) for i in rng.permutation(len(constraints))]  # as asked in the prompt
        form = FORMS[int(rng.integers(len(FORMS)))]
        asked = " ".join(instruction(constraints[i]) for i in order)
        return {
            "prompt": f"Write a short {form} about {topic}. {asked}",
            "constraints": constraints,
            "topic": topic,
            "answer": answer,
            "key": f"{form}|{topic}|{json.dumps(constraints, sort_keys=True)}",
        }

    def contradict(self, row: Row) -> Row | None:
        """The row with its first constraint negated (`"negate": true`): no reply satisfies
        both it and the original (a canary's twin)."""
        constraints = row.get("constraints")
        if not constraints:
            return None
        first = {**constraints[0], "negate": not constraints[0].get("negate", False)}
        return {**row, "constraints": [first, *constraints[1:]]}


def _parameters(kind: str, topic: str, rng: np.random.Generator) -> dict[str, Any]:
    """One constraint of `kind` with its parameters drawn."""
    constraint: dict[str, Any] = {"kind": kind}
    for name, values in KINDS[kind].items():
        value = values[int(rng.integers(len(values)))]
        constraint[name] = int(value) if isinstance(value, int | np.integer) else str(value)
    if kind == "exclude_keyword":
        natural = TOPICS[topic]
        constraint["word"] = natural[int(rng.integers(len(natural)))]
    return constraint


# ---- a reply that satisfies a row's constraints --------------------------------------------
FILLER = (
    "many people enjoy {topic}",
    "{topic} is worth a closer look",
    "{topic} can make an ordinary day better",
    "there is always more to learn about {topic}",
    "people have talked about {topic} for a long time",
    "a small detail about {topic} can surprise you",
)
WORD = re.compile(r"\w+")


def exemplar(topic: str, constraints: list[dict[str, Any]]) -> str | None:
    """One reply that satisfies every constraint (None when this generator cannot make one:
    the row is then drawn again). Built from sentences about the topic, then shaped: bullet
    lines, a JSON object, a title, the start word and end phrase, the letter case."""
    by_kind = {c["kind"]: c for c in constraints}
    banned = by_kind.get("exclude_keyword", {}).get("word")
    lines = [s.format(topic=topic) for s in FILLER if banned not in s.split()]
    sentences: list[str] = []
    if "include_keyword" in by_kind:
        sentences.append(f"it has a {by_kind['include_keyword']['word']} side to it")
    if "placeholders" in by_kind:
        slots = ["[name]", "[place]", "[date]"][: by_kind["placeholders"]["n"]]
        sentences.append("ask " + " and ".join(slots))
    bullets = by_kind.get("bullets", {}).get("n", 0)
    least = max(by_kind.get("min_words", {}).get("n", 0), 12)  # a short piece, not a line
    most_sentences = by_kind.get("max_sentences", {}).get("n", 99)
    start = by_kind.get("starts_with", {}).get("word")
    end = by_kind.get("ends_with", {}).get("phrase")
    filler = iter(lines * 8)
    while len(sentences) < max(bullets, 1) or len(WORD.findall(" ".join(sentences))) < least:
        sentences.append(next(filler))
    if start is not None:
        sentences[0] = f"{start} {sentences[0]}"
    sentences = [s[0].upper() + s[1:] for s in sentences]
    if len(sentences) + (end is not None) > most_sentences:  # one sentence, the end in it
        body = " and ".join(s[0].lower() + s[1:] for s in sentences)
        body = body[0].upper() + body[1:] + (f" {end}" if end else ".")
    else:
        lead = [f"{s}." for s in sentences[: len(sentences) - bullets]]
        listed = [f"* {s}." for s in sentences[len(sentences) - bullets :]]
        body = "\n".join(part for part in [" ".join(lead), *listed] if part)
        if end is not None:
            body = f"{body}\n{end}" if bullets else f"{body} {end}"
    if "title" in by_kind:
        body = f"<<{topic.title()} Notes>>\n{body}"
    if "json" in by_kind:
        body = json.dumps({by_kind["json"]["key"]: body})
    if "lowercase" in by_kind:
        body = body.lower()
    if "uppercase" in by_kind:
        body = body.upper()
    words = [w.lower() for w in WORD.findall(body)]
    if "max_words" in by_kind and len(words) > by_kind["max_words"]["n"]:
        return None
    if banned is not None and banned in words:
        return None
    return body
