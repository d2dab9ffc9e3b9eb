"""The code verifier's verdict means what Python means (issue #56): the test script runs as
real Python in a process that never holds the candidate's code, and each call carries
arguments, mutations and exceptions across. Every case here got the wrong verdict from the
design before it (call sites recorded in the candidate's sandbox and replayed outside).
"""

from __future__ import annotations

import textwrap

import pytest

from payoff.sandbox import SandboxUnavailableError, check_available, run_tests

try:
    check_available("bwrap")
    ISOLATED = True
except SandboxUnavailableError:
    ISOLATED = False
pytestmark = pytest.mark.skipif(not ISOLATED, reason="no user namespaces on this machine")


def verdict(solution: str, tests: str, **kwargs) -> bool:
    return run_tests(textwrap.dedent(solution), textwrap.dedent(tests), **kwargs).passed


# ---- comprehensions whose items are filtered or short-circuited -----------------------------
SHORT_CIRCUITS = [
    # (tests, honest, wrong): values were recorded as if every item reached every operand,
    # then replayed out of step (a wrong solution passed), or the second operand of `or`
    # had no value at all (an honest one crashed)
    (
        "assert any(f(x) > 0 and f(x) < 3 for x in range(3))",
        "def f(x):\n    return x",
        "def f(x):\n    return [0, 5, -1][x]",
    ),
    (
        "assert all(h(x) % 2 == 0 for x in range(4) if h(x) > 0)",
        "def h(x):\n    return 2 * x",
        "def h(x):\n    return [0, 1, -2, -4][x]",
    ),
    (
        "assert all(g(x) == 0 or g(x) > x for x in range(3))",
        "def g(x):\n    return x + 1",
        "def g(x):\n    return [0, 0, 1][x]",
    ),
]


@pytest.mark.parametrize("tests, honest, wrong", SHORT_CIRCUITS)
def test_filters_and_short_circuits_in_comprehensions_are_pythons(tests, honest, wrong):
    assert verdict(honest, tests)
    assert not verdict(wrong, tests)


# ---- side effects on arguments ----------------------------------------------------------------
COPY_TESTS = """
    data = [3, 1, 2]
    result = sorted_copy(data)
    assert result == [1, 2, 3]
    assert data == [3, 1, 2]
"""
IN_PLACE_TESTS = """
    data = [3, 1, 2]
    sort_in_place(data)
    assert data == [1, 2, 3]
    grid = {"a": [2, 1]}
    sort_values(grid)
    assert grid == {"a": [1, 2]}
"""


def test_a_solution_that_sorts_its_argument_in_place_fails_a_copy_test():
    assert verdict("def sorted_copy(xs):\n    return sorted(xs)", COPY_TESTS)
    assert not verdict("def sorted_copy(xs):\n    xs.sort()\n    return xs", COPY_TESTS)


def test_an_honest_in_place_sort_passes():
    honest = """
        def sort_in_place(xs):
            xs.sort()
        def sort_values(d):
            for v in d.values():
                v.sort()
    """
    assert verdict(honest, IN_PLACE_TESTS)
    lazy = "def sort_in_place(xs):\n    return sorted(xs)\ndef sort_values(d):\n    pass"
    assert not verdict(lazy, IN_PLACE_TESTS)


def test_aliases_and_returned_arguments_stay_the_tests_own_objects():
    solution = "def push(stack, x):\n    stack.append(x)\n    return stack\ndef both(a, b):\n    a.append(1)\n    return b"
    tests = """
        s = []
        assert push(s, 1) is s and s == [1]
        x = []
        assert both(x, x) == [1] and x == [1]
    """
    assert verdict(solution, tests)


# ---- values that are not plain data --------------------------------------------------------------
def test_an_object_that_cannot_be_sent_is_not_the_type_error_the_test_expects():
    tests = """
        try:
            parse("x")
        except TypeError:
            pass
        else:
            raise AssertionError("parse('x') should raise TypeError")
    """
    assert not verdict("def parse(s):\n    return object()", tests)
    assert verdict("def parse(s):\n    raise TypeError('not a number')", tests)


# ---- exceptions ---------------------------------------------------------------------------------
EXPECTS_VALUE_ERROR = """
    try:
        check_age(-1)
    except ValueError:
        pass
    else:
        raise AssertionError("no ValueError")
"""


