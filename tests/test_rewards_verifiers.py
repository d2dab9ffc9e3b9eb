"""Verifiers on tricky answers, and the reward-function contract (TRL-style functions, errors, hangs)."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from payoff.core.errors import ConfigError
from payoff.rewards import (
    RewardMix,
    RewardSpec,
    countdown_reward,
    exact_reward,
    extract_answer,
    format_reward,
    math_reward,
    parse_number,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,000", Fraction(1000)),
        ("0.50", Fraction(1, 2)),
        ("1/2", Fraction(1, 2)),
        ("-3", Fraction(-3)),
        ("The answer is 42.", Fraction(42)),
        ("first 3 then 7 apples", Fraction(7)),
        ("12,345.5", Fraction(24691, 2)),
        (".25", Fraction(1, 4)),
        ("no number here", None),
        ("1/0", None),
    ],
)
def test_parse_number_handles_commas_decimals_fractions_and_trailing_text(text, value):
    assert parse_number(text) == value


def test_math_reward_compares_numerically_and_prefers_the_answer_tag():
    completions = [
        "1,000",
        "0.50",
        "1/2",
        "46 apples",
        "<think>maybe 9</think><answer>7</answer> and then 9",
        "47",
        "",
    ]
    answers = ["1000", "1/2", "0.5", "46", "7", "46", "3"]
    scores = math_reward(["q"] * 7, completions, answer=answers)
    assert scores == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_a_reference_that_is_not_one_number_is_compared_as_text():
    # the last number of '[1, 2, 3]' or of a date decides nothing: those references are text
    completions = ["3", "[1,  2, 3]", "5", "2024-05-01", "1999-12-01", "12", "$5", "50 %"]
    answers = ["[1, 2, 3]", "[1, 2, 3]", "3 apples and 5 oranges", "1999-12-01"]
    answers += ["1999-12-01", "A12", "5", "50%"]
    scores = math_reward(["q"] * 8, completions, answer=answers)
    assert scores == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]  # (spaces normalized)


def test_math_reward_without_an_answer_column_is_not_applicable():
    assert math_reward(["q"], ["3"]) == [None]


def test_extract_answer_takes_the_last_answer_tag():
    assert extract_answer("<answer>1</answer> <answer> 2 </answer>") == "2"
    assert extract_answer("  plain  ") == "plain"


def test_format_reward_wants_think_then_answer():
    good = "<think>3+4 is 7</think>\n<answer>7</answer>"
    assert format_reward(["q"] * 4, [good, "<answer>7</answer>", "7", good + " extra"]) == [
        1.0,
        0.0,
        0.0,
        0.0,
    ]


def test_exact_reward_normalises_whitespace_only():
    assert exact_reward(["q"] * 3, ["1  2 3", "1 2 3 ", "3 2 1"], answer=["1 2 3"] * 3) == [
        1.0,
        1.0,
        0.0,
    ]


def test_countdown_needs_each_number_once_and_the_target():
    scores = countdown_reward(
        ["q"] * 5,
        ["(8+3)*9", "9*(8+3) = 99", "(8+3)*9+0", "8*9+3", "__import__('os')"],
        numbers=[[8, 9, 3]] * 5,
        target=[99] * 5,
    )
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0]


# ---- the contract and composition ---------------------------------------------------------


def trl_style(completions, **kwargs):
    """A reward function written for TRL: completions plus **kwargs (gets columns and ids)."""
    assert "completion_ids" in kwargs and "answer" in kwargs
    return [float(len(c)) for c in completions]


def only_completions(completions):
    return [1.0 for _ in completions]


def needs_missing(prompts, completions, solution):
    return [1.0 for _ in completions]


def sometimes_none(prompts, completions, **kwargs):
    return [None if c == "skip" else 0.5 for c in completions]


def raises_on_x(prompts, completions, **kwargs):
    return [1 / 0 if c == "x" else 1.0 for c in completions]


def hangs(prompts, completions, **kwargs):
    time.sleep(30)
    return [1.0 for _ in completions]


def _mix(*specs, events=None):
    sink = events if events is not None else []
    return RewardMix(list(specs), on_event=lambda *a, **k: sink.append((a, k)))


def test_weights_sum_and_each_function_is_kept_separately():
    mix = _mix(
        RewardSpec(name="math", weight=2.0),
        RewardSpec(name=f"{__name__}:trl_style", weight=0.5),
    )
    result = mix(["1+1=", "2+2="], ["2", "5"], completion_ids=[[1], [2]], answer=["2", "4"])
    assert result.scores["math"] == [1.0, 0.0]
    assert result.scores["trl_style"] == [1.0, 1.0]
    assert result.total == [2.5, 0.5]


def test_function_without_kwargs_gets_only_what_it_declares():
    mix = _mix(RewardSpec(name=f"{__name__}:only_completions"))
    assert mix(["p"], ["c"], answer=["1"]).total == [1.0]


def test_function_needing_a_missing_column_is_a_clear_error():
    mix = _mix(RewardSpec(name=f"{__name__}:needs_missing"))
    with pytest.raises(ConfigError, match=r"needs \[.solution.\].*Add the missing column"):
        mix(["p"], ["c"], answer=["1"])


def test_none_means_not_applicable_not_zero():
    mix = _mix(RewardSpec(name="math"), RewardSpec(name=f"{__name__}:sometimes_none"))
    result = mix(["p", "p"], ["skip", "3"], answer=[None, "3"])
    assert result.scores["sometimes_none"] == [None, 0.5]
    assert result.total == [0.0, 1.5]
    assert result.not_applicable == 1
    assert result.mean("sometimes_none") == 0.5


def test_a_raising_function_is_logged_with_the_sample_and_scored_on_error():
    events: list = []
    mix = _mix(RewardSpec(name=f"{__name__}:raises_on_x", on_error=-1.0), events=events)
    result = mix(["a", "b", "c"], ["ok", "x", "ok"])
    assert result.total == [1.0, -1.0, 1.0]  # only the offending row is penalised
    assert result.errors == {"raises_on_x": 1}
    (kind, message), evidence = events[0]
    assert kind == "reward_error" and "ZeroDivisionError" in message
    assert evidence["completion"] == "x" and evidence["prompt"] == "b"


def test_a_hanging_function_is_abandoned_after_its_timeout():
    events: list = []
    mix = _mix(
        RewardSpec(name="math"), RewardSpec(name=f"{__name__}:hangs", timeout=0.3), events=events
    )
    started = time.time()
    result = mix(["p"], ["4"], answer=["4"])
    assert time.time() - started < 5
    assert result.total == [1.0]
    assert result.errors["hangs"] == 1
    assert events[0][0][0] == "reward_hung"
    # The hung call keeps its thread; later calls are served by a fresh one, not queued behind it.
    started = time.time()
    assert mix(["p"], ["5"], answer=["4"]).total == [0.0]
    assert time.time() - started < 5


class CancellableHang:
    """A reward that hangs until cancelled, like a judge waiting on a dead endpoint."""

    def __init__(self) -> None:
        import threading

        self.cancelled = threading.Event()

    def __call__(self, prompts, completions, **kwargs):
        self.cancelled.wait(10)
        return [0.0 for _ in completions]

    def cancel(self) -> None:
        self.cancelled.set()


cancellable_hang = CancellableHang()


def test_an_abandoned_call_is_cancelled_when_the_function_can_be():
    mix = _mix(RewardSpec(name=f"{__name__}:cancellable_hang", timeout=0.3))
    mix(["p"], ["4"])
    assert cancellable_hang.cancelled.wait(1)


def test_unknown_reward_names_suggest_builtins():
    with pytest.raises(ConfigError, match="Did you mean 'math'"):
        RewardMix([RewardSpec(name="maths")])


def test_wrong_return_values_count_as_errors():
    def not_numbers(prompts, completions, **kw):
        return ["good" for _ in completions]

    mix = _mix(RewardSpec(name="math"))
    mix.functions = [not_numbers]
    result = mix(["p", "q"], ["1", "2"])
    assert result.errors["math"] == 2


@pytest.mark.parametrize(
    ("reply", "paid"),
    [
        ("83 * 3 = 249", True),
        ("83 * 3 = 249.", True),
        ("The answer is 249.", True),
        ("Answer: 249", True),
        ("Answer: **249**", True),
        ("249", True),
        ("83 * 3 = 80 * 3 + 3 * 3 = 249", True),  # working, then the answer, last
        ("83 * 3 = 249\n\nThis is a simple example", False),  # more text after it
        ("Answer: 247, 248, 249", False),  # the answer among a list of numbers
        ("247 248 249", False),
        ("Maybe 249", False),  # no statement of an answer
        ("83 * 3 = 248", False),
    ],
)
def test_final_answer_pays_only_a_reply_that_ends_by_stating_the_right_number(reply, paid):
    """`math` pays the last number wherever it is: a list of guesses ending in the answer,
    or an answer followed by rambling, would be paid; `final_answer` pays neither."""
    from payoff.rewards import final_answer_reward

    assert final_answer_reward([""], [reply], answer=["249"]) == [float(paid)]
    if reply in ("Answer: 247, 248, 249", "247 248 249"):
        assert math_reward([""], [reply], answer=["249"]) == [1.0]
    assert final_answer_reward([""], [reply]) == [None]  # no reference: not applicable


def test_final_answer_reads_a_reply_full_of_whitespace_in_one_pass():
    """A model-written run of spaces between 'is' and the end once made the search try every
    way of splitting it (cubic: 400 spaces took 1.2 s, 5,000 would take hours)."""
    from payoff.rewards import stated_answer

    assert stated_answer("The answer is" + " " * 50_000 + "x") is None
    assert stated_answer("so = 5" + " \n" * 50_000 + "x") is None
    assert stated_answer("The answer is" + " " * 50_000 + "249") == "249"
    assert stated_answer("x" * 5_000 + " = 249.") == "249"  # the statement is read from the tail
    assert stated_answer("7" * 5_000) is None  # not the answer to anything asked


def test_answer_anywhere_is_the_loose_twin_final_answer_refuses():
    """What `str(answer) in completion` checkers pay: the number anywhere, as a number."""
    from payoff.rewards import answer_anywhere_reward, final_answer_reward

    replies = [
        "83 * 3 = 249\n\nThis is a simple example",  # the answer, then rambling
        "Answer: 247, 248, 249",  # a list of guesses
        "2490 is close",  # digits of the answer inside another number: not it
        "83 * 3 = 248",
        "1 " * 300 + "249",  # past the numbers it looks at
    ]
    answers = ["249"] * len(replies)
    assert answer_anywhere_reward([""] * 5, replies, answer=answers) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert final_answer_reward([""] * 5, replies, answer=answers) == [0.0] * 5
    assert answer_anywhere_reward([""], ["249"]) == [None]  # no reference: not applicable
    assert _mix(RewardSpec(name="answer_anywhere"))([""], ["= 249"], answer=["249"]).total == [1.0]


def test_an_arithmetic_tasks_verifier_option_decides_accuracy_and_the_default_reward():
    from payoff.algos.shared.lm import correctness_spec
    from payoff.envs.tasks import TaskConfig, make_task

    options = {"template": "What is {a} {op} {b}? End your reply with the answer."}
    strict = make_task(TaskConfig(name="addition", options={**options, "verifier": "final_answer"}))
    row = strict.split("test", 1)[0]
    assert row["prompt"].startswith("What is ") and " + " in row["prompt"]
    spec = correctness_spec(strict)
    assert spec.name == "final_answer" and strict.default_rewards == ("final_answer",)
    mix = RewardMix([spec])
    rambling = f"{row['answer']}\n\nThis is a simple example"
    assert mix(
        [row["prompt"]] * 2, [row["answer"], rambling], answer=[row["answer"]] * 2
    ).total == [1.0, 0.0]
    assert make_task(TaskConfig(name="multiplication")).default_rewards == ("math",)
    with pytest.raises(
        ConfigError,
        match=r"task.options.verifier must be one of math, final_answer, exact, got 'strict'",
    ):
        make_task(TaskConfig(name="addition", options={"verifier": "strict"}))
