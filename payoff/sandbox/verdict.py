"""Unit tests for untrusted code, with a verdict nothing inside the sandbox can forge.

The tests (`assert add(1, 2) == 3` lines, or any Python test script) are split in the
parent, never in the sandbox:

  - every *call site*, the largest expression rooted in a name the test does not define
    itself and that is not a builtin (`add(1, 2)`), is what the candidate is asked for;
  - the rest of each assert -- the comparison and the expected value -- stays here.

Sandbox 1 runs the candidate's program and then the script with each assert reduced to
its call sites (no expected values: `assert add(1, 2) == 3` arrives as
`__payoff_site__(0, lambda: add(1, 2))`), and reports the plain value each site produced.
The parent decodes those values (only None, bool, int, float, complex, str, bytes, and
lists, tuples, sets and dicts of them can arrive; anything else is a failure) and:

  - when every statement is `assert SITE == literal` (or `!=`, `is None/True/False`, a
    bare `SITE`, `not SITE`), compares them here with Python's `==` on plain values, so an
    honest `1 == True` or `2 == 2.0` passes and no object of the candidate's takes part;
  - otherwise runs the original script in sandbox 2, a fresh process that never held the
    candidate's code, where each site returns the recorded value.

Exiting early, patching builtins, printing a token, an `__eq__` that is always true: none
of it reaches the verdict, which is only ever "these values equal those".
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.core.pysource import parse_module
from payoff.sandbox.child import decode
from payoff.sandbox.isolation import Limits, check_available, run_child

SITE_FUNCTION = "__payoff_site__"
BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class SandboxResult:
    """Verdict of one run: passed, or why not.

    outcome: 'pass'; 'fail' (a value differed from the expected one, or was not plain data);
    'crash' (the program or a call raised, or the run ended without values); 'timeout';
    'blocked' (failed after trying an operation the sandbox refuses: processes, sockets,
    ctypes); 'invalid_tests' (the tests themselves do not parse: a data problem).
    """

    passed: bool
    outcome: str
    detail: str = ""
    blocked: list[str] = field(default_factory=list)
    discarded_bytes: int = 0
    isolated: bool = True


# ---- splitting the tests ------------------------------------------------------------------
def _bound_names(tree: ast.AST) -> set[str]:
    """Names the test script binds itself (assignments, defs, imports, loop and arg names)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
    return names


class _SiteFinder(ast.NodeTransformer):
    """Replaces each maximal candidate-rooted expression by `__payoff_site__(k, lambda: ...)`."""

    def __init__(self, candidate_names: set[str]):
        self.candidate_names = candidate_names
        self.sites: list[str] = []

    def _rooted(self, node: ast.AST) -> bool:
        while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and node.id in self.candidate_names

    def visit(self, node: ast.AST) -> Any:
        loaded = isinstance(getattr(node, "ctx", ast.Load()), ast.Load)
        if isinstance(node, ast.expr) and loaded and self._rooted(node):
            k = len(self.sites)
            self.sites.append(ast.unparse(node))
            return ast.Call(
                func=ast.Name(SITE_FUNCTION, ast.Load()),
                args=[
                    ast.Constant(k),
                    ast.Lambda(
                        args=ast.arguments(
                            posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]
                        ),
                        body=node,
                    ),
                ],
                keywords=[],
            )
        return self.generic_visit(node)


@dataclass
class Check:
    """A test the parent can decide alone: site k's value compared with a literal."""

    site: int
    op: str  # '==' | '!=' | 'is' | 'is not' | 'truthy' | 'falsy'
    expected: Any = None


@dataclass
class TestPlan:
    """The tests, split: what goes into the sandbox and what stays here."""

    record_script: str  # for sandbox 1: asserts reduced to their sites, no expected values
    check_script: str  # for sandbox 2: the original script with sites as lookups
    sites: list[str]
    checks: list[Check] | None  # set when the parent can compare alone


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _site_number(node: ast.expr) -> int | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == SITE_FUNCTION
        and isinstance(node.args[0], ast.Constant)
    ):
        return int(node.args[0].value)
    return None


def _simple_check(test: ast.expr) -> Check | None:
    """`SITE == literal` and its kin, or None when the parent cannot decide it alone."""
    if (site := _site_number(test)) is not None:
        return Check(site, "truthy")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        site = _site_number(test.operand)
        return None if site is None else Check(site, "falsy")
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if _site_number(left) is None:
        left, right = right, left
    site = _site_number(left)
    if site is None or _site_number(right) is not None:
        return None
    ok, expected = _literal(right)
    if not ok:
        return None
    if isinstance(op, ast.Eq | ast.NotEq):
        return Check(site, "==" if isinstance(op, ast.Eq) else "!=", expected)
    if isinstance(op, ast.Is | ast.IsNot) and (expected is None or isinstance(expected, bool)):
        return Check(site, "is" if isinstance(op, ast.Is) else "is not", expected)
    return None


