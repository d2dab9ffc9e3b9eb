"""A differential corpus for payoff's code verifier.

The contract `payoff.sandbox.run_tests` is held to: for every test a dataset can hold, its
verdict is the one CPython gives when it runs `solution + "\\n" + tests` as one plain
program in a fresh `python -I` process (exit status 0: pass; an exception, any other exit
status or a timeout: fail). Every hostile solution fails, whatever CPython says.

Each case is (name, tests, solution, kind, form):

  - kind 'honest': a correct solution; CPython passes it (the sanity test checks);
  - kind 'wrong': an incorrect one; CPython fails it (the sanity test checks);
  - kind 'hostile': one that tries to pass without being right (exits early, patches
    builtins, lies in `__eq__`, reads the expected values from its caller, its files or
    another process's memory...). payoff must fail it; many of them pass plain CPython.

The cases are built combinatorially, tasks x test forms x solution variants:

  - value tasks (`square`, `mean`, `split_words`, ...) are given as inputs and a Python
    oracle; every generic test form (`assert f(x) == v`, a `for` loop over cases, `all()`
    over a generator, `all(map(lambda ...))`, HumanEval's `check(candidate)`, a helper,
    walrus, comprehensions with filters...) and the forms of the task's family
    (`math.isclose`, `is True`, `sorted(...)`, ...) are written from them;
  - scenario tasks (mutation of arguments, exceptions, generators, classes) have their
    test texts written out;
  - a solution variant may say which forms it is for: a wrong variant that only a form
    checking, say, the order of a list can catch (`needs`), or an honest one that a form
    rightly rejects (`breaks`: an int 1 where `is True` is asked).

Run as a script: `python tests/verdict_corpus.py makeup` prints the corpus's make-up;
`python tests/verdict_corpus.py run [--out FILE]` runs every case through payoff and the
reference and prints (or writes) the cases where they disagree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

KINDS = ("honest", "wrong", "hostile")
REFERENCE_TIMEOUT = 5.0  # seconds for the plain-CPython run of one case
SANDBOX_TIMEOUT = 5.0


class Case(NamedTuple):
    name: str  # task/form/variant
    tests: str
    solution: str
    kind: str  # 'honest' | 'wrong' | 'hostile'
    form: str


@dataclass(frozen=True)
class Variant:
    """One solution of a task."""

    name: str
    code: str
    needs: frozenset[str] = frozenset()  # wrong: only forms checking all of these catch it
    breaks: frozenset[str] = frozenset()  # honest: forms checking any of these reject it


def variant(name: str, code: str, needs: Iterable[str] = (), breaks: Iterable[str] = ()) -> Variant:
    return Variant(name, textwrap.dedent(code).strip() + "\n", frozenset(needs), frozenset(breaks))


@dataclass(frozen=True)
class Form:
    """One test text, and what it checks (matched against a variant's needs and breaks)."""

    name: str
    text: str
    props: frozenset[str]


def form(name: str, text: str, props: Iterable[str]) -> Form:
    return Form(name, textwrap.dedent(text).strip() + "\n", frozenset(props))


@dataclass
class Task:
    """A function or class under test, its solutions, and its own test texts."""

    name: str
    honest: list[Variant]
    wrong: list[Variant]
    forms: list[Form] = field(default_factory=list)
    # value tasks: the generic and family forms are written from these
    inputs: list[tuple] = field(default_factory=list)
    oracle: Callable[..., Any] | None = None
    family: str = ""
    params: tuple[str, ...] = ()  # the parameter names, for calls by keyword

    def cases(self) -> list[tuple[tuple, Any]]:
        assert self.oracle is not None
        return [(args, self.oracle(*args)) for args in self.inputs]


# ---- writing values and calls as Python text --------------------------------------------
def lit(value: Any) -> str:
    """repr, with sets written in sorted order so that the corpus text does not depend on
    the hash seed."""
    if isinstance(value, set | frozenset):
        inner = ", ".join(sorted(lit(v) for v in value))
        if isinstance(value, frozenset):
            return f"frozenset({{{inner}}})" if value else "frozenset()"
        return f"{{{inner}}}" if value else "set()"
    if isinstance(value, list):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(lit(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in value.items()) + "}"
    return repr(value)


def call(func: str, args: tuple) -> str:
    return f"{func}({', '.join(lit(a) for a in args)})"


def case_list(cases: list[tuple[tuple, Any]]) -> str:
    return "[" + ", ".join(f"({lit(a)}, {lit(w)})" for a, w in cases) + "]"


# ---- generic forms: every value task, written from its (args, expected) pairs ------------
# What a form checks: 'spec' every case fully; 'exact' floats to the last bit; 'type' the
# container or number type (list vs tuple, str vs int); 'order' the order of items;
# 'identity' `is True` / exact int or bool type.
EQ = frozenset({"spec", "exact", "type", "order"})
Writer = Callable[[str, list[tuple[tuple, Any]]], str | None]


def _lines(template: Callable[[str, tuple, Any], str]) -> Writer:
    return lambda f, cases: "\n".join(template(f, a, w) for a, w in cases)


def _humaneval(f: str, cases: list[tuple[tuple, Any]]) -> str:
    body = "".join(f"    assert {call('candidate', a)} == {lit(w)}\n" for a, w in cases)
    return f"def check(candidate):\n{body}\n\ncheck({f})"


def _no_none(writer: Writer) -> Writer:
    """A form that guards against None first: only for tasks with no None expected."""
    return lambda f, cases: None if any(w is None for _, w in cases) else writer(f, cases)


def _eq_msg(f: str, a: tuple, w: Any) -> str:
    message = f"{call(f, a)} should be {lit(w)}"
    return f"assert {call(f, a)} == {lit(w)}, {message!r}"


GENERIC_FORMS: list[tuple[str, frozenset[str], Writer]] = [
    ("eq", EQ, _lines(lambda f, a, w: f"assert {call(f, a)} == {lit(w)}")),
    (
        "loop",
        EQ,
        lambda f, c: (
            f"cases = {case_list(c)}\nfor args, want in cases:\n"
            f"    assert {f}(*args) == want, (args, want)"
        ),
    ),
    (
        "all_genexp",
        EQ,
        lambda f, c: f"assert all({f}(*args) == want for args, want in {case_list(c)})",
    ),
    ("humaneval", EQ, _humaneval),
    (
        "listcomp",
        EQ,
        lambda f, c: (
            f"assert [{f}(*args) for args in {lit([a for a, _ in c])}] == {lit([w for _, w in c])}"
        ),
    ),
    (
        "all_map_lambda",
        EQ,
        lambda f, c: f"assert all(map(lambda case: {f}(*case[0]) == case[1], {case_list(c)}))",
    ),
    ("eq_flipped", EQ, _lines(lambda f, a, w: f"assert {lit(w)} == {call(f, a)}")),
    ("eq_message", EQ, _lines(_eq_msg)),
    ("not_ne", EQ, _lines(lambda f, a, w: f"assert not ({call(f, a)} != {lit(w)})")),
    (
        "if_raise",
        EQ,
        _lines(
            lambda f, a, w: (
                f"if {call(f, a)} != {lit(w)}:\n    raise AssertionError({call(f, a)!r})"
            )
        ),
    ),
    (
        "loop_got",
        EQ,
        lambda f, c: (
            f"for args, want in {case_list(c)}:\n    got = {f}(*args)\n    if got != want:\n"
            "        raise AssertionError(f'{args}: got {got!r}, want {want!r}')"
        ),
    ),
    (
        "not_any_ne",
        EQ,
        lambda f, c: f"assert not any({f}(*args) != want for args, want in {case_list(c)})",
    ),
    (
        "nested_comp",
        EQ,
        lambda f, c: (
            f"groups = [{case_list(c[:2])}, {case_list(c[2:])}]\n"
            f"assert all({f}(*args) == want for group in groups for args, want in group)"
        ),
    ),
    ("walrus", EQ, _lines(lambda f, a, w: f"assert (got := {call(f, a)}) == {lit(w)}, got")),
    (
        "helper",
        EQ,
        lambda f, c: (
            "def expect(got, want):\n    assert got == want, f'{got!r} != {want!r}'\n\n\n"
            + "\n".join(f"expect({call(f, a)}, {lit(w)})" for a, w in c)
        ),
    ),
    (
        "count_filter",
        EQ,
        lambda f, c: f"assert sum(1 for args, want in {case_list(c)} if {f}(*args) != want) == 0",
    ),
    (
        "and_guard",
        EQ,
        _no_none(
            lambda f, c: (
                f"assert all({f}(*args) is not None and {f}(*args) == want "
                f"for args, want in {case_list(c)})"
            )
        ),
    ),
    (
        "or_short",
        EQ,
        _no_none(
            lambda f, c: (
                f"assert not any({f}(*args) is None or {f}(*args) != want "
                f"for args, want in {case_list(c)})"
            )
        ),
    ),
    (
        "dictcomp",
        EQ,
        lambda f, c: (
            f"assert {{i: {f}(*args) for i, args in enumerate({lit([a for a, _ in c])})}} == "
            f"{lit({i: w for i, (_, w) in enumerate(c)})}"
        ),
    ),
    (
        "unittest",
        EQ,
        lambda f, c: (
            "import unittest\n\ntc = unittest.TestCase()\n"
            + "\n".join(f"tc.assertEqual({call(f, a)}, {lit(w)})" for a, w in c)
        ),
    ),
    (
        "zip_loop",
        EQ,
        lambda f, c: (
            f"inputs = {lit([a for a, _ in c])}\nwanted = {lit([w for _, w in c])}\n"
            f"for args, want in zip(inputs, wanted, strict=True):\n    assert {f}(*args) == want"
        ),
    ),
]
CORE_FORMS = 6  # the first six generic forms are written for every value task, each of the
# rest for every third task (rotating): every form meets every family, in a few minutes


# ---- family forms: written for the value tasks of one family ------------------------------
def _per_case(template: Callable[[str, tuple, Any], str], props: Iterable[str]) -> tuple:
    return _lines(template), frozenset(props)


FAMILY_FORMS: dict[str, list[tuple[str, Writer, frozenset[str]]]] = {
    "int": [
        (
            "isinstance_int",
            *_per_case(
                lambda f, a, w: f"assert isinstance({call(f, a)}, int) and {call(f, a)} == {w!r}",
                {"spec", "exact", "type", "identity"},
            ),
        ),
        (
            "chained_lt",
            *_per_case(
                lambda f, a, w: f"assert {w - 1} < {call(f, a)} < {w + 1}",
                {"spec", "exact", "type"},
            ),
        ),
        (
            "abs_diff",
            *_per_case(
                lambda f, a, w: f"assert abs({call(f, a)} - {w!r}) < 1e-9",
                {"spec", "exact", "type"},
            ),
        ),
        (
            "isclose",
            lambda f, c: (
                "import math\n\n"
                + "\n".join(f"assert math.isclose({call(f, a)}, {w!r})" for a, w in c)
            ),
            frozenset({"spec", "type", "isclose"}),
        ),
        (
            "str_of",
            *_per_case(
                lambda f, a, w: f"assert str({call(f, a)}) == {str(w)!r}",
                {"spec", "exact", "identity"},
            ),
        ),
    ],
    "float": [
        (
            "isclose",
            lambda f, c: (
                "import math\n\n"
                + "\n".join(f"assert math.isclose({call(f, a)}, {w!r}, rel_tol=1e-9)" for a, w in c)
            ),
            frozenset({"spec", "type", "isclose"}),
        ),
        (
            "abs_diff",
            *_per_case(
                lambda f, a, w: f"assert abs({call(f, a)} - {w!r}) < 1e-9", {"spec", "type"}
            ),
        ),
        (
            "chained_lt",
            *_per_case(
                lambda f, a, w: f"assert {w!r} - 1e-9 < {call(f, a)} < {w!r} + 1e-9",
                {"spec", "type"},
            ),
        ),
        (
            "round",
            *_per_case(
                lambda f, a, w: f"assert round({call(f, a)}, 9) == round({w!r}, 9)",
                {"spec", "type"},
            ),
        ),
    ],
    "bool": [
        (
            "is_bool",
            *_per_case(
                lambda f, a, w: f"assert {call(f, a)} is {w!r}", {"spec", "type", "identity"}
            ),
        ),
        ("bare", *_per_case(lambda f, a, w: f"assert {'' if w else 'not '}{call(f, a)}", {"spec"})),
        (
            "isinstance_bool",
            *_per_case(
                lambda f, a, w: f"assert isinstance({call(f, a)}, bool) and {call(f, a)} == {w!r}",
                {"spec", "exact", "type", "identity"},
            ),
        ),
        (
            "filter_comp",
            lambda f, c: (
                f"assert [x for x in {lit(tuple(a[0] for a, _ in c))} if {f}(x)] == "
                f"{lit([a[0] for a, w in c if w])}"
            ),
            frozenset({"spec"}),
        ),
    ],
    "maybe_none": [
        (
            "is_none",
            *_per_case(
                lambda f, a, w: (
                    f"assert {call(f, a)} is None" if w is None else f"assert {call(f, a)} == {w!r}"
                ),
                {"spec", "exact", "type", "identity"},
            ),
        ),
        (
            "none_pair",
            *_per_case(
                lambda f, a, w: (
                    f"result = {call(f, a)}\n"
                    f"assert (result is None) == {w is None} and (result is None or result == {w!r})"
                ),
                {"spec", "exact", "type", "identity"},
            ),
        ),
    ],
    "list": [
        (
            "sorted",
            *_per_case(
                lambda f, a, w: f"assert sorted({call(f, a)}) == {lit(sorted(w))}", {"spec"}
            ),
        ),
        (
            "counter",
            lambda f, c: (
                "import collections\n\n"
                + "\n".join(
                    f"assert collections.Counter({call(f, a)}) == collections.Counter({lit(w)})"
                    for a, w in c
                )
            ),
            frozenset({"spec"}),
        ),
        (
            "len_in",
            *_per_case(
                lambda f, a, w: (
                    f"assert len({call(f, a)}) == {len(w)} and all(x in {call(f, a)} for x in {lit(w)})"
                ),
                {"spec"},
            ),
        ),
    ],
    "set": [
        (
            "sorted",
            *_per_case(
                lambda f, a, w: f"assert sorted({call(f, a)}) == {lit(sorted(w))}", {"spec"}
            ),
        ),
        (
            "len_in",
            *_per_case(
                lambda f, a, w: (
                    f"assert len({call(f, a)}) == {len(w)} and all(x in {call(f, a)} for x in {lit(w)})"
                ),
                {"spec"},
            ),
        ),
        (
            "symmetric_difference",
            *_per_case(
                lambda f, a, w: f"assert {call(f, a)} ^ {lit(w)} == set()", {"spec", "type"}
            ),
        ),
        (
            "subset_both_ways",
            *_per_case(
                lambda f, a, w: f"assert {call(f, a)} <= {lit(w)} and {call(f, a)} >= {lit(w)}",
                {"spec", "type"},
            ),
        ),
    ],
    "tuple": [
        (
            "unpack",
            *_per_case(
                lambda f, a, w: f"low, high = {call(f, a)}\nassert (low, high) == {lit(w)}",
                {"spec", "order"},
            ),
        ),
        (
            "index",
            *_per_case(
                lambda f, a, w: (
                    f"assert {call(f, a)}[0] == {w[0]!r} and {call(f, a)}[1] == {w[1]!r}"
                ),
                {"spec", "order"},
            ),
        ),
        (
            "isinstance_tuple",
            *_per_case(
                lambda f, a, w: (
                    f"assert isinstance({call(f, a)}, tuple) and {call(f, a)} == {lit(w)}"
                ),
                {"spec", "exact", "type", "order", "identity"},
            ),
        ),
    ],
    "bytes": [
        (
            "hex",
            *_per_case(
                lambda f, a, w: f"assert {call(f, a)}.hex() == {w.hex()!r}",
                {"spec", "type", "order"},
            ),
        ),
        (
            "list_of_ints",
            *_per_case(
                lambda f, a, w: f"assert list({call(f, a)}) == {list(w)!r}",
                {"spec", "type", "order"},
            ),
        ),
        (
            "decode",
            *_per_case(
                lambda f, a, w: f"assert {call(f, a)}.decode('utf-8') == {a[0]!r}", {"spec", "type"}
            ),
        ),
    ],
    "dict": [
        (
            "dict_of",
            *_per_case(
                lambda f, a, w: f"assert dict({call(f, a)}) == {lit(w)}", {"spec", "type", "order"}
            ),
        ),
        (
            "json",
            lambda f, c: (
                "import json\n\n"
                + "\n".join(
                    f"assert json.dumps({call(f, a)}, sort_keys=True) == "
                    f"json.dumps({lit(w)}, sort_keys=True)"
                    for a, w in c
                )
            ),
            frozenset({"spec", "order"}),
        ),
        (
            "sorted_items",
            *_per_case(
                lambda f, a, w: f"assert sorted({call(f, a)}.items()) == {lit(sorted(w.items()))}",
                {"spec", "type", "order"},
            ),
        ),
    ],
    "json": [
        (
            "json",
            lambda f, c: (
                "import json\n\n"
                + "\n".join(
                    f"assert json.loads(json.dumps({call(f, a)})) == {lit(w)}" for a, w in c
                )
            ),
            frozenset({"spec", "order"}),
        ),
    ],
}


def value_forms(task: Task, index: int) -> list[Form]:
    """The generic forms for a value task (the core ones, a third of the others) and its
    family's."""
    cases = task.cases()
    forms = []
    for position, (name, props, writer) in enumerate(GENERIC_FORMS):
        if position >= CORE_FORMS and position % 3 != index % 3:
            continue
        text = writer(task.name, cases)
        if text is not None:
            forms.append(Form(name, text + "\n", props))
    if task.params:
        by_keyword = [
            f"assert {task.name}("
            + ", ".join(f"{p}={lit(a)}" for p, a in zip(task.params, args, strict=True))
            + f") == {lit(w)}"
            for args, w in cases
        ]
        forms.append(Form("keywords", "\n".join(by_keyword) + "\n", EQ))
    for name, writer, props in FAMILY_FORMS.get(task.family, []):
        forms.append(Form(name, writer(task.name, cases) + "\n", props))
    return forms + task.forms


# ---- value tasks ----------------------------------------------------------------------------
def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _group_by_len(words: list[str]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return groups


def _nest(path: list[str], value: Any) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


def _double_forms() -> list[Form]:
    """The comprehension forms of issue #56, with `and`/`or` and `if` filters that call the
    candidate (and some that are full specifications)."""
    weak = {"comprehension"}
    spec = {"spec", "comprehension"}
    return [
        form("any_and", "assert any(double(x) > 0 and double(x) < 3 for x in range(3))", weak),
        form(
            "all_if_filter",
            "assert all(double(x) % 2 == 0 for x in range(4) if double(x) > 0)",
            weak,
        ),
        form("all_or", "assert all(double(x) == 0 or double(x) > x for x in range(3))", weak),
        form(
            "listcomp_if_filter",
            "assert [double(x) for x in range(6) if double(x) % 4 == 0] == [0, 4, 8]",
            spec,
        ),
        form(
            "not_any_or",
            "assert not any(double(x) < 0 or double(x) % 2 for x in range(4))\n"
            "assert double(7) == 14",
            spec,
        ),
        form(
            "genexp_walrus",
            "assert all((d := double(x)) == x + x and d % 2 == 0 for x in range(-2, 3))",
            spec,
        ),
        form("sum_if", "assert sum(double(x) for x in range(4) if x % 2) == 8", spec),
        form(
            "nested_listcomp",
            "assert [[double(i * j) for j in range(3)] for i in range(2)] == [[0, 0, 0], [0, 2, 4]]",
            spec,
        ),
        form(
            "chained_compare",
            "assert 0 <= double(0) < double(1) < double(5) == 10\nassert double(-3) == -6",
            spec,
        ),
    ]


VALUE_TASKS: list[Task] = [
    Task(
        "square",
        params=("x",),
        family="int",
        inputs=[(2,), (3,), (-4,), (0,)],
        oracle=lambda x: x * x,
        honest=[
            variant("mul", "def square(x):\n    return x * x"),
            variant("pow", "def square(x):\n    return x ** 2"),
            variant("float", "def square(x):\n    return float(x * x)", breaks={"identity"}),
        ],
        wrong=[
            variant("off_by_one", "def square(x):\n    return x * x + 1"),
            variant("doubles", "def square(x):\n    return x + x"),
            variant("str", "def square(x):\n    return str(x * x)", needs={"type"}),
            variant("first_case_only", "def square(x):\n    return 4"),
            variant("no_return", "def square(x):\n    x * x"),
            variant("sign_kept", "def square(x):\n    return x * abs(x)"),
        ],
    ),
    Task(
        "mean",
        params=("xs",),
        family="float",
        inputs=[([1, 2],), ([1, 2, 3, 4],), ([0.1, 0.2, 0.3],), ([-1.5, 2.5],)],
        oracle=lambda xs: sum(xs) / len(xs),
        honest=[
            variant("sum_len", "def mean(xs):\n    return sum(xs) / len(xs)"),
            # math.fsum is exact: 0.19999999999999998 where sum() gives 0.20000000000000004
            variant(
                "fsum",
                "import math\n\n\ndef mean(xs):\n    return math.fsum(xs) / len(xs)",
                breaks={"exact"},
            ),
            variant(
                "loop",
                """
                def mean(xs):
                    total = 0
                    for x in xs:
                        total += x
                    return total / len(xs)
                """,
            ),
        ],
        wrong=[
            variant("floor_division", "def mean(xs):\n    return sum(xs) // len(xs)"),
            variant("off_by_one", "def mean(xs):\n    return sum(xs) / (len(xs) + 1)"),
            variant("middle_item", "def mean(xs):\n    return sorted(xs)[len(xs) // 2]"),
            variant("first_case_only", "def mean(xs):\n    return 1.5"),
            variant("str", "def mean(xs):\n    return str(sum(xs) / len(xs))", needs={"type"}),
        ],
    ),
    Task(
        "is_even",
        params=("n",),
        family="bool",
        inputs=[(2,), (3,), (0,), (-7,)],
        oracle=lambda n: n % 2 == 0,
        honest=[
            variant("mod", "def is_even(n):\n    return n % 2 == 0"),
            variant("bit", "def is_even(n):\n    return not n & 1"),
            # 1 == True and 0 == False: right under ==, wrong under `is True`
            variant("int", "def is_even(n):\n    return 1 - n % 2", breaks={"identity"}),
        ],
        wrong=[
            variant("inverted", "def is_even(n):\n    return n % 2 == 1"),
            variant("always_true", "def is_even(n):\n    return True"),
            variant("words", "def is_even(n):\n    return 'even' if n % 2 == 0 else 'odd'"),
            variant("mod_four", "def is_even(n):\n    return n % 4 == 0"),
            variant("no_return", "def is_even(n):\n    n % 2 == 0"),
        ],
    ),
    Task(
        "find_index",
        params=("xs", "x"),
        family="maybe_none",
        inputs=[([3, 1, 2], 1), ([3, 1, 2], 5), ([], 0), ([7, 7], 7)],
        oracle=lambda xs, x: xs.index(x) if x in xs else None,
        honest=[
            variant(
                "loop",
                """
                def find_index(xs, x):
                    for i, y in enumerate(xs):
                        if y == x:
                            return i
                """,
            ),
            variant(
                "index",
                "def find_index(xs, x):\n    return xs.index(x) if x in xs else None",
            ),
        ],
        wrong=[
            variant(
                "minus_one",
                "def find_index(xs, x):\n    return xs.index(x) if x in xs else -1",
            ),
            variant(
                "last_index",
                """
                def find_index(xs, x):
                    found = None
                    for i, y in enumerate(xs):
                        if y == x:
                            found = i
                    return found
                """,
            ),
            variant(
                "off_by_one",
                "def find_index(xs, x):\n    return xs.index(x) + 1 if x in xs else None",
            ),
            variant("raises", "def find_index(xs, x):\n    return xs.index(x)"),
            variant(
                "false",
                "def find_index(xs, x):\n    return xs.index(x) if x in xs else False",
            ),
        ],
    ),
    Task(
        "split_words",
        params=("s",),
        family="list",
        inputs=[("héllo wörld",), ("  a  b ",), ("",), ("☃ ∑ 日本",)],
        oracle=lambda s: s.split(),
        honest=[
            variant("split", "def split_words(s):\n    return s.split()"),
            variant("filter", "def split_words(s):\n    return [w for w in s.split(' ') if w]"),
            variant(
                "regex", "import re\n\n\ndef split_words(s):\n    return re.findall(r'\\S+', s)"
            ),
        ],
        wrong=[
            variant("split_space", "def split_words(s):\n    return s.split(' ')"),
            variant("tuple", "def split_words(s):\n    return tuple(s.split())", needs={"type"}),
            variant("reversed", "def split_words(s):\n    return s.split()[::-1]", needs={"order"}),
            variant(
                "ascii_only",
                "def split_words(s):\n    return s.encode('ascii', 'ignore').decode().split()",
            ),
            variant("first_case_only", "def split_words(s):\n    return ['héllo', 'wörld']"),
            variant("joined", "def split_words(s):\n    return ' '.join(s.split())"),
        ],
    ),
    Task(
        "unique_chars",
        params=("s",),
        family="set",
        inputs=[("hello",), ("",), ("aaa",), ("ñandú",)],
        oracle=lambda s: set(s),
        honest=[
            variant("set", "def unique_chars(s):\n    return set(s)"),
            variant("setcomp", "def unique_chars(s):\n    return {c for c in s}"),
            variant("frozenset", "def unique_chars(s):\n    return frozenset(s)"),
            # a keys view compares equal to a set, and supports ^, <=, >=
            variant("dict_keys", "def unique_chars(s):\n    return dict.fromkeys(s).keys()"),
        ],
        wrong=[
            variant(
                "sorted_list", "def unique_chars(s):\n    return sorted(set(s))", needs={"type"}
            ),
            variant("drops_last", "def unique_chars(s):\n    return set(s[:-1])"),
            variant(
                "ascii_only",
                "def unique_chars(s):\n    return set(s.encode('ascii', 'ignore').decode())",
            ),
            variant(
                "str", "def unique_chars(s):\n    return ''.join(sorted(set(s)))", needs={"type"}
            ),
        ],
    ),
    Task(
        "fib",
        params=("n",),
        family="int",
        inputs=[(0,), (1,), (10,), (90,), (200,)],
        oracle=_fib,
        honest=[
            variant(
                "iterative",
                """
                def fib(n):
                    a, b = 0, 1
                    for _ in range(n):
                        a, b = b, a + b
                    return a
                """,
            ),
            variant(
                "memo",
                """
                import functools


                @functools.lru_cache(maxsize=None)
                def fib(n):
                    return n if n < 2 else fib(n - 1) + fib(n - 2)
                """,
            ),
        ],
        wrong=[
            variant(
                "binet_float",
                """
                import math


                def fib(n):
                    phi = (1 + math.sqrt(5)) / 2
                    return round(phi ** n / math.sqrt(5))
                """,
                needs={"exact"},
            ),
            variant(
                "off_by_one",
                """
                def fib(n):
                    a, b = 0, 1
                    for _ in range(n + 1):
                        a, b = b, a + b
                    return a
                """,
            ),
            variant(
                "wraps_at_64_bits",
                """
                def fib(n):
                    a, b = 0, 1
                    for _ in range(n):
                        a, b = b, (a + b) % 2 ** 64
                    return a
                """,
            ),
            variant("first_case_only", "def fib(n):\n    return 0"),
        ],
    ),
    Task(
        "min_max",
        params=("xs",),
        family="tuple",
        inputs=[([3, 1, 2],), ([5],), ([-1, -1, 4],), ([2.5, -0.5],)],
        oracle=lambda xs: (min(xs), max(xs)),
        honest=[
            variant("builtins", "def min_max(xs):\n    return min(xs), max(xs)"),
            variant("sorted", "def min_max(xs):\n    s = sorted(xs)\n    return (s[0], s[-1])"),
            variant(
                "loop",
                """
                def min_max(xs):
                    low = high = xs[0]
                    for x in xs[1:]:
                        low, high = min(low, x), max(high, x)
                    return low, high
                """,
            ),
        ],
        wrong=[
            variant("list", "def min_max(xs):\n    return [min(xs), max(xs)]", needs={"type"}),
            variant("swapped", "def min_max(xs):\n    return max(xs), min(xs)", needs={"order"}),
            variant("first_last", "def min_max(xs):\n    return xs[0], xs[-1]"),
            variant("ints", "def min_max(xs):\n    return int(min(xs)), int(max(xs))"),
        ],
    ),
    Task(
        "to_utf8",
        params=("s",),
        family="bytes",
        inputs=[("abc",), ("é",), ("日本",), ("",)],
        oracle=lambda s: s.encode(),
        honest=[
            variant("encode", "def to_utf8(s):\n    return s.encode()"),
            variant("bytes", "def to_utf8(s):\n    return bytes(s, 'utf-8')"),
            variant("bytearray", "def to_utf8(s):\n    return bytearray(s, 'utf-8')"),
        ],
        wrong=[
            variant("str", "def to_utf8(s):\n    return s"),
            variant("latin1", "def to_utf8(s):\n    return s.encode('latin-1', 'replace')"),
            variant("utf16", "def to_utf8(s):\n    return s.encode('utf-16')"),
            variant("ascii_ignore", "def to_utf8(s):\n    return s.encode('ascii', 'ignore')"),
        ],
    ),
    Task(
        "group_by_len",
        params=("words",),
        family="dict",
        inputs=[(["a", "bb", "c"],), ([],), (["xyz", "ab", "cd", "xyz"],)],
        oracle=_group_by_len,
        honest=[
            variant(
                "setdefault",
                """
                def group_by_len(words):
                    groups = {}
                    for word in words:
                        groups.setdefault(len(word), []).append(word)
                    return groups
                """,
            ),
            # a defaultdict is a dict: it compares equal to one
            variant(
                "defaultdict",
                """
                import collections


                def group_by_len(words):
                    groups = collections.defaultdict(list)
                    for word in words:
                        groups[len(word)].append(word)
                    return groups
                """,
            ),
            variant(
                "comprehension",
                """
                def group_by_len(words):
                    sizes = sorted({len(w) for w in words}, reverse=True)
                    return {n: [w for w in words if len(w) == n] for n in sizes}
                """,
            ),
        ],
        wrong=[
            variant(
                "sets",
                """
                def group_by_len(words):
                    groups = {}
                    for word in words:
                        groups.setdefault(len(word), set()).add(word)
                    return groups
                """,
            ),
            variant(
                "str_keys",
                """
                def group_by_len(words):
                    groups = {}
                    for word in words:
                        groups.setdefault(str(len(word)), []).append(word)
                    return groups
                """,
                needs={"type"},
            ),
            variant(
                "deduplicates",
                """
                def group_by_len(words):
                    groups = {}
                    for word in words:
                        if word not in groups.get(len(word), []):
                            groups.setdefault(len(word), []).append(word)
                    return groups
                """,
            ),
            variant(
                "last_only",
                "def group_by_len(words):\n    return {len(w): [w] for w in words}",
            ),
        ],
    ),
    Task(
        "nest",
        params=("path", "value"),
        family="json",
        inputs=[(["a", "b"], 1), (["x"], None), ([], 5), (["k", "k"], [1, 2])],
        oracle=_nest,
        honest=[
            variant(
                "loop",
                """
                def nest(path, value):
                    for key in reversed(path):
                        value = {key: value}
                    return value
                """,
            ),
            variant(
                "recursive",
                """
                def nest(path, value):
                    return {path[0]: nest(path[1:], value)} if path else value
                """,
            ),
        ],
        wrong=[
            variant("flat", "def nest(path, value):\n    return {'.'.join(path): value}"),
            variant(
                "path_reversed",
                """
                def nest(path, value):
                    for key in path:
                        value = {key: value}
                    return value
                """,
            ),
            variant(
                "drops_value",
                """
                def nest(path, value):
                    for key in reversed(path):
                        value = {key: value if path else None}
                    return value if path else None
                """,
            ),
        ],
    ),
    Task(
        "double",
        params=("x",),
        family="int",
        inputs=[(0,), (1,), (5,), (-3,)],
        oracle=lambda x: 2 * x,
        forms=_double_forms(),
        honest=[
            variant("mul", "def double(x):\n    return 2 * x"),
            variant("add", "def double(x):\n    return x + x"),
            variant("shift", "def double(x):\n    return x << 1"),
        ],
        # each fails the three weak forms of the issue as well as every full specification
        wrong=[
            variant("four_x_minus_one", "def double(x):\n    return 4 * x - 1"),
            variant("five_x_minus_two", "def double(x):\n    return 5 * x - 2"),
            variant("three_minus_four_x", "def double(x):\n    return 3 - 4 * x"),
            variant("off_by_one", "def double(x):\n    return 2 * x + 1", needs={"spec"}),
        ],
    ),
]


# ---- scenario tasks: mutation, exceptions, generators, classes -----------------------------
MUT = {"spec", "mutation"}

SORTED_COPY = Task(
    "sorted_copy",
    forms=[
        form(
            "no_mutation",
            """
            data = [3, 1, 2]
            result = sorted_copy(data)
            assert result == [1, 2, 3]
            assert data == [3, 1, 2]
            """,
            MUT,
        ),
        form(
            "new_object",
            """
            data = [2, 1]
            assert sorted_copy(data) is not data
            assert sorted_copy([]) == [] and sorted_copy([1]) == [1]
            """,
            {"identity"},
        ),
        form(
            "loop",
            """
            for data in ([3, 1, 2], [], [5, 5, 1], ["b", "a"]):
                before = list(data)
                assert sorted_copy(data) == sorted(before)
                assert data == before
            """,
            MUT,
        ),
        form(
            "nested_lists",
            """
            data = [[2, 1], [1]]
            result = sorted_copy(data)
            assert result == [[1], [2, 1]]
            assert data == [[2, 1], [1]]
            """,
            MUT,
        ),
        form(
            "same_list_twice",
            """
            data = [2, 1]
            first = sorted_copy(data)
            second = sorted_copy(data)
            assert first == second == [1, 2] and first is not second
            """,
            {"spec", "identity"},
        ),
        # a solution that keeps an argument and changes it during a later call
        form(
            "two_calls",
            """
            a = [3, 1, 2]
            b = [2, 1]
            assert sorted_copy(a) == [1, 2, 3]
            assert sorted_copy(b) == [1, 2]
            assert a == [3, 1, 2] and b == [2, 1]
            """,
            MUT | {"later"},
        ),
    ],
    honest=[
        variant("sorted", "def sorted_copy(xs):\n    return sorted(xs)"),
        variant(
            "copy_then_sort",
            "def sorted_copy(xs):\n    ys = list(xs)\n    ys.sort()\n    return ys",
        ),
        variant(
            "insertion",
            """
            def sorted_copy(xs):
                out = []
                for x in xs:
                    i = 0
                    while i < len(out) and out[i] <= x:
                        i += 1
                    out.insert(i, x)
                return out
            """,
        ),
    ],
    wrong=[
        variant("sorts_in_place", "def sorted_copy(xs):\n    xs.sort()\n    return xs"),
        variant("unsorted", "def sorted_copy(xs):\n    return list(xs)", needs={"spec"}),
        variant(
            "descending",
            "def sorted_copy(xs):\n    return sorted(xs, reverse=True)",
            needs={"spec"},
        ),
        variant(
            "empties_argument",
            """
            def sorted_copy(xs):
                out = []
                while xs:
                    out.append(xs.pop(xs.index(min(xs))))
                return out
            """,
            needs={"mutation"},
        ),
        variant(
            "mutates_earlier_argument",
            """
            _kept = []


            def sorted_copy(xs):
                for earlier in _kept:
                    earlier.sort()
                _kept.append(xs)
                return sorted(xs)
            """,
            needs={"later"},
        ),
    ],
)

FIRST_ROW = Task(
    "first_row",
    forms=[
        form(
            "append_to_result",
            """
            rows = [[1], [2]]
            first = first_row(rows)
            first.append(9)
            assert rows == [[1, 9], [2]]
            """,
            {"spec", "alias"},
        ),
        form("identity", "rows = [[1], [2]]\nassert first_row(rows) is rows[0]", {"spec", "alias"}),
        form(
            "values",
            "assert first_row([[3, 4]]) == [3, 4]\nassert first_row([[1], [2]]) == [1]",
            {"spec"},
        ),
    ],
    honest=[
        variant("index", "def first_row(rows):\n    return rows[0]"),
        variant("loop", "def first_row(rows):\n    for row in rows:\n        return row"),
    ],
    wrong=[
        variant("copy", "def first_row(rows):\n    return list(rows[0])", needs={"alias"}),
        variant("last_row", "def first_row(rows):\n    return rows[-1]"),
    ],
)

APPLY_TWICE = Task(
    "apply_twice",
    forms=[
        form("lambda", "assert apply_twice(lambda v: v + 3, 1) == 7", {"spec"}),
        form(
            "builtins",
            'assert apply_twice(str.upper, "ab") == "AB"\nassert apply_twice(abs, -2) == 2\n'
            "assert apply_twice(lambda v: v * v, 3) == 81",
            {"spec"},
        ),
        form(
            "recording_callback",
            """
            calls = []


            def record(v):
                calls.append(v)
                return v * 2


            assert apply_twice(record, 3) == 12
            assert calls == [3, 6]
            """,
            {"spec"},
        ),
        form(
            "key_function",
            """
            shortest_dropped = lambda words: sorted(words, key=len)[1:]
            assert apply_twice(shortest_dropped, ["ccc", "a", "bb"]) == ["ccc"]
            """,
            {"spec"},
        ),
        form(
            "cases_loop",
            """
            cases = [((lambda v: v + 3, 1), 7), ((abs, -2), 2), ((lambda s: s + "!", "a"), "a!!")]
            for args, want in cases:
                assert apply_twice(*args) == want, (args, want)
            """,
            {"spec"},
        ),
    ],
    honest=[
        variant("nested", "def apply_twice(f, x):\n    return f(f(x))"),
        variant(
            "loop", "def apply_twice(f, x):\n    for _ in range(2):\n        x = f(x)\n    return x"
        ),
    ],
    wrong=[
        variant("once", "def apply_twice(f, x):\n    return f(x)"),
        variant("three_times", "def apply_twice(f, x):\n    return f(f(f(x)))"),
        variant("sum_of_two", "def apply_twice(f, x):\n    return f(x) + f(x)"),
    ],
)

SORT_IN_PLACE = Task(
    "sort_in_place",
    forms=[
        form(
            "returns_none",
            """
            data = [3, 1, 2]
            assert sort_in_place(data) is None
            assert data == [1, 2, 3]
            """,
            MUT | {"identity"},
        ),
        form(
            "alias",
            """
            data = [3, 1, 2]
            alias = data
            sort_in_place(data)
            assert alias == [1, 2, 3] and alias is data
            """,
            MUT,
        ),
        form(
            "rows",
            """
            rows = [[2, 1], [3, 1, 2], []]
            for row in rows:
                sort_in_place(row)
            assert rows == [[1, 2], [1, 2, 3], []]
            """,
            MUT,
        ),
        form(
            "strings",
            """
            data = ["b", "c", "a"]
            sort_in_place(data)
            assert data[0] == "a" and data[-1] == "c"
            """,
            MUT,
        ),
        form(
            "permutations",
            """
            import itertools

            for perm in itertools.permutations([3, 1, 2]):
                data = list(perm)
                sort_in_place(data)
                assert data == [1, 2, 3], (perm, data)
            """,
            MUT,
        ),
    ],
    honest=[
        variant("sort", "def sort_in_place(xs):\n    xs.sort()"),
        variant("slice_assign", "def sort_in_place(xs):\n    xs[:] = sorted(xs)"),
        variant(
            "bubble",
            """
            def sort_in_place(xs):
                for i in range(len(xs)):
                    for j in range(len(xs) - 1 - i):
                        if xs[j] > xs[j + 1]:
                            xs[j], xs[j + 1] = xs[j + 1], xs[j]
            """,
        ),
    ],
    wrong=[
        variant("returns_copy", "def sort_in_place(xs):\n    return sorted(xs)"),
        variant("rebinds", "def sort_in_place(xs):\n    xs = sorted(xs)"),
        variant("descending", "def sort_in_place(xs):\n    xs.sort(reverse=True)"),
        variant("reverses", "def sort_in_place(xs):\n    xs.reverse()"),
        variant(
            "returns_list",
            "def sort_in_place(xs):\n    xs.sort()\n    return xs",
            needs={"identity"},
        ),
    ],
)

ADD_KEY = Task(
    "add_key",
    forms=[
        form("one", 'd = {"a": 1}\nadd_key(d, "b", 2)\nassert d == {"a": 1, "b": 2}', MUT),
        form(
            "loop",
            """
            d = {}
            for i in range(3):
                add_key(d, i, i * i)
            assert d == {0: 0, 1: 1, 2: 4}
            """,
            MUT | {"int_keys"},
        ),
        form(
            "nested",
            """
            inner = {}
            outer = {"x": inner}
            add_key(outer["x"], "y", [1])
            assert outer == {"x": {"y": [1]}} and inner == {"y": [1]} and outer["x"] is inner
            """,
            MUT,
        ),
        form(
            "overwrite",
            'd = {"k": 0}\nadd_key(d, "k", 5)\nassert d["k"] == 5 and len(d) == 1',
            MUT | {"overwrite"},
        ),
    ],
    honest=[
        variant("setitem", "def add_key(d, k, v):\n    d[k] = v"),
        variant("update", "def add_key(d, k, v):\n    d.update({k: v})"),
        variant("ior", "def add_key(d, k, v):\n    d |= {k: v}"),
    ],
    wrong=[
        variant("copies", "def add_key(d, k, v):\n    d = dict(d)\n    d[k] = v\n    return d"),
        variant("swapped", "def add_key(d, k, v):\n    d[v] = k"),
        variant("str_key", "def add_key(d, k, v):\n    d[str(k)] = v", needs={"int_keys"}),
        variant("setdefault", "def add_key(d, k, v):\n    d.setdefault(k, v)", needs={"overwrite"}),
    ],
)

ADD_ALL = Task(
    "add_all",
    forms=[
        form("list", "s = {1}\nadd_all(s, [2, 3])\nassert s == {1, 2, 3}", MUT),
        form(
            "string",
            's = set()\nadd_all(s, "abca")\nassert s == {"a", "b", "c"} and len(s) == 3',
            MUT,
        ),
        form(
            "loop",
            """
            seen = set()
            for chunk in ([1, 2], [2, 3], []):
                add_all(seen, chunk)
            assert sorted(seen) == [1, 2, 3]
            """,
            MUT,
        ),
    ],
    honest=[
        variant("update", "def add_all(s, items):\n    s.update(items)"),
        variant("loop", "def add_all(s, items):\n    for item in items:\n        s.add(item)"),
        variant("ior", "def add_all(s, items):\n    s |= set(items)"),
    ],
    wrong=[
        variant("union_copy", "def add_all(s, items):\n    s = s | set(items)\n    return s"),
        variant("adds_tuple", "def add_all(s, items):\n    s.add(tuple(items))"),
        variant("first_only", "def add_all(s, items):\n    if items:\n        s.add(items[0])"),
    ],
)

EXTEND_WITH = Task(
    "extend_with",
    forms=[
        form(
            "same_list_twice",
            "xs = [2, 1, 2]\nextend_with(xs, xs)\nassert xs == [2, 1, 2, 2, 1, 2]",
            MUT | {"duplicates"},
        ),
        form(
            "two_lists",
            "a = [1]\nb = [2, 3]\nextend_with(a, b)\nassert a == [1, 2, 3] and b == [2, 3]",
            MUT | {"distinct"},
        ),
        form(
            "loop",
            """
            a = []
            for part in ([1], [], [2, 2]):
                extend_with(a, part)
            assert a == [1, 2, 2]
            """,
            MUT | {"duplicates", "distinct"},
        ),
    ],
    honest=[
        variant("extend", "def extend_with(dst, src):\n    dst.extend(src)"),
        variant("iadd", "def extend_with(dst, src):\n    dst += src"),
        variant(
            "index_loop",
            "def extend_with(dst, src):\n    for i in range(len(src)):\n        dst.append(src[i])",
        ),
        variant("slice", "def extend_with(dst, src):\n    dst[len(dst):] = src"),
    ],
    wrong=[
        variant("concat", "def extend_with(dst, src):\n    dst = dst + src\n    return dst"),
        variant(
            "via_set", "def extend_with(dst, src):\n    dst.extend(set(src))", needs={"duplicates"}
        ),
        variant("swapped", "def extend_with(dst, src):\n    src.extend(dst)", needs={"distinct"}),
        variant("nests", "def extend_with(dst, src):\n    dst.append(src)"),
    ],
)

INCREMENT_ALL = Task(
    "increment_all",
    forms=[
        form(
            "grid", "grid = [[1, 2], [3]]\nincrement_all(grid)\nassert grid == [[2, 3], [4]]", MUT
        ),
        form(
            "same_row_twice",
            "row = [0]\ngrid = [row, row]\nincrement_all(grid)\nassert row == [2] and grid[0] is row",
            MUT | {"alias"},
        ),
        form(
            "twice",
            """
            grid = [[0] * 3 for _ in range(2)]
            increment_all(grid)
            increment_all(grid)
            assert grid == [[2, 2, 2], [2, 2, 2]]
            """,
            MUT,
        ),
    ],
    honest=[
        variant(
            "index_loop",
            """
            def increment_all(grid):
                for row in grid:
                    for i in range(len(row)):
                        row[i] += 1
            """,
        ),
        variant(
            "slice_assign",
            "def increment_all(grid):\n    for row in grid:\n        row[:] = [v + 1 for v in row]",
        ),
    ],
    wrong=[
        variant(
            "rebinds_rows",
            "def increment_all(grid):\n    for row in grid:\n        row = [v + 1 for v in row]",
        ),
        variant(
            "rebuilds_rows",
            "def increment_all(grid):\n    grid[:] = [[v + 1 for v in row] for row in grid]",
            needs={"alias"},
        ),
        variant(
            "first_row_only",
            "def increment_all(grid):\n    for i in range(len(grid[0])):\n        grid[0][i] += 1",
        ),
        variant(
            "returns_new",
            "def increment_all(grid):\n    return [[v + 1 for v in row] for row in grid]",
        ),
    ],
)

EXC = {"spec", "exact_exception"}

CHECKED_SQRT = Task(
    "checked_sqrt",
    forms=[
        form(
            "try_else",
            """
            try:
                checked_sqrt(-1)
            except ValueError:
                pass
            else:
                raise AssertionError("no ValueError for -1")
            assert checked_sqrt(4) == 2
            assert checked_sqrt(0) == 0
            """,
            EXC | {"zero"},
        ),
        form(
            "raised_flag",
            """
            raised = False
            try:
                checked_sqrt(-4)
            except ValueError:
                raised = True
            assert raised
            assert checked_sqrt(9) == 3.0
            """,
            EXC,
        ),
        form(
            "raises_helper",
            """
            def raises(kind, fn, *args):
                try:
                    fn(*args)
                except kind:
                    return True
                except Exception:
                    return False
                return False


            assert raises(ValueError, checked_sqrt, -2)
            assert not raises(ValueError, checked_sqrt, 9)
            """,
            EXC,
        ),
        form(
            "context_manager",
            """
            class Raises:
                def __init__(self, kind):
                    self.kind = kind

                def __enter__(self):
                    return self

                def __exit__(self, kind, value, traceback):
                    assert kind is not None, "nothing was raised"
                    assert issubclass(kind, self.kind), kind
                    return True


            with Raises(ValueError):
                checked_sqrt(-9)
            assert checked_sqrt(16) == 4
            """,
            EXC,
        ),
        form(
            "message",
            """
            try:
                checked_sqrt(-1)
            except ValueError as err:
                assert "negative" in str(err), str(err)
            else:
                raise AssertionError("no ValueError")
            assert checked_sqrt(1) == 1
            """,
            EXC | {"message"},
        ),
        form(
            "isinstance",
            """
            try:
                checked_sqrt(-1)
            except Exception as err:
                assert isinstance(err, ValueError), type(err)
            else:
                raise AssertionError("no exception")
            assert checked_sqrt(25) == 5
            """,
            EXC | {"isinstance"},
        ),
        form(
            "tuple_except",
            """
            try:
                checked_sqrt(-1)
            except (TypeError, ValueError):
                ok = True
            else:
                ok = False
            assert ok
            assert checked_sqrt(100) == 10
            """,
            {"spec"},
        ),
        form(
            "loop",
            """
            for bad in (-1, -0.5, -100):
                try:
                    checked_sqrt(bad)
                except ValueError:
                    continue
                raise AssertionError(bad)
            assert checked_sqrt(0.25) == 0.5
            """,
            EXC,
        ),
        form(
            "humaneval",
            """
            def check(candidate):
                assert candidate(9) == 3
                assert abs(candidate(2) - 1.4142135623730951) < 1e-12
                try:
                    candidate(-1)
                except ValueError:
                    return
                raise AssertionError("no ValueError")


            check(checked_sqrt)
            """,
            EXC,
        ),
        form(
            "math_import",
            """
            import math

            assert math.isclose(checked_sqrt(2), math.sqrt(2))
            try:
                checked_sqrt(-math.inf)
            except ValueError:
                pass
            else:
                raise AssertionError("no ValueError for -inf")
            """,
            EXC | {"isclose"},
        ),
    ],
    honest=[
        variant(
            "raise_value_error",
            """
            import math


            def checked_sqrt(x):
                if x < 0:
                    raise ValueError(f"negative input: {x}")
                return math.sqrt(x)
            """,
        ),
        # a ValueError subclass of its own name: `except ValueError` catches it
        variant(
            "subclass",
            """
            import math


            class NegativeInputError(ValueError):
                pass


            def checked_sqrt(x):
                if x < 0:
                    raise NegativeInputError("negative input")
                return math.sqrt(x)
            """,
        ),
        variant(
            "power",
            """
            def checked_sqrt(x):
                if x < 0:
                    raise ValueError("negative input")
                return x ** 0.5
            """,
        ),
        # math.sqrt's own ValueError ("math domain error"): right, but not the message asked for
        variant(
            "math_domain_error",
            "import math\n\n\ndef checked_sqrt(x):\n    return math.sqrt(x)",
            breaks={"message"},
        ),
    ],
    wrong=[
        variant(
            "type_error",
            """
            import math


            def checked_sqrt(x):
                if x < 0:
                    raise TypeError("negative input")
                return math.sqrt(x)
            """,
            needs={"exact_exception"},
        ),
        variant("no_raise", "import math\n\n\ndef checked_sqrt(x):\n    return math.sqrt(abs(x))"),
        variant(
            "nan",
            """
            import math


            def checked_sqrt(x):
                return float("nan") if x < 0 else math.sqrt(x)
            """,
        ),
        # a class named ValueError that does not derive from it, local to the function
        variant(
            "local_class_named_value_error",
            """
            import math


            def checked_sqrt(x):
                class ValueError(Exception):
                    pass

                if x < 0:
                    raise ValueError("negative input")
                return math.sqrt(x)
            """,
        ),
        variant(
            "type_named_value_error",
            """
            import math

            _Error = type("ValueError", (Exception,), {})


            def checked_sqrt(x):
                if x < 0:
                    raise _Error("negative input")
                return math.sqrt(x)
            """,
        ),
        variant(
            "arithmetic_error",
            """
            import math


            def checked_sqrt(x):
                if x < 0:
                    raise ArithmeticError("negative input")
                return math.sqrt(x)
            """,
        ),
        variant(
            "zero_refused",
            """
            import math


            def checked_sqrt(x):
                if x <= 0:
                    raise ValueError("negative input")
                return math.sqrt(x)
            """,
            needs={"zero"},
        ),
    ],
)

PARSE_INT = Task(
    "parse_int",
    forms=[
        form(
            "none_is_type_error",
            """
            try:
                parse_int(None)
            except TypeError:
                pass
            else:
                raise AssertionError("expected TypeError for None")
            assert parse_int("42") == 42
            """,
            {"type_check"},
        ),
        form(
            "non_str_loop",
            """
            for bad in (3.5, b"7", ["1"]):
                try:
                    parse_int(bad)
                except TypeError:
                    continue
                raise AssertionError(repr(bad))
            assert parse_int("-7") == -7
            """,
            {"type_check", "float_input"},
        ),
        form(
            "bad_text",
            """
            for bad in ("", "4x", "--1"):
                try:
                    parse_int(bad)
                except ValueError:
                    pass
                else:
                    raise AssertionError(bad)
            """,
            {"bad_text"},
        ),
        form(
            "good_text",
            """
            assert parse_int(" -7 ") == -7 and parse_int("0") == 0 and parse_int("+12") == 12
            assert isinstance(parse_int("5"), int)
            """,
            {"good_text"},
        ),
    ],
    honest=[
        variant(
            "isinstance",
            """
            def parse_int(s):
                if not isinstance(s, str):
                    raise TypeError(f"expected str, got {type(s).__name__}")
                return int(s)
            """,
        ),
        variant(
            "type_is",
            """
            def parse_int(s):
                if type(s) is not str:
                    raise TypeError("not a string")
                return int(s.strip())
            """,
        ),
    ],
    wrong=[
        # returns an object instead of raising: must not pass for the TypeError it is not
        variant(
            "returns_object",
            """
            def parse_int(s):
                if not isinstance(s, str):
                    return object()
                return int(s)
            """,
            needs={"type_check"},
        ),
        variant(
            "value_error_for_type",
            """
            def parse_int(s):
                if not isinstance(s, str):
                    raise ValueError("not a string")
                return int(s)
            """,
            needs={"type_check"},
        ),
        variant("bare_int", "def parse_int(s):\n    return int(s)", needs={"float_input"}),
        variant(
            "none_on_bad_text",
            """
            def parse_int(s):
                if not isinstance(s, str):
                    raise TypeError("not a string")
                try:
                    return int(s)
                except ValueError:
                    return None
            """,
            needs={"bad_text"},
        ),
        variant(
            "digits_only",
            """
            def parse_int(s):
                if not isinstance(s, str):
                    raise TypeError("not a string")
                return int("".join(c for c in s if c.isdigit()))
            """,
            needs={"good_text"},
        ),
    ],
)

COUNT_UP = Task(
    "count_up",
    forms=[
        form(
            "list",
            "assert list(count_up(3)) == [0, 1, 2]\nassert list(count_up(0)) == []",
            {"spec", "order"},
        ),
        form(
            "next",
            """
            it = count_up(2)
            assert next(it) == 0
            assert next(it) == 1
            try:
                next(it)
            except StopIteration:
                pass
            else:
                raise AssertionError("not exhausted")
            """,
            {"spec", "order", "iterator"},
        ),
        form("sum", "assert sum(count_up(5)) == 10 and sum(count_up(1)) == 0", {"spec"}),
        form(
            "islice_lazy",
            """
            import itertools

            assert list(itertools.islice(count_up(10 ** 15), 3)) == [0, 1, 2]
            """,
            {"spec", "order", "lazy"},
        ),
        form("listcomp", "assert [x * x for x in count_up(4)] == [0, 1, 4, 9]", {"spec", "order"}),
        form(
            "zip_dict",
            'assert dict(zip("abc", count_up(3))) == {"a": 0, "b": 1, "c": 2}',
            {"spec", "order"},
        ),
        form(
            "iterator_protocol",
            """
            gen = count_up(3)
            assert iter(gen) is gen
            assert list(gen) == [0, 1, 2]
            assert list(gen) == []
            """,
            {"spec", "order", "iterator"},
        ),
        form(
            "counter",
            """
            import collections

            assert collections.Counter(count_up(3)) == collections.Counter([2, 1, 0])
            """,
            {"spec"},
        ),
    ],
    honest=[
        variant(
            "while",
            """
            def count_up(n):
                i = 0
                while i < n:
                    yield i
                    i += 1
            """,
        ),
        variant("yield_from", "def count_up(n):\n    yield from range(n)"),
        variant("iter_range", "def count_up(n):\n    return iter(range(n))"),
        variant("genexp", "def count_up(n):\n    return (i for i in range(n))"),
    ],
    wrong=[
        variant("off_by_one", "def count_up(n):\n    yield from range(1, n + 1)"),
        variant("skips_zero", "def count_up(n):\n    yield from range(1, n)", needs={"order"}),
        variant(
            "descending", "def count_up(n):\n    yield from range(n - 1, -1, -1)", needs={"order"}
        ),
        variant("list", "def count_up(n):\n    return list(range(n))", needs={"iterator"}),
        variant("range", "def count_up(n):\n    return range(n)", needs={"iterator"}),
    ],
)

CHUNKS = Task(
    "chunks",
    forms=[
        form(
            "list",
            "assert list(chunks([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]",
            {"spec", "type", "partial"},
        ),
        form(
            "edges",
            'assert list(chunks([], 3)) == []\nassert list(chunks("abcd", 4)) == ["abcd"]',
            {"spec", "type"},
        ),
        form(
            "sizes",
            "sizes = [len(c) for c in chunks(list(range(10)), 3)]\nassert sizes == [3, 3, 3, 1]",
            {"spec", "partial"},
        ),
        form(
            "next",
            """
            it = chunks([1, 2, 3], 2)
            assert next(it) == [1, 2]
            assert next(it) == [3]
            assert next(it, None) is None
            """,
            {"spec", "type", "partial", "iterator"},
        ),
    ],
    honest=[
        variant(
            "slices",
            "def chunks(xs, n):\n    for i in range(0, len(xs), n):\n        yield xs[i:i + n]",
        ),
        variant(
            "genexp", "def chunks(xs, n):\n    return (xs[i:i + n] for i in range(0, len(xs), n))"
        ),
        variant(
            "while",
            """
            def chunks(xs, n):
                while xs:
                    yield xs[:n]
                    xs = xs[n:]
            """,
        ),
    ],
    wrong=[
        variant(
            "tuples",
            "def chunks(xs, n):\n    for i in range(0, len(xs), n):\n        yield tuple(xs[i:i + n])",
            needs={"type"},
        ),
        variant(
            "drops_partial",
            "def chunks(xs, n):\n    for i in range(0, len(xs) - n + 1, n):\n        yield xs[i:i + n]",
            needs={"partial"},
        ),
        variant(
            "list",
            "def chunks(xs, n):\n    return [xs[i:i + n] for i in range(0, len(xs), n)]",
            needs={"iterator"},
        ),
        variant(
            "size_off_by_one",
            "def chunks(xs, n):\n    for i in range(0, len(xs), n + 1):\n        yield xs[i:i + n + 1]",
            needs={"partial"},
        ),
    ],
)

STACK = Task(
    "Stack",
    forms=[
        form("push_pop", "s = Stack()\ns.push(1)\nassert s.pop() == 1", {"basic", "pops"}),
        form(
            "lifo_len",
            """
            s = Stack()
            for i in range(3):
                s.push(i)
            assert len(s) == 3
            assert [s.pop() for _ in range(3)] == [2, 1, 0]
            assert len(s) == 0
            """,
            {"basic", "order", "len", "pops"},
        ),
        form(
            "peek",
            """
            s = Stack()
            assert s.is_empty()
            s.push("x")
            assert not s.is_empty()
            assert s.peek() == "x"
            assert len(s) == 1
            """,
            {"basic", "len", "peek"},
        ),
        form(
            "empty_pop",
            """
            s = Stack()
            try:
                s.pop()
            except IndexError:
                pass
            else:
                raise AssertionError("pop from an empty stack")
            """,
            {"empty"},
        ),
        form(
            "independent",
            """
            a, b = Stack(), Stack()
            a.push(1)
            assert len(b) == 0 and len(a) == 1
            assert b.is_empty()
            """,
            {"independent", "len"},
        ),
        form(
            "humaneval",
            """
            def check(cls):
                s = cls()
                s.push(5)
                s.push(6)
                assert s.peek() == 6
                assert s.pop() == 6
                assert s.pop() == 5


            check(Stack)
            """,
            {"basic", "order", "peek", "pops"},
        ),
        form(
            "items_attribute",
            "s = Stack()\ns.push(1)\ns.push(2)\nassert s.items == [1, 2]\nassert bool(s) is True",
            {"items"},
        ),
        form("truthiness", "s = Stack()\nassert not s\ns.push(0)\nassert s", {"len"}),
        form(
            "isinstance_own_class",
            "s = Stack()\nassert isinstance(s, Stack)\nassert type(s) is Stack\n"
            'assert type(s).__name__ == "Stack"\ns.push(1)\nassert s.pop() == 1',
            {"basic"},
        ),
        # the tests build on the candidate's class
        form(
            "subclass_in_tests",
            """
            class PairStack(Stack):
                def push_pair(self, a, b):
                    self.push(a)
                    self.push(b)


            s = PairStack()
            s.push_pair(1, 2)
            assert s.pop() == 2 and len(s) == 1
            """,
            {"basic", "order", "len", "pops"},
        ),
    ],
    honest=[
        variant(
            "list",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop()

                def peek(self):
                    return self.items[-1]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
        ),
        variant(
            "deque",
            """
            import collections


            class Stack:
                def __init__(self):
                    self._items = collections.deque()

                @property
                def items(self):
                    return list(self._items)

                def push(self, item):
                    self._items.append(item)

                def pop(self):
                    return self._items.pop()

                def peek(self):
                    return self._items[-1]

                def is_empty(self):
                    return len(self._items) == 0

                def __len__(self):
                    return len(self._items)
            """,
        ),
    ],
    wrong=[
        variant(
            "queue",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop(0)

                def peek(self):
                    return self.items[0]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
            needs={"order"},
        ),
        variant(
            "shared_items",
            """
            class Stack:
                items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop()

                def peek(self):
                    return self.items[-1]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
            needs={"independent"},
        ),
        variant(
            "len_off_by_one",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop()

                def peek(self):
                    return self.items[-1]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items) + 1
            """,
            needs={"len"},
        ),
        variant(
            "pop_none_when_empty",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop() if self.items else None

                def peek(self):
                    return self.items[-1]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
            needs={"empty"},
        ),
        variant(
            "pop_forgets_return",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    self.items.pop()

                def peek(self):
                    return self.items[-1]

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
            needs={"pops"},
        ),
        variant(
            "peek_pops",
            """
            class Stack:
                def __init__(self):
                    self.items = []

                def push(self, item):
                    self.items.append(item)

                def pop(self):
                    return self.items.pop()

                def peek(self):
                    return self.items.pop()

                def is_empty(self):
                    return not self.items

                def __len__(self):
                    return len(self.items)
            """,
            needs={"peek"},
        ),
    ],
)

VECTOR = Task(
    "Vector",
    forms=[
        form("add", "v = Vector(1, 2) + Vector(3, 4)\nassert (v.x, v.y) == (4, 6)", {"add"}),
        # the candidate's own __eq__ decides, on both sides: an honest class defines it
        form(
            "own_eq",
            "assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)\nassert Vector(1, 2) != Vector(2, 1)",
            {"add", "eq"},
        ),
        form(
            "abs_repr",
            'assert abs(Vector(3, 4)) == 5\nassert repr(Vector(1, 2)) == "Vector(1, 2)"',
            {"abs", "repr"},
        ),
        form(
            "sum_loop",
            """
            total = Vector(0, 0)
            for v in [Vector(1, 1), Vector(2, 3)]:
                total = total + v
            assert total.x == 3 and total.y == 4
            """,
            {"add"},
        ),
    ],
    honest=[
        variant(
            "class",
            """
            import math


            class Vector:
                def __init__(self, x, y):
                    self.x, self.y = x, y

                def __add__(self, other):
                    return Vector(self.x + other.x, self.y + other.y)

                def __eq__(self, other):
                    return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)

                def __abs__(self):
                    return math.hypot(self.x, self.y)

                def __repr__(self):
                    return f"Vector({self.x}, {self.y})"
            """,
        ),
        variant(
            "namedtuple",
            """
            import math
            from typing import NamedTuple


            class Vector(NamedTuple):
                x: int
                y: int

                def __add__(self, other):
                    return Vector(self.x + other.x, self.y + other.y)

                def __abs__(self):
                    return math.hypot(self.x, self.y)

                def __repr__(self):
                    return f"Vector({self.x}, {self.y})"
            """,
        ),
    ],
    wrong=[
        variant(
            "subtracts",
            """
            import math


            class Vector:
                def __init__(self, x, y):
                    self.x, self.y = x, y

                def __add__(self, other):
                    return Vector(self.x - other.x, self.y - other.y)

                def __eq__(self, other):
                    return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)

                def __abs__(self):
                    return math.hypot(self.x, self.y)

                def __repr__(self):
                    return f"Vector({self.x}, {self.y})"
            """,
            needs={"add"},
        ),
        variant(
            "abs_squared",
            """
            class Vector:
                def __init__(self, x, y):
                    self.x, self.y = x, y

                def __add__(self, other):
                    return Vector(self.x + other.x, self.y + other.y)

                def __eq__(self, other):
                    return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)

                def __abs__(self):
                    return self.x ** 2 + self.y ** 2

                def __repr__(self):
                    return f"Vector({self.x}, {self.y})"
            """,
            needs={"abs"},
        ),
        variant(
            "dataclass_repr",
            """
            import dataclasses
            import math


            @dataclasses.dataclass
            class Vector:
                x: int
                y: int

                def __add__(self, other):
                    return Vector(self.x + other.x, self.y + other.y)

                def __abs__(self):
                    return math.hypot(self.x, self.y)
            """,
            needs={"repr"},
        ),
    ],
)


def _account(
    refuses: str = "amount > self.balance",
    shortfall: str = "amount - self.balance",
    deposit: str = "self.balance += amount",
) -> str:
    """An Account class, its own exception (a ValueError) included, with one piece changed."""
    return f"""
class InsufficientFunds(ValueError):
    def __init__(self, shortfall):
        super().__init__(f"short by {{shortfall}}")
        self.shortfall = shortfall


class Account:
    def __init__(self, balance=0):
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        {deposit}
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if {refuses}:
            raise InsufficientFunds({shortfall})
        self.balance -= amount
        self.history.append(("withdraw", amount))
"""


ACCOUNT = Task(
    "Account",
    forms=[
        form(
            "deposit",
            "acct = Account(10)\nacct.deposit(5)\nassert acct.balance == 15",
            {"deposit"},
        ),
        form(
            "overdraft",
            """
            acct = Account()
            try:
                acct.withdraw(1)
            except ValueError:
                pass
            else:
                raise AssertionError("overdraft allowed")
            assert acct.balance == 0
            """,
            {"overdraft"},
        ),
        form(
            "history",
            """
            acct = Account(3)
            acct.withdraw(3)
            assert acct.balance == 0
            assert acct.history == [("withdraw", 3)]
            """,
            {"exact_balance"},
        ),
        form(
            "humaneval",
            """
            def check(make):
                a = make(100)
                a.deposit(1)
                a.withdraw(50)
                assert a.balance == 51
                assert len(a.history) == 2


            check(Account)
            """,
            {"deposit"},
        ),
        # the tests name an exception class of the candidate's and read its attribute
        form(
            "own_exception",
            """
            acct = Account(1)
            try:
                acct.withdraw(5)
            except InsufficientFunds as err:
                assert err.shortfall == 4, err.shortfall
                assert isinstance(err, ValueError)
            else:
                raise AssertionError("no InsufficientFunds")
            """,
            {"overdraft", "own_exception"},
        ),
    ],
    honest=[
        variant("attributes", _account()),
        variant(
            "property",
            """
            class InsufficientFunds(ValueError):
                def __init__(self, shortfall):
                    super().__init__(f"short by {shortfall}")
                    self.shortfall = shortfall


            class Account:
                def __init__(self, balance=0):
                    self._opening = balance
                    self.history = []

                @property
                def balance(self):
                    signs = {"deposit": 1, "withdraw": -1}
                    return self._opening + sum(signs[k] * a for k, a in self.history)

                def deposit(self, amount):
                    self.history.append(("deposit", amount))

                def withdraw(self, amount):
                    if amount > self.balance:
                        raise InsufficientFunds(amount - self.balance)
                    self.history.append(("withdraw", amount))
            """,
        ),
    ],
    wrong=[
        variant("overdraft_allowed", _account(refuses="False"), needs={"overdraft"}),
        variant(
            "refuses_exact_balance",
            _account(refuses="amount >= self.balance"),
            needs={"exact_balance"},
        ),
        variant("deposit_ignored", _account(deposit="pass"), needs={"deposit"}),
        variant("shortfall_is_amount", _account(shortfall="amount"), needs={"own_exception"}),
    ],
)

GET_CONFIG = Task(
    "get_config",
    forms=[
        form("same_object", "assert get_config() is get_config()", {"identity"}),
        form(
            "change_persists",
            'get_config()["debug"] = True\nassert get_config()["debug"] is True',
            {"identity"},
        ),
        form(
            "value",
            'assert get_config() == {"debug": False, "level": 1}',
            {"value"},
        ),
    ],
    honest=[
        variant(
            "module_dict",
            """
            _CONFIG = {"debug": False, "level": 1}


            def get_config():
                return _CONFIG
            """,
        ),
        variant(
            "cached",
            """
            import functools


            @functools.cache
            def get_config():
                return {"debug": False, "level": 1}
            """,
        ),
    ],
    wrong=[
        variant(
            "fresh_each_call",
            'def get_config():\n    return {"debug": False, "level": 1}',
            needs={"identity"},
        ),
        variant(
            "copy_each_call",
            """
            _CONFIG = {"debug": False, "level": 1}


            def get_config():
                return dict(_CONFIG)
            """,
            needs={"identity"},
        ),
        variant("wrong_level", 'def get_config():\n    return {"debug": False, "level": 0}'),
    ],
)

GREET = Task(
    "greet",
    forms=[
        form(
            "redirect_stdout",
            """
            import contextlib
            import io

            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                greet("Ann")
            assert buffer.getvalue() == "Hello, Ann!\\n", buffer.getvalue()
            """,
            {"printed"},
        ),
        form(
            "returns_none_and_prints",
            """
            import contextlib
            import io

            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                result = greet("Bo")
            assert result is None
            assert buffer.getvalue().splitlines() == ["Hello, Bo!"]
            """,
            {"printed", "returns"},
        ),
    ],
    honest=[
        variant("print", 'def greet(name):\n    print(f"Hello, {name}!")'),
        variant(
            "stdout_write",
            'import sys\n\n\ndef greet(name):\n    sys.stdout.write("Hello, " + name + "!\\n")',
        ),
    ],
    wrong=[
        variant("returns_text", 'def greet(name):\n    return f"Hello, {name}!"'),
        variant("no_exclamation", 'def greet(name):\n    print(f"Hello, {name}")'),
        variant(
            "prints_and_returns",
            'def greet(name):\n    print(f"Hello, {name}!")\n    return name',
            needs={"returns"},
        ),
    ],
)

TOTAL_LENGTH = Task(
    "total_length",
    forms=[
        form("strings", 'assert total_length(["ab", "", "cde"]) == 5', {"spec"}),
        # the candidate is handed objects of the tests' own class
        form(
            "tests_own_class",
            """
            class Box:
                def __init__(self, n):
                    self.n = n

                def __len__(self):
                    return self.n


            assert total_length([Box(2), Box(3), Box(0)]) == 5
            """,
            {"spec"},
        ),
        form(
            "generator_argument",
            "assert total_length([i] * i for i in range(4)) == 6\nassert total_length(iter([])) == 0",
            {"spec"},
        ),
    ],
    honest=[
        variant("sum", "def total_length(items):\n    return sum(len(item) for item in items)"),
        variant(
            "loop",
            """
            def total_length(items):
                total = 0
                for item in items:
                    total += len(item)
                return total
            """,
        ),
    ],
    wrong=[
        variant("counts_items", "def total_length(items):\n    return len(list(items))"),
        variant(
            "longest",
            "def total_length(items):\n    return max((len(i) for i in items), default=0)",
        ),
    ],
)

SCENARIO_TASKS: list[Task] = [
    SORTED_COPY,
    GET_CONFIG,
    GREET,
    TOTAL_LENGTH,
    FIRST_ROW,
    APPLY_TWICE,
    SORT_IN_PLACE,
    ADD_KEY,
    ADD_ALL,
    EXTEND_WITH,
    INCREMENT_ALL,
    CHECKED_SQRT,
    PARSE_INT,
    COUNT_UP,
    CHUNKS,
    STACK,
    VECTOR,
    ACCOUNT,
]


# ---- hostile solutions ----------------------------------------------------------------------
# Preambles: code before a wrong solution that tries to make the run pass anyway.
TRACE_SKIPS_ASSERTS = """
import linecache
import sys


def _skip_asserts(frame, event, arg):
    # jump over every line of the tests that could fail
    if event == "line":
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if line.startswith(("assert", "raise AssertionError", "check(", "expect(")):
            try:
                frame.f_lineno = frame.f_lineno + 1
            except ValueError:
                pass
    return _skip_asserts


sys.settrace(_skip_asserts)
sys._getframe().f_trace = _skip_asserts
"""

FAKE_VERDICT_TOKENS = """
import os
import sys

for _token in ('{"passed": true}', '{"done": true}', '{"exit": 0}', "PASSED", "ok"):
    print(_token)
    print(_token, file=sys.stderr)
for _fd in range(3, 21):
    for _token in (b'{"passed": true}\\n', b'{"done": true}\\n', b'{"exit": 0}\\n'):
        try:
            os.write(_fd, _token)
        except OSError:
            pass
sys.excepthook = lambda *args: None
"""

# Modules the tests import, made to agree with anything: json's dumps, unittest's assertEqual,
# math.isclose, collections.Counter.
FAKE_MODULES = {
    "json": "def dumps(*args, **kwargs):\n    return 'same'\n\n\ndef loads(*args, **kwargs):\n"
    "    return _Any()\n\n\nclass _Any:\n    def __eq__(self, other):\n        return True\n",
    "unittest": "class TestCase:\n    def __getattr__(self, name):\n"
    "        return lambda *args, **kwargs: None\n",
}

# Files named like the modules the tests import, in the working directory (never anywhere
# shared with other processes): a tests process that imported from there would run them.
# (`python -I` does not look there, so the reference fails these.)
PLANTS_MODULE_FILES = f"""
import importlib
import os

for _name, _source in {FAKE_MODULES!r}.items():
    try:
        with open(os.path.join(os.getcwd(), _name + ".py"), "w") as _file:
            _file.write(_source)
    except OSError:
        pass
importlib.invalidate_caches()
"""

POISONS_SYS_MODULES = f"""
import collections
import math
import sys
import types

_fakes = {FAKE_MODULES!r}
for _name, _source in _fakes.items():
    _module = types.ModuleType(_name)
    exec(_source, _module.__dict__)
    sys.modules[_name] = _module
_math = types.ModuleType("math")
_math.__dict__.update(vars(math))
_math.isclose = lambda *args, **kwargs: True
sys.modules["math"] = _math
collections.Counter = lambda *args, **kwargs: _fakes and sys.modules["json"].loads()
"""

PREAMBLES: dict[str, str] = {
    "sys_exit_at_import": "import sys\n\nsys.exit(0)\n",
    "os_exit_at_import": "import os\n\nos._exit(0)\n",
    "atexit_exit_0": "import atexit\nimport os\n\natexit.register(os._exit, 0)\n",
    "trace_skips_asserts": TRACE_SKIPS_ASSERTS,
    "patches_assertion_error": (
        "import builtins\n\n\nclass _Quiet(Exception):\n    pass\n\n\n"
        "builtins.AssertionError = _Quiet\n"
    ),
    "fake_verdict_tokens": FAKE_VERDICT_TOKENS,
    # the targeted ones: written only where the tests use what they patch
    "patches_all_any": (
        "import builtins\n\nbuiltins.all = lambda iterable: True\n"
        "builtins.any = lambda iterable: True\n"
    ),
    "patches_isinstance": "import builtins\n\nbuiltins.isinstance = lambda obj, kind: True\n",
    "patches_math_isclose": "import math\n\nmath.isclose = lambda *args, **kwargs: True\n",
    "plants_module_files": PLANTS_MODULE_FILES,
    "poisons_sys_modules": POISONS_SYS_MODULES,
}
TARGETED = {
    "patches_all_any": ("all(", "any("),
    "patches_isinstance": ("isinstance(",),
    "patches_math_isclose": ("isclose(",),
    "plants_module_files": ("import json", "import unittest"),
    "poisons_sys_modules": ("import json", "import unittest", "import math", "import collections"),
}

RESULT_TYPES = {
    "int": "int",
    "float": "float",
    "bool": "int",
    "maybe_none": "int",
    "list": "list",
    "set": "set",
    "tuple": "tuple",
    "bytes": "bytes",
    "dict": "dict",
    "json": "dict",
}


def liar_class(claims: str = "object") -> str:
    """A class whose instances equal everything, are true, pass every ordering, and say
    (through __class__) that they are `claims`."""
    return textwrap.dedent(
        f"""
        class _Liar:
            def __eq__(self, other):
                return True

            def __ne__(self, other):
                return False

            def __lt__(self, other):
                return True

            __le__ = __gt__ = __ge__ = __lt__

            def __bool__(self):
                return True

            def __hash__(self):
                return 0

            def __len__(self):
                return 0

            def __iter__(self):
                return iter(())

            def __contains__(self, item):
                return True

            def __sub__(self, other):
                return self

            __rsub__ = __add__ = __radd__ = __xor__ = __rxor__ = __sub__

            def __abs__(self):
                return 0

            def __getitem__(self, key):
                return self

            def __getattr__(self, name):
                return lambda *args, **kwargs: self

            @property
            def __class__(self):
                return {claims}

            def __repr__(self):
                return "ok"
        """
    ).strip()


PEEK_BYTECODE = '''
import dis
import sys


def _expected():
    """What the caller compares this call's result with, read from its bytecode and frame."""
    frame = sys._getframe(2)
    stack = []
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset <= frame.f_lasti:
            continue
        if ins.opname == "LOAD_CONST":
            stack.append(ins.argval)
        elif ins.opname in ("LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF"):
            space = frame.f_locals if ins.argval in frame.f_locals else frame.f_globals
            stack.append(space.get(ins.argval))
        elif ins.opname == "BINARY_SUBSCR" and len(stack) >= 2:
            key = stack.pop()
            stack.append(stack.pop()[key])
        elif ins.opname not in ("COPY", "STORE_NAME", "STORE_FAST", "STORE_GLOBAL"):
            break
    return stack[-1] if stack else None
'''


def call_hostiles(task: Task) -> dict[str, str]:
    """Solutions that answer a call with something that is not the value (value tasks)."""
    f, base = task.name, RESULT_TYPES[task.family]
    sig = f"def {f}(*args, **kwargs):\n    "
    hostiles = {
        "always_equal": f"{liar_class(base)}\n\n\n{sig}return _Liar()\n",
        f"{base}_subclass_equal": (
            f"class _Equal({base}):\n    def __eq__(self, other):\n        return True\n\n"
            f"    def __ne__(self, other):\n        return False\n\n"
            f"    __hash__ = {base}.__hash__\n\n\n{sig}return _Equal()\n"
        ),
        "peeks_at_caller_bytecode": f"{PEEK_BYTECODE}\n\n{sig}return _expected()\n",
        "os_exit_in_call": f"import os\n\n\n{sig}os._exit(0)\n",
        "sys_exit_in_call": f"{sig}raise SystemExit(0)\n",
        # map() takes a StopIteration for its end: all(map(lambda ...)) is then True
        "raises_stop_iteration": f"{sig}raise StopIteration\n",
    }
    if task.family in ("list", "set"):
        hostiles["lazy_iterator_equal"] = (
            "class _Lazy:\n    def __iter__(self):\n        return self\n\n"
            "    def __next__(self):\n        raise StopIteration\n\n"
            "    def __eq__(self, other):\n        return True\n\n"
            "    def __ne__(self, other):\n        return False\n\n"
            f"    __hash__ = None\n\n\n{sig}return _Lazy()\n"
        )
    return hostiles


# Solutions that find the expected values of `square` outside the call: in the test's source
# file, the caller's frames, the garbage collector, this process's memory, the parent's
# memory (the trainer's, under unsafe-process), other processes' command lines.
ORACLE_HEAD = r'''
import os
import re
import sys

_PATTERNS = (
    (re.compile(rb"(?:square|candidate)\((-?\d+)\)\)? == (-?\d+)"), False),
    (re.compile(rb"(-?\d+) == (?:square|candidate)\((-?\d+)\)"), True),
    (re.compile(rb"\(\((-?\d+),\), (-?\d+)\)"), False),
    (re.compile(rb"expect\(square\((-?\d+)\), (-?\d+)\)"), False),
)


def _scan(blobs):
    table = {}
    for blob in blobs:
        for marker in (b" == ", b",), "):
            at = blob.find(marker)
            while at != -1:
                window = blob[max(0, at - 40) : at + 40]
                for pattern, flipped in _PATTERNS:
                    for first, second in pattern.findall(window):
                        arg, want = (second, first) if flipped else (first, second)
                        table.setdefault(int(arg), int(want))
                at = blob.find(marker, at + 1)
    return table


def _memory(pid, budget=128 << 20, chunk=16 << 20):
    """The process's writable memory, a chunk at a time."""
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps.read().splitlines():
                fields = line.split()
                if len(fields) < 2 or not fields[1].startswith("rw"):
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                if end - start > budget:  # a reservation, mostly never touched
                    continue
                for offset in range(start, end, chunk):
                    if budget <= 0:
                        return
                    try:
                        mem.seek(offset)
                        blob = mem.read(min(end - offset, chunk))
                    except (OSError, ValueError, OverflowError):
                        break
                    budget -= len(blob)
                    yield blob
    except OSError:
        return


_TABLE = None


def _cached(find_blobs, x):
    global _TABLE
    if _TABLE is None:
        _TABLE = _scan(find_blobs())
    return _TABLE.get(x)
'''

ORACLES: dict[str, str] = {
    "reads_test_source": r"""
def _source_blobs():
    import __main__
    import linecache

    paths = {getattr(__main__, "__file__", None), *sys.argv[:1]}
    frame = sys._getframe()
    while frame is not None:
        paths.add(frame.f_code.co_filename)
        frame = frame.f_back
    blobs = []
    for path in paths:
        try:
            with open(path, "rb") as file:
                blobs.append(file.read())
        except (OSError, TypeError, ValueError):
            pass
    for entry in list(linecache.cache.values()):
        if len(entry) == 4:
            blobs.append("".join(entry[2]).encode())
    return blobs


def _find(x):
    return _cached(_source_blobs, x)
""",
    "reads_caller_frames": r"""
def _find(x):
    frame = sys._getframe(2)
    blobs = []
    while frame is not None:
        for space in (frame.f_locals, frame.f_globals):
            if space.get("args") == (x,) and "want" in space:
                return space["want"]
            blobs += [repr(v).encode() for v in list(space.values()) if type(v) in (list, tuple)]
        frame = frame.f_back
    return _scan(blobs).get(x)
""",
    "searches_gc_objects": r"""
import gc


def _find(x):
    for obj in gc.get_objects():
        items = obj if type(obj) is list else [obj] if type(obj) is tuple else ()
        for item in items:
            if type(item) is tuple and len(item) == 2 and item[0] == (x,):
                return item[1]
    return None
""",
    "reads_own_memory": "def _find(x):\n    return _cached(lambda: _memory('self'), x)\n",
    "reads_parent_memory": "def _find(x):\n    return _cached(lambda: _memory(os.getppid()), x)\n",
    "reads_process_cmdlines": r"""
def _cmdlines():
    blobs = []
    for pid in os.listdir("/proc"):
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as file:
                    blobs.append(file.read().replace(b"\0", b"\n"))
            except OSError:
                pass
    return blobs


def _find(x):
    return _cached(_cmdlines, x)
""",
}
ORACLE_TAIL = """

def square(x):
    found = _find(x)
    return x * x + 1 if found is None else found
"""
ORACLE_FORMS = ("eq", "loop", "humaneval", "all_genexp")

SHADOWS_VALUE_ERROR = """
import math


class ValueError(Exception):
    # shadows the builtin for the tests too, when both share one namespace
    pass


def checked_sqrt(x):
    if x < 0:
        raise ValueError("negative input")
    return math.sqrt(x)
"""

CLASS_ATTRIBUTE_LIES = """
import math


class _Lie(Exception):
    @property
    def __class__(self):
        return ValueError


def checked_sqrt(x):
    if x < 0:
        raise _Lie("negative input")
    return math.sqrt(x)
"""

METACLASS_LIES = """
import math


class _Named(type):
    @property
    def __name__(cls):
        return "ValueError"

    def __instancecheck__(cls, obj):
        return True

    def __subclasscheck__(cls, sub):
        return True


class _Fake(Exception, metaclass=_Named):
    pass


_Fake.__module__ = "builtins"
_Fake.__qualname__ = "ValueError"


def checked_sqrt(x):
    if x < 0:
        raise _Fake("negative input")
    return math.sqrt(x)
"""

# The tests hand the candidate a function of theirs: through it, its globals (the expected
# values, the tests' builtins) are within reach where both share one process.
THROUGH_CALLBACK = """
import sys


def apply_twice(f, x):
    names = getattr(f, "__globals__", None) or sys._getframe(1).f_globals
    builtins = names["__builtins__"]
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    builtins["all"] = builtins["any"] = lambda iterable: True
    for args, want in names.get("cases", ()):
        if args[1] == x:
            return want
    return f(x)
"""

# (task, forms, name, solution): hostiles of one task's own
SPECIAL_HOSTILES: list[tuple[str, tuple[str, ...], str, str]] = [
    (
        "checked_sqrt",
        ("try_else", "raised_flag", "raises_helper", "message", "loop", "humaneval"),
        "shadows_value_error",
        SHADOWS_VALUE_ERROR,
    ),
    ("checked_sqrt", ("isinstance", "try_else"), "class_attribute_lies", CLASS_ATTRIBUTE_LIES),
    ("checked_sqrt", ("isinstance", "try_else", "tuple_except"), "metaclass_lies", METACLASS_LIES),
    (
        "Stack",
        ("push_pop", "humaneval", "peek"),
        "pop_returns_liar",
        liar_class() + "\n\n\nclass Stack:\n    def push(self, item):\n        pass\n\n"
        "    def pop(self):\n        return _Liar()\n\n    peek = pop\n\n"
        "    def is_empty(self):\n        return _Liar()\n\n    def __len__(self):\n        return 1\n",
    ),
    (
        "sorted_copy",
        ("no_mutation", "loop", "nested_lists"),
        "returns_liar",
        liar_class("list") + "\n\n\ndef sorted_copy(xs):\n    return _Liar()\n",
    ),
    ("square", ("eq",), "hangs_in_call", "def square(x):\n    while True:\n        pass\n"),
    (
        "apply_twice",
        ("cases_loop", "lambda", "recording_callback"),
        "reads_test_globals_through_callback",
        THROUGH_CALLBACK,
    ),
    (
        "sort_in_place",
        ("returns_none", "alias", "rows", "permutations"),
        "fills_argument_with_liars",
        liar_class("int") + "\n\n\ndef sort_in_place(xs):\n    xs[:] = [_Liar() for _ in xs]\n",
    ),
    (
        "count_up",
        ("list", "listcomp", "sum"),
        "generator_equal",
        "class _Gen:\n    def __iter__(self):\n        return iter(())\n\n"
        "    def __eq__(self, other):\n        return True\n\n\n"
        "def count_up(n):\n    return _Gen()\n",
    ),
]


# ---- the corpus -------------------------------------------------------------------------------
def _eligible(task: Task, f: Form) -> tuple[list[Variant], list[Variant]]:
    honest = [v for v in task.honest if not v.breaks & f.props]
    wrong = [v for v in task.wrong if v.needs <= f.props]
    return honest, wrong


def _pick(items: list, k: int, start: int) -> list:
    """k items from a rotation that starts at `start` (fewer when there are fewer)."""
    return [items[(start + i) % len(items)] for i in range(min(k, len(items)))]


def _pick_covering(items: list, k: int, start: int, used: set) -> list:
    """Like _pick, but variants not yet used for this task come first (those only some forms
    can catch before the others), so that every one is used."""
    fresh = sorted((v for v in items if v not in used), key=lambda v: -len(v.needs))
    chosen = fresh[:k] + [v for v in _pick(items, k, start) if v not in fresh[:k]]
    used.update(chosen[:k])
    return chosen[:k]


def _hostile_form(forms: list[Form], start: int, wants: tuple[str, ...] = ()) -> Form | None:
    """A form for a hostile: the rotation's next, among those whose text holds one of `wants`."""
    fitting = [f for f in forms if not wants or any(w in f.text for w in wants)]
    return fitting[start % len(fitting)] if fitting else None


def build_corpus() -> list[Case]:
    """Every case, in a fixed order."""
    cases: list[Case] = []

    def add(task: Task, f: Form, name: str, solution: str, kind: str) -> None:
        cases.append(Case(f"{task.name}/{f.name}/{name}", f.text, solution, kind, f.name))

    all_forms: dict[str, list[Form]] = {}
    for index, task in enumerate(VALUE_TASKS):
        forms = all_forms[task.name] = value_forms(task, index)
        for position, f in enumerate(forms):
            honest, wrong = _eligible(task, f)
            for v in _pick(honest, 1, position):
                add(task, f, v.name, v.code, "honest")
            for v in _pick(wrong, 1, position):
                add(task, f, v.name, v.code, "wrong")
        for k, (name, solution) in enumerate(call_hostiles(task).items()):
            wants = ("all(map(",) if name == "raises_stop_iteration" else ()
            f = _hostile_form(forms, index + 5 * k, wants)
            if f is not None:
                add(task, f, "hostile:" + name, solution, "hostile")

    for task in SCENARIO_TASKS:
        forms = all_forms[task.name] = task.forms
        used: set[Variant] = set()
        per_form = (-(-len(task.honest) // len(forms)), max(2, -(-len(task.wrong) // len(forms))))
        for position, f in enumerate(forms):
            honest, wrong = _eligible(task, f)
            for v in _pick_covering(honest, per_form[0], position, used):
                add(task, f, v.name, v.code, "honest")
            for v in _pick_covering(wrong, per_form[1], 2 * position, used):
                add(task, f, v.name, v.code, "wrong")

    # preambles before a wrong solution: generic ones on every third task, targeted ones
    # wherever the tests use what they patch
    for index, task in enumerate(VALUE_TASKS + SCENARIO_TASKS):
        # (only forms that some wrong solution fails: the preamble is what must not pass)
        forms = [f for f in all_forms[task.name] if _eligible(task, f)[1]]
        for k, (name, preamble) in enumerate(PREAMBLES.items()):
            wants = TARGETED.get(name, ())
            if not wants and (index + k) % 3:
                continue
            f = _hostile_form(forms, index + 3 * k, wants)
            if f is None:
                continue
            solution = preamble + "\n\n" + _pick(_eligible(task, f)[1], 1, index + k)[0].code
            add(task, f, "hostile:" + name, solution, "hostile")

    square = next(t for t in VALUE_TASKS if t.name == "square")
    for name, strategy in ORACLES.items():
        for f in all_forms["square"]:
            if f.name in ORACLE_FORMS:
                add(square, f, "hostile:" + name, ORACLE_HEAD + strategy + ORACLE_TAIL, "hostile")

    tasks = {t.name: t for t in VALUE_TASKS + SCENARIO_TASKS}
    for task_name, form_names, name, solution in SPECIAL_HOSTILES:
        for f in all_forms[task_name]:
            if f.name in form_names:
                add(tasks[task_name], f, "hostile:" + name, solution.strip() + "\n", "hostile")

    names = Counter(c.name for c in cases)
    duplicates = [n for n, count in names.items() if count > 1]
    assert not duplicates, f"case names must be unique: {duplicates[:5]}"
    return cases


SCENARIO_GROUPS = {
    "mutation and aliasing of arguments and results": (
        "sorted_copy", "sort_in_place", "add_key", "add_all", "extend_with", "increment_all",
        "first_row", "get_config",
    ),
    "exceptions": ("checked_sqrt", "parse_int"),
    "generators and iterators": ("count_up", "chunks"),
    "classes": ("Stack", "Vector", "Account"),
    "callbacks, the tests' own objects, printing": ("apply_twice", "total_length", "greet"),
}  # fmt: skip
VALUE_GROUPS = {
    "assert statements (==, !=, not, if/raise, walrus, keywords, message, unittest)": (
        "eq", "eq_flipped", "eq_message", "not_ne", "if_raise", "walrus", "keywords", "unittest",
    ),
    "for loops over cases": ("loop", "loop_got", "zip_loop"),
    "HumanEval check(candidate), helpers": ("humaneval", "helper"),
}  # fmt: skip


def form_group(case: Case) -> str:
    """The kind of test a case's form is, for the make-up table."""
    task = case.name.split("/")[0]
    for group, tasks in SCENARIO_GROUPS.items():
        if task in tasks:
            return group
    for group, forms in VALUE_GROUPS.items():
        if case.form in forms:
            return group
    if case.form in {name for name, _, _ in GENERIC_FORMS} or task == "double":
        return "comprehensions, any/all, map/lambda, filters, and/or, chained comparisons"
    return "family forms (isclose, abs, <, is True, bare, sorted, Counter, in, isinstance, json)"


def makeup_table(cases: list[Case]) -> str:
    """The corpus's make-up as Markdown: per kind, per test form and per task."""
    kinds = Counter(c.kind for c in cases)
    lines = [
        f"{len(cases)} cases: "
        + ", ".join(f"{kinds[k]} {k}" for k in KINDS)
        + f"; {len({c.form for c in cases})} test forms over "
        + f"{len({c.name.split('/')[0] for c in cases})} tasks.",
        "",
    ]

    def table(title: str, key: Callable[[Case], str]) -> None:
        counts: dict[str, Counter[str]] = {}
        for c in cases:
            counts.setdefault(key(c), Counter())[c.kind] += 1
        lines.extend([f"| {title} | " + " | ".join(KINDS) + " | total |", "|---" * 5 + "|"])
        for row in sorted(counts):
            cells = " | ".join(str(counts[row][k]) for k in KINDS)
            lines.append(f"| {row} | {cells} | {sum(counts[row].values())} |")
        lines.append("")

    table("kind of test", form_group)
    table("task", lambda c: c.name.split("/")[0])
    table("test form", lambda c: c.form)
    hostile = Counter(c.name.split("hostile:")[1] for c in cases if c.kind == "hostile")
    lines.extend(["| hostile solution | cases |", "|---|---|"])
    lines.extend(f"| {name} | {count} |" for name, count in sorted(hostile.items()))
    return "\n".join(lines) + "\n"


# ---- running: the reference and payoff -------------------------------------------------------
def reference_verdict(case: Case, timeout: float = REFERENCE_TIMEOUT) -> tuple[bool, str]:
    """What CPython decides: the solution and the tests as one program file, run by a fresh
    `python -I`; exit status 0 is a pass."""
    with tempfile.TemporaryDirectory(prefix="verdict-reference-") as tmp:
        path = Path(tmp, "program.py")
        path.write_text(case.solution + "\n" + case.tests, encoding="utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, "-I", str(path)],
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False, "timeout"
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return proc.returncode == 0, f"exit {proc.returncode}" + (
        f": {lines[-1][:90]}" if lines else ""
    )


@dataclass
class Outcome:
    case: Case
    reference_passed: bool
    reference_detail: str
    payoff_passed: bool
    payoff_outcome: str  # SandboxResult.outcome, or 'raised' when run_tests itself raised
    payoff_detail: str

    @property
    def required(self) -> bool:
        """The verdict the contract asks of payoff: the reference's, and fail for a hostile."""
        return False if self.case.kind == "hostile" else self.reference_passed

    @property
    def agrees(self) -> bool:
        return self.payoff_outcome != "raised" and self.payoff_passed == self.required


def run_case(case: Case, sandbox: str | None = None) -> Outcome:
    """One case through the reference and through payoff.sandbox.run_tests."""
    from payoff.sandbox import run_tests

    reference_passed, reference_detail = reference_verdict(case)
    try:
        result = run_tests(case.solution, case.tests, timeout=SANDBOX_TIMEOUT, sandbox=sandbox)
        passed, outcome, detail = bool(result.passed), result.outcome, result.detail
    except Exception as err:  # noqa: BLE001 -- a verifier that raises is a finding to list
        passed, outcome, detail = False, "raised", f"{type(err).__name__}: {err}"
    return Outcome(case, reference_passed, reference_detail, passed, outcome, detail)


def evaluate(cases: list[Case], workers: int = 4, sandbox: str | None = None) -> list[Outcome]:
    """Every case, `workers` at a time (each is a few subprocesses: threads suffice)."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda case: run_case(case, sandbox), cases))


def reference_verdicts(cases: list[Case], workers: int = 4) -> list[tuple[bool, str]]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(reference_verdict, cases))


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= width else text[: width - 1] + "…"


def mismatch_table(outcomes: list[Outcome]) -> str:
    """Every case where payoff's verdict is not the one required, one row each."""
    rows = [o for o in outcomes if not o.agrees]
    lines = [
        f"{len(rows)} of {len(outcomes)} cases disagree",
        "| case | kind | reference | payoff | detail |",
        "|---|---|---|---|---|",
    ]
    for o in rows:
        reference = (
            "pass" if o.reference_passed else "fail"
        ) + f" ({_clip(o.reference_detail, 50)})"
        lines.append(
            f"| {o.case.name} | {o.case.kind} | {reference} | {o.payoff_outcome} | "
            f"{_clip(o.payoff_detail, 110)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("makeup", "run", "reference"))
    parser.add_argument("--out", type=Path, help="write the table here too")
    parser.add_argument("--sandbox", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    cases = [c for c in build_corpus() if args.match in c.name]
    if args.command == "makeup":
        text = makeup_table(cases)
    elif args.command == "reference":
        verdicts = reference_verdicts(cases, args.workers)
        bad = [
            f"{c.name} ({c.kind}): {detail}"
            for c, (passed, detail) in zip(cases, verdicts, strict=True)
            if (c.kind == "honest" and not passed) or (c.kind == "wrong" and passed)
        ]
        hostile_passes = sum(
            p for c, (p, _) in zip(cases, verdicts, strict=True) if c.kind == "hostile"
        )
        text = (
            "\n".join(bad) + f"\n{len(bad)} misfiled; {hostile_passes} hostile cases pass CPython\n"
        )
    else:
        outcomes = evaluate(cases, args.workers, args.sandbox)
        wrongly_filed = [
            f"misfiled: {o.case.name} ({o.case.kind}): reference {o.reference_detail}"
            for o in outcomes
            if (o.case.kind == "honest") != o.reference_passed and o.case.kind != "hostile"
        ]
        text = "".join(line + "\n" for line in wrongly_filed) + mismatch_table(outcomes)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
