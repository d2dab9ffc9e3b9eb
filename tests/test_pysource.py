"""Parsing from many threads at once (CPython gh-106905 on 3.11 before 3.11.8)."""

from __future__ import annotations

import ast
import gc
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from payoff.core.pysource import parse_expression, parse_module
from payoff.sandbox.verdict import candidate_names

SOURCE = "\n".join(f"assert f(lambda: g({i}, [1, 2, (3, {{4: 5}})])) == {i}" for i in range(30))


class _YieldsOnCollection:
    """Garbage whose finalizer lets another thread run, as an unclosed pipe's does."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _hammer(parse: Callable[[str], object], rounds: int = 300) -> None:
    def one(_: int) -> None:
        for _ in range(rounds):
            for _ in range(3):
                _YieldsOnCollection()
            parse(SOURCE)

    old = gc.get_threshold()
    gc.set_threshold(700, 1, 1)
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, range(8)))
    finally:
        gc.set_threshold(*old)
        gc.collect()


def test_the_race_is_real_on_this_python() -> None:
    import sys

    if sys.version_info >= (3, 11, 8):
        pytest.skip("CPython fixed the shared recursion counter in 3.11.8")
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        for _ in range(5):
            _hammer(ast.parse)


def test_payoff_parses_safely_from_threads() -> None:
    _hammer(parse_module, rounds=100)
    _hammer(
        lambda s: parse_expression("[" + s.replace("assert ", "").replace("\n", ", ") + "]"),
        rounds=100,
    )
    _hammer(candidate_names, rounds=20)  # the code verifier's path, as CI failed on it
