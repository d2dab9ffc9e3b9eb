"""The `instructions` task (IFEval-style constraints) and its verifier."""

from __future__ import annotations

import itertools
import json
import time

import numpy as np
import pytest

from payoff.algos.grpo import GRPO
from payoff.core.errors import ConfigError
from payoff.envs.tasks import TASKS, TaskConfig, make_task
from payoff.envs.tasks.instructions import CONFLICTS, KINDS, PAIRS, TOPICS
from payoff.models.lm import ModelConfig, load_lm, save_lm
from payoff.rewards import BUILTIN
from payoff.rewards.base import RewardMix, RewardSpec
from payoff.rewards.instructions import (
    CHECKS,
    MAX_CHARS,
    ConstraintError,
    InstructionsVerifier,
    check,
    json_depth,
    verdicts,
)

FILL = " and this reply has words enough"


def met(kind: str, text: str, **parameters: object) -> bool:
    return check(text, {"kind": kind, **parameters})


# (kind, parameters, passing texts, failing texts); each text has five words at least
CASES = [
    ("max_words", {"n": 8}, ["one two three four five six seven eight"], ["a b c d e f g h i"]),
    ("min_words", {"n": 6}, ["one two three four five six"], ["one two three four five"]),
    (
        "max_sentences",
        {"n": 2},
        ["It is cold. Snow falls on the hills!", "It is cold and snow falls down here"],
        ["It is cold. Snow falls. Wind blows hard.", "Line one here\nline two here\nline three"],
    ),
    (
        "lowercase",
        {},
        ["all of this is lowercase text, 42.", "ça va très bien pour nous tous"],
        ["One capital ruins it all", "12345 67890 11 12 13", "tout va bien à PARIS ce soir"],
    ),
    (
        "uppercase",
        {},
        ["ALL OF THIS IS UPPERCASE TEXT, 42.", "ÇA VA TRÈS BIEN POUR NOUS"],
        ["ALMOST ALL UPPERCASE TEXt HERE", "12345 67890 11 12 13"],
    ),
    (
        "include_keyword",
        {"word": "quiet"},
        ["It was a QUIET day in town", "quiet. the town slept all night"],
        ["It was quietly done in town", "nothing of the sort is said"],
    ),
    (
        "exclude_keyword",
        {"word": "water"},
        ["The sea is wide and blue", "Waterfalls are pretty to look at"],
        ["The sea is full of Water today", "water: it is everywhere we look"],
    ),
    (
        "bullets",
        {"n": 2},
        ["Points:\n* first point here\n* second point here", "  - one point\n- another one here"],
        ["* one point only here today", "* a\n* b\n* c d e f", "*no space here*\n*nor here* a b"],
    ),
    (
        "json",
        {"key": "text"},
        ['{"text": "a short note about tea"}', '```json\n{"text": "one two three four five"}\n```'],
        [
            '{"summary": "a short note about tea"}',
            '["text", "a short note about tea"]',
            'Here it is: {"text": "a short note"}',
            '{"text": "unclosed note about tea"',
        ],
    ),
    (
        "ends_with",
        {"phrase": "That is all."},
        ["Tea is good and warm. That is all.", "tea is good and warm. that is all.  \n"],
        ["That is all. Tea is good and warm.", "Tea is good and warm. That is all"],
    ),
    (
        "starts_with",
        {"word": "Today"},
        ["Today the sea is calm and blue", "**Today** the sea is calm again"],
        ["Todays sea is calm and blue", "The sea is calm today and blue"],
    ),
    (
        "no_commas",
        {},
        ["No commas in this sentence at all"],
        ["One comma, and it fails here", "全角の逗号，で失敗する one two three four five"],
    ),
    (
        "title",
        {},
        ["<<The Sea>>\nIt is wide and blue today", "intro <<a title>> and then more words"],
        [
            "<< >> the title is empty here",
            "<<a\ntitle>> spans two lines here",
            "<no title> here a b",
        ],
    ),
    (
        "placeholders",
        {"n": 2},
        ["Meet [name] at [place] on time today"],
        ["Meet [name] at the place on time", "Meet [] at [\n] on time today ok"],
    ),
]