def _inline_checks(tree: ast.Module) -> ast.Module:
    """HumanEval's form, `def check(candidate): assert candidate(3) == 9 ...` then
    `check(sq)`, as the asserts themselves: the call's statement is replaced by the function's
    body with the parameter renamed to the name passed. Passing the candidate's function in
    would make a site of the bare name, whose value (a function) is not plain data. Only
    one-parameter functions whose body does not return are inlined."""
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and len(node.args.args) == 1
        and not (node.args.posonlyargs or node.args.kwonlyargs or node.args.vararg)
        and not (node.args.kwarg or node.args.defaults or node.decorator_list)
        and not any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in ast.walk(node))
    }
    if not functions:
        return tree

    class Rename(ast.NodeTransformer):
        def __init__(self, old: str, new: str):
            self.old, self.new = old, new

        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.Name(self.new, node.ctx) if node.id == self.old else node

    body: list[ast.stmt] = []
    for statement in tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        function = (
            functions.get(call.func.id)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            else None
        )
        if (
            function is not None
            and isinstance(call, ast.Call)
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)
            and not call.keywords
        ):
            rename = Rename(function.args.args[0].arg, call.args[0].id)
            copy = parse_module(ast.unparse(ast.Module(body=function.body, type_ignores=[])))
            body.extend(rename.visit(copy).body)
        else:
            body.append(statement)
    return ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))


_NESTED_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


class _DropComparisons(ast.NodeTransformer):
    """A test expression with each comparison replaced by a tuple of its operands that
    hold a site (the expected side left out): what runs in sandbox 1 when a site sits in a
    comprehension, whose variables it needs. `any(...)` and `all(...)` become `list(...)`,
    so every case is recorded; a check that needs more values than were recorded fails."""

    def visit_Call(self, node: ast.Call) -> Any:
        # any() stops at the first truthy tuple: every case is recorded through list()
        if isinstance(node.func, ast.Name) and node.func.id in ("any", "all") and node.args:
            return ast.Call(ast.Name("list", ast.Load()), [self.visit(node.args[0])], [])
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> Any:
        operands = [self.visit(o) for o in (node.left, *node.comparators)]
        kept = [o for o in operands if any(_site_number(n) is not None for n in ast.walk(o))]
        return ast.Tuple(elts=kept or [ast.Constant(True)], ctx=ast.Load())


def plan_tests(tests: str) -> TestPlan:
    """Split `tests` into call sites and checks; SyntaxError/ValueError if they do not parse."""
    tree = _inline_checks(parse_module(tests))
    local = _bound_names(tree)
    # The candidate's names: used by the tests, bound neither by them nor by Python. A builtin
    # stays the builtin even if the program redefines it, so `len(f(x))` is measured here.
    loaded = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    candidate = loaded - BUILTIN_NAMES - local
    candidate.discard(SITE_FUNCTION)
    finder = _SiteFinder(candidate)
    check_tree = ast.fix_missing_locations(finder.visit(tree))

    checks: list[Check] | None = []
    for statement in check_tree.body:
        check = _simple_check(statement.test) if isinstance(statement, ast.Assert) else None
        if check is None:
            checks = None
            break
        checks.append(check)

    class StripExpected(ast.NodeTransformer):
        """An assert becomes its sites alone, evaluated in order; the comparison stays out."""

        def visit_Assert(self, node: ast.Assert) -> Any:
            calls = [
                n
                for n in ast.walk(node.test)
                if _site_number(n) is not None  # type: ignore[arg-type]
            ]
            calls.sort(key=lambda n: int(n.args[0].value))  # type: ignore[attr-defined]
            if not calls:
                return ast.Pass()
            # (each site's own `lambda:` holds no site: sites are maximal expressions)
            nested = [
                n
                for scope in ast.walk(node.test)
                if isinstance(scope, _NESTED_SCOPES)
                for n in ast.walk(scope)
                if _site_number(n) is not None  # type: ignore[arg-type]
            ]
            if nested:  # lifted out of its comprehension, a site would miss its variables
                return ast.Expr(_DropComparisons().visit(node.test))
            return [ast.Expr(call) for call in calls]

    record_tree = ast.fix_missing_locations(
        StripExpected().visit(parse_module(ast.unparse(check_tree)))
    )
    return TestPlan(
        record_script=ast.unparse(record_tree),
        check_script=ast.unparse(check_tree),
        sites=finder.sites,
        checks=checks,
    )


# ---- the values that come back ------------------------------------------------------------
def _passes(check: Check, value: Any) -> bool:
    if check.op == "==":
        return bool(value == check.expected)
    if check.op == "!=":
        return bool(value != check.expected)
    if check.op == "is":
        return value is check.expected
    if check.op == "is not":
        return value is not check.expected
    return bool(value) if check.op == "truthy" else not value