def test_a_home_made_class_named_value_error_is_not_a_value_error():
    forged = """
        class ValueError(Exception):
            pass
        def check_age(n):
            raise ValueError("negative")
    """
    assert not verdict(forged, EXPECTS_VALUE_ERROR)


def test_a_real_value_error_subclass_with_its_own_name_is_a_value_error():
    honest = """
        class InvalidAge(ValueError):
            pass
        def check_age(n):
            if n < 0:
                raise InvalidAge(f"age {n} is negative")
            return n
    """
    assert verdict(honest, EXPECTS_VALUE_ERROR)
    # and the tests may name the candidate's own class
    by_name = EXPECTS_VALUE_ERROR.replace("except ValueError", "except InvalidAge")
    assert verdict(honest, by_name)


def test_stop_iteration_out_of_a_call_fails_although_cpython_passes_it():
    tests = "assert all(map(lambda x: square(x) == x * x, range(4)))"
    assert verdict("def square(x):\n    return x * x", tests)
    assert not verdict("def square(x):\n    raise StopIteration", tests)


# ---- the rest of Python: classes, generators, callbacks, HumanEval's check ------------------------
def test_classes_generators_and_callbacks_work_as_in_python():
    solution = """
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def pop(self):
                return self.items.pop()
            def __len__(self):
                return len(self.items)
        def count_up(n):
            yield from range(n)
        def apply(f, xs):
            return [f(x) for x in xs]
    """
    tests = """
        s = Stack()
        s.push(1)
        s.push(2)
        assert len(s) == 2 and s and isinstance(s, Stack)
        assert s.pop() == 2 and s.items == [1]
        assert list(count_up(3)) == [0, 1, 2] and 2 in count_up(3)
        assert apply(lambda v: v + 1, [1, 2]) == [2, 3]
        assert apply(str.upper, ["a"]) == ["A"]
        def check(candidate):
            assert candidate(abs, [-3]) == [3]
        check(apply)
    """
    assert verdict(solution, tests)


def test_an_object_whose_eq_is_always_true_equals_nothing():
    liar = """
        class Anything:
            def __eq__(self, other):
                return True
            def __bool__(self):
                return True
        def answer(x):
            return Anything()
    """
    assert not verdict(liar, "assert answer(1) == 42")
    assert not verdict(liar, "assert answer(1)")
    assert not verdict(liar, "assert [answer(1)] == [42]")


def test_ending_the_candidates_process_inside_a_call_fails_even_under_a_bare_except():
    tests = """
        try:
            check_age(-1)
        except:
            pass
    """
    assert not verdict("import os\ndef check_age(n):\n    os._exit(0)", tests)
    assert not verdict("import sys\ndef check_age(n):\n    sys.exit(0)", tests)


def test_the_detail_names_the_line_and_the_last_call():
    result = run_tests("def add(a, b):\n    return a - b\n", "assert add(1, 2) == 3\n")
    assert result.outcome == "fail"
    assert "line 1" in result.detail and "add(1, 2) returned -1" in result.detail


def test_standard_containers_enums_and_namedtuples_compare_as_in_python():
    """A defaultdict, a Counter, dict views, a deque, an IntEnum, a namedtuple, a Fraction:
    honest return values that were 'not plain data' and crashed the verdict."""
    solution = """
        from collections import Counter, defaultdict, deque, namedtuple
        from enum import IntEnum
        from fractions import Fraction
        class Color(IntEnum):
            RED = 1
        Point = namedtuple("Point", "x y")
        def group(words):
            groups = defaultdict(list)
            for word in words:
                groups[len(word)].append(word)
            return groups
        def count(text):
            return Counter(text)
        def window():
            return deque([1, 2], maxlen=3)
        def red():
            return Color.RED
        def point():
            return Point(1, 2)
        def add(a, b):
            return Point(a.x + b.x, a.y + b.y)
        def third():
            return Fraction(1, 3)
        def keys():
            return {1: 2}.keys()
    """
    tests = """
        from collections import deque
        from fractions import Fraction
        assert group(["a", "bb", "c"]) == {1: ["a", "c"], 2: ["bb"]}
        assert sorted(group(["a", "bb"]).items()) == [(1, ["a"]), (2, ["bb"])]
        assert count("aab") == {"a": 2, "b": 1} and count("aab").most_common(1) == [("a", 2)]
        assert window() == deque([1, 2])
        assert red() == 1 and red().name == "RED" and {red(): 5}[1] == 5
        assert point() == (1, 2) and point().x == 1 and point()[1] == 2
        assert add(point(), point()) == (2, 4)
        assert third() == Fraction(1, 3) and keys() == {1}
    """
    assert verdict(solution, tests)


