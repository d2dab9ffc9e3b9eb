"""Parse Python source safely from any thread.

CPython 3.11 before 3.11.8 keeps the depth counter of its AST-to-object conversion in
one interpreter-wide place. When a garbage collection inside `ast.parse` runs a finalizer
that lets another thread in, and that thread parses too, the first parse fails with
"SystemError: AST constructor recursion depth mismatch" (CPython gh-106905). payoff
parses tests and completions in thread pools (the code verifier, the hack detectors), so
every parse in payoff goes through these functions, which hold one lock for the conversion.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse_module(source: str) -> ast.Module:
    """`ast.parse(source)`, serialized across threads; raises SyntaxError as it does."""
    with _PARSE_LOCK:
        return ast.parse(source)


def parse_expression(source: str) -> ast.Expression:
    """`ast.parse(source, mode="eval")`, serialized across threads."""
    with _PARSE_LOCK:
        return ast.parse(source, mode="eval")