# ---- running ----------------------------------------------------------------------------------
def run_tests(
    solution: str,
    tests: str,
    timeout: float = 5.0,
    memory_mb: int = 512,
    sandbox: str | None = None,
) -> SandboxResult:
    """Run `solution`, then `tests`, isolated; the verdict is decided outside the sandbox."""
    mode = check_available(sandbox)
    try:
        plan = plan_tests(tests)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        return SandboxResult(False, "invalid_tests", f"the tests do not parse: {err}")
    limits = Limits(timeout=timeout, memory_mb=memory_mb)
    output = run_child(
        {"mode": "record", "program": solution, "script": plan.record_script}, limits, mode
    )
    blocked = [r["blocked"] for r in output.records if isinstance(r.get("blocked"), str)]
    meta = {
        "blocked": blocked,
        "discarded_bytes": output.discarded_bytes,
        "isolated": output.isolated,
    }

    def failed(outcome: str, detail: str) -> SandboxResult:
        """A failure; one that followed a refused operation is reported as 'blocked'."""
        return SandboxResult(False, "blocked" if blocked else outcome, detail, **meta)

    if output.timed_out:
        return SandboxResult(False, "timeout", "ran past its time limit", **meta)
    values: dict[int, list[dict]] = {}
    for record in output.records:
        if "program_raised" in record:
            return failed("crash", f"{record['program_raised']}: {record.get('message', '')}")
        site = record.get("site")
        if type(site) is int and 0 <= site < len(plan.sites):
            values.setdefault(site, []).append(record)

    if plan.checks is not None:
        positions: Counter[int] = Counter()
        for check in plan.checks:
            entries = values.get(check.site, [])
            entry = entries[positions[check.site]] if positions[check.site] < len(entries) else None
            positions[check.site] += 1
            call = plan.sites[check.site]
            if entry is None:
                return failed("crash", f"{call} produced no value (the run ended early)")
            if "raised" in entry:
                return failed(
                    "crash", f"{call} raised {entry['raised']}: {entry.get('message', '')}"
                )
            if "unencodable" in entry:
                return failed(
                    "fail",
                    f"{call} returned a {entry['unencodable']} object; only plain data "
                    "(None, bool, numbers, str, bytes, lists, tuples, sets, dicts) is compared",
                )
            try:
                value = decode(entry.get("value"))
            except (ValueError, TypeError, RecursionError) as err:
                return failed("fail", f"{call} returned no plain data ({err})")
            if not _passes(check, value):
                return failed("fail", f"{call} returned {value!r}")
        return SandboxResult(True, "pass", **meta)

    # The general case: the test script itself decides, in a process without the candidate.
    wire = {
        str(k): [
            {
                key: entry[key]
                for key in ("value", "raised", "message", "unencodable")
                if key in entry
            }
            for entry in entries
        ]
        for k, entries in values.items()
    }
    verdict = run_child(
        {"mode": "check", "script": plan.check_script, "values": wire}, limits, mode
    )
    if verdict.timed_out:
        return SandboxResult(False, "timeout", "the tests ran past their time limit", **meta)
    results = [r for r in verdict.records if "passed" in r]
    if results and results[-1]["passed"] is True:
        return SandboxResult(True, "pass", **meta)
    if not results:
        return failed("crash", "the tests did not finish")
    last = results[-1]
    detail = f"{last.get('raised', '')}: {last.get('message', '')}".strip()
    return failed("fail" if last.get("raised") == "AssertionError" else "crash", detail)


@dataclass
class ProgramResult:
    """What running a program (the agents' python tool) gave."""

    outcome: str  # 'ok' | 'error' | 'timeout'
    stdout: str
    stderr: str
    returncode: int | None = None
    discarded_bytes: int = 0
    isolated: bool = True
    over_workdir: bool = False  # its work dir passed the cap: stopped, or 'error' if it ended


def run_program(
    program: str,
    timeout: float = 5.0,
    memory_mb: int = 512,
    sandbox: str | None = None,
    workdir: Path | None = None,
) -> ProgramResult:
    """Run a program in the sandbox and return its output (capped).

    workdir: a host folder the program sees as its (writable) work dir, instead of a
    private tmpfs; nothing else of the host is visible either way.
    """
    mode = check_available(sandbox)
    output = run_child(
        {"mode": "program", "program": program}, Limits(timeout, memory_mb), mode, workdir
    )
    if output.timed_out:
        outcome = "timeout"
    else:
        exits = [r for r in output.records if "exit" in r or "program_raised" in r]
        # ok: the program said it exited 0, and the sandbox ended so (not killed after
        # it, for what it left in the work dir)
        exited_cleanly = exits and exits[-1].get("exit") == 0 and output.returncode == 0
        outcome = "ok" if exited_cleanly and not output.over_workdir else "error"
    return ProgramResult(
        outcome,
        output.stdout,
        output.stderr,
        output.returncode,
        output.discarded_bytes,
        output.isolated,
        output.over_workdir,
    )