def test_every_kind_has_a_check_and_cases():
    assert set(CHECKS) == set(KINDS) and len(KINDS) >= 10
    assert {case[0] for case in CASES} == set(KINDS)


@pytest.mark.parametrize(("kind", "parameters", "passing", "failing"), CASES, ids=lambda x: x)
def test_each_check_passes_and_fails_the_texts_it_should(kind, parameters, passing, failing):
    for text in passing:
        assert met(kind, text, **parameters), (kind, text)
        assert not met(kind, text, negate=True, **parameters)  # a canary twin
    for text in failing:
        assert not met(kind, text, **parameters), (kind, text)


def test_replies_too_short_or_too_long_meet_nothing():
    # an empty reply would be lowercase, comma-free and under any word limit
    for kind in ("lowercase", "no_commas", "exclude_keyword", "max_words", "max_sentences"):
        assert not met(kind, "", word="x", n=50)
        assert not met(kind, "only four words here", word="x", n=50)
    huge = "word " * (MAX_CHARS // 5 + 1)
    assert verdicts(huge, [{"kind": "min_words", "n": 1}, {"kind": "no_commas"}]) == [False] * 2


def test_hostile_replies_are_checked_quickly():
    depth = 9_000
    nested = '{"text": ' + "[" * depth + "]" * depth + "}"
    assert json_depth(nested) == depth + 1
    hostile = [
        nested,  # json.loads would recurse out of its stack
        "[" * 19_000,
        '{"text": ' + "9" * 15_000 + "}",  # an int too long to parse
        "<<" * 9_000 + " words",
        "[" + "a" * 19_000,
        "a, " * 6_000,
        "\u00e9 " * 9_000,
        ". " * 9_000 + "one two three four five",
        "\n* " * 6_000,
    ]
    started = time.perf_counter()
    for text in hostile:
        assert len(text) <= MAX_CHARS
        for kind in KINDS:
            check(text, {"kind": kind, "n": 3, "word": "a", "key": "text", "phrase": "a"})
    assert time.perf_counter() - started < 2.0
    assert not met("json", nested, key="text")


def test_a_bad_constraint_names_the_valid_kinds():
    with pytest.raises(ConstraintError, match="max_words"):
        check("one two three four five", {"kind": "max_word", "n": 3})
    with pytest.raises(ConstraintError, match="lacks its parameter 'n'"):
        check("one two three four five", {"kind": "max_words"})


def test_the_verifier_scores_the_fraction_met_and_keeps_pass_rates_per_kind():
    verifier = InstructionsVerifier()
    asked = [{"kind": "lowercase"}, {"kind": "no_commas"}, {"kind": "max_words", "n": 6}]
    scores = verifier(
        ["p", "p", "p"],
        ["all lowercase, no doubt about it here", "All of them met here", "x"],
        constraints=[asked, asked[1:], None],
    )
    assert scores == [pytest.approx(1 / 3), 1.0, None]
    assert verifier.counts == {
        "pass_rate/lowercase": 1.0,
        "pass_rate/no_commas": 0.5,
        "pass_rate/max_words": 0.5,
    }
    assert verifier(["p"], ["text"]) == [None]  # no constraints column: not applicable
    assert isinstance(BUILTIN["instructions"](), InstructionsVerifier)


def test_rows_are_plain_data_deterministic_and_satisfiable():
    task = make_task(TaskConfig(name="instructions"))
    rows = task.sample(np.random.default_rng(3), 300)
    again = make_task(TaskConfig(name="instructions")).sample(np.random.default_rng(3), 300)
    assert rows == again
    assert json.loads(json.dumps(rows)) == rows  # plain data: str, int, lists, dicts
    assert task.split("test", 50) == make_task(TaskConfig(name="instructions")).split("test", 50)
    assert {len(r["constraints"]) for r in rows} == {1, 2, 3}
    test, ood = task.split("test", 100), task.split("ood", 50)
    verifier = InstructionsVerifier()
    for split in (rows, test, ood):
        for row in split:
            assert row["constraints"] == sorted(row["constraints"], key=lambda c: c["kind"])
            assert all(k in KINDS for k in (c["kind"] for c in row["constraints"]))
            assert row["topic"] in row["prompt"]
        # every row's exemplar answer meets every constraint: the rows are satisfiable
        scores = verifier(
            [r["prompt"] for r in split],
            [r["answer"] for r in split],
            constraints=[r["constraints"] for r in split],
        )
        assert scores == [1.0] * len(split)


def _pairs(row):
    kinds = [c["kind"] for c in row["constraints"]]
    return {frozenset(p) for p in itertools.combinations(kinds, 2)}


def test_held_out_topics_and_kind_pairs_never_reach_training():
    task = make_task(TaskConfig(name="instructions", options={"split_seed": 0}))
    assert len(task.held_out_topics) == round(0.2 * len(TOPICS))
    assert len(task.held_out_pairs) == round(0.2 * len(PAIRS))
    assert not task.held_out_pairs & task.train_pairs
    assert not any(p in CONFLICTS for p in task.held_out_pairs | task.train_pairs)
    train = task.sample(np.random.default_rng(0), 2_000)
    seen_pairs = set().union(*(_pairs(r) for r in train))
    assert not seen_pairs & task.held_out_pairs
    assert not {r["topic"] for r in train} & set(task.held_out_topics)
    for row in task.split("test", 200):
        assert len(row["constraints"]) == 2 and _pairs(row) <= task.held_out_pairs
        assert row["topic"] in task.held_out_topics
    for row in task.split("ood", 100):
        assert len(row["constraints"]) == 3 and _pairs(row) & task.held_out_pairs
        assert row["topic"] in task.held_out_topics
    other = make_task(TaskConfig(name="instructions", options={"split_seed": 1}))
    assert other.held_out_pairs != task.held_out_pairs  # the seed decides the split
    with pytest.raises(ConfigError, match="held_out_share"):
        make_task(TaskConfig(name="instructions", options={"held_out_share": 0.9}))


def test_canary_twins_contradict_their_rows():
    task = TASKS["instructions"]()
    row = task.split("test", 1)[0]
    twin = task.contradict(row)
    both = RewardMix([RewardSpec(name="instructions")])
    for reply in (row["answer"], "something else entirely, not much"):
        a = both(["p"], [reply], constraints=[row["constraints"]]).total[0]
        b = both(["p"], [reply], constraints=[twin["constraints"]]).total[0]
        assert not (a >= 1.0 and b >= 1.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    model, tokenizer = load_lm(ModelConfig(), seed=0)
    return str(save_lm(model, tokenizer, tmp_path_factory.mktemp("instructions") / "model"))


def test_grpo_trains_two_steps_on_the_task_with_its_verifier(model_dir):
    grpo = GRPO(
        model={"path": model_dir},
        task={"name": "instructions", "eval_size": 4},
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        learning_rate=1e-3,
        warmup_steps=0,
    )
    grpo.learn()
    assert grpo.rewards.specs[0].name == "instructions"
    assert grpo.verifier is not None and grpo.verifier.specs[0].name == "instructions"
    record = grpo._record
    assert 0.0 <= record["train/accuracy"] <= record["reward/instructions"] <= 1.0
    assert any(k.startswith("reward/instructions/pass_rate/") for k in record)
    result = grpo.evaluate(4, k=())
    assert result.accuracy is not None and 0.0 <= result.accuracy <= result.mean_reward <= 1.0


def test_the_instructions_reward_refuses_a_window_it_cannot_keep():
    from payoff.core.errors import ConfigError
    from payoff.rewards.base import RewardSpec, resolve_reward

    for window in (-1, 0, 2.5, True):
        with pytest.raises(ConfigError, match="option window .* must be an integer >= 1"):
            resolve_reward(RewardSpec(name="instructions", options={"window": window}))