def test_the_candidates_own_objects_compare_by_its_own_eq_only_with_each_other():
    solution = """
        class Vector:
            def __init__(self, x, y):
                self.x, self.y = x, y
            def __add__(self, other):
                return Vector(self.x + other.x, self.y + other.y)
            def __eq__(self, other):
                return (self.x, self.y) == (other.x, other.y)
            def __abs__(self):
                return (self.x ** 2 + self.y ** 2) ** 0.5
    """
    tests = """
        assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)
        assert abs(Vector(3, 4)) == 5
    """
    assert verdict(solution, tests)
    wrong = solution.replace("self.x + other.x", "self.x - other.x")
    assert not verdict(wrong, tests)


def test_containers_keep_their_identity_and_changes_across_calls():
    """Each call used to carry its own arguments' contents back, no more: a solution that
    kept an argument and changed it in a later call passed a test that it must not, and an
    object returned twice was two copies."""
    keeps_and_sorts_later = """
        _kept = []
        def sorted_copy(xs):
            for earlier in _kept:
                earlier.sort()
            _kept.append(xs)
            return sorted(xs)
    """
    tests = """
        first, second = [3, 1, 2], [9, 8]
        assert sorted_copy(first) == [1, 2, 3]
        assert sorted_copy(second) == [8, 9]
        assert first == [3, 1, 2]
    """
    assert not verdict(keeps_and_sorts_later, tests)
    assert verdict("def sorted_copy(xs):\n    return sorted(xs)", tests)
    settings = """
        _config = {"debug": False}
        def get_config():
            return _config
        def debug_on():
            return _config["debug"]
    """
    shared = """
        assert get_config() is get_config()
        get_config()["debug"] = True
        assert debug_on() is True
        cycle = [1]
        cycle.append(cycle)
        assert get_config() is not cycle and cycle[1] is cycle
    """
    assert verdict(settings, shared)


def test_what_the_solution_prints_reaches_the_tests_stdout():
    tests = """
        import contextlib, io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            greet("Ada")
        assert out.getvalue() == "Hello, Ada!\\n"
    """
    assert verdict("def greet(name):\n    print(f'Hello, {name}!')", tests)
    assert not verdict("def greet(name):\n    print('Hello!')", tests)


def test_the_solutions_own_exception_keeps_its_arguments_and_attributes():
    solution = """
        class InsufficientFunds(ValueError):
            def __init__(self, shortfall):
                super().__init__(f"short by {shortfall}")
                self.shortfall = shortfall
        def withdraw(balance, amount):
            if amount > balance:
                raise InsufficientFunds(amount - balance)
            return balance - amount
    """
    tests = """
        try:
            withdraw(10, 15)
        except InsufficientFunds as err:
            assert err.shortfall == 5 and str(err) == "short by 5"
        else:
            raise AssertionError("no error")
        try:
            {}["missing"]
        except KeyError as err:
            assert err.args == ("missing",)
    """
    assert verdict(solution, tests)
    assert not verdict(solution.replace("amount - balance", "amount"), tests)


def test_the_candidates_classes_are_classes_in_the_tests():
    """`type(s) is Stack` was False and `class PairStack(Stack)` in the tests crashed: the
    candidate's classes are mirrored as classes, their objects made in its process."""
    solution = """
        class Stack:
            LIMIT = 10
            def __init__(self, *items):
                self.items = list(items)
            def push(self, item):
                self.items.append(item)
            def pop(self):
                return self.items.pop()
            def __len__(self):
                return len(self.items)
        class LimitedStack(Stack):
            pass
    """
    tests = """
        s = Stack(1)
        assert type(s) is Stack and type(s).__name__ == "Stack" and Stack.LIMIT == 10
        assert isinstance(LimitedStack(), Stack) and not isinstance(s, LimitedStack)
        class PairStack(Stack):
            def __init__(self):
                super().__init__(0)
                self.pairs = 0
            def push_pair(self, a, b):
                self.push(a)
                self.push(b)
                self.pairs += 1
        p = PairStack()
        p.push_pair(1, 2)
        assert p.pop() == 2 and len(p) == 2 and p.pairs == 1 and isinstance(p, Stack)
    """
    assert verdict(solution, tests)
