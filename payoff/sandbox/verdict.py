"""Unit tests for untrusted code, with a verdict that means what Python means and that
nothing of the candidate's can forge.

Two processes in one sandbox, joined by a pair of pipes (child.py's `pair`):

  - the candidate's: runs the solution, then answers requests about its objects;
  - the tests': runs the test script as real Python (asserts, loops, comprehensions,
    `try`/`except`, helpers: everything as CPython runs it), in a process that never holds
    the candidate's code. Each name the tests take from the candidate (used, not bound by
    the tests, not a builtin) stands for the candidate's object: calling it sends the
    arguments over and brings back the return value; containers that cross are linked, so
    what either side changes in them is seen by the other; an exception comes back as a
    builtin class, or a class made on this side deriving from its builtin base.

Only data, links, builtins by name and handles cross (payoff/sandbox/child.py). A handle (an
object of the candidate's) is equal only to itself and decides no truth value of its own, so
an `__eq__` that is always true, a patched `AssertionError`, an early exit, a printed token:
none of it reaches the verdict, which is the test script's own outcome in the tests' process.
What no correct solution does is counted as failing even where CPython would let it pass:
ending the process, raising StopIteration out of a call (it ends `all(map(...))` early) or
SystemExit, answering outside the protocol.
"""

from __future__ import annotations

import ast
import builtins
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from payoff.core.pysource import parse_module
from payoff.sandbox.isolation import ChildOutput, Limits, check_available, run_child

BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class SandboxResult:
    """Verdict of one run: passed, or why not.

    outcome: 'pass'; 'fail' (an assertion failed, or the candidate did what no correct
    solution does); 'crash' (the program or the tests raised, or the run ended early);
    'timeout'; 'blocked' (failed after trying an operation the sandbox refuses: processes,
    sockets, ctypes); 'invalid_tests' (the tests themselves do not parse: a data problem).
    """

    passed: bool
    outcome: str
    detail: str = ""
    blocked: list[str] = field(default_factory=list)
    discarded_bytes: int = 0
    isolated: bool = True


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


def candidate_names(tests: str) -> list[str]:
    """The names the tests take from the candidate: used by them, bound neither by them nor
    by Python. A builtin stays the builtin even if the program redefines it, so `sorted`,
    `all` or `isinstance` in the tests are Python's. SyntaxError/ValueError if the tests do
    not parse."""
    tree = parse_module(tests)
    loaded = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return sorted(loaded - BUILTIN_NAMES - _bound_names(tree))


# ---- running ----------------------------------------------------------------------------------
def _run_pair(
    solution: str, tests: str, names: list[str], limits: Limits, mode: str
) -> ChildOutput:
    """The verdict's two processes in one sandbox (child.py's `pair`): the tests travel on a
    pipe only the tests' process reads, the candidate reports on a channel of its own
    (ChildOutput.side_records; the tests' records are ChildOutput.records)."""
    tests_read, tests_write = os.pipe()
    side_read, side_write = os.pipe()

    def feed() -> None:  # the tests may be longer than a pipe holds: written meanwhile
        try:
            with os.fdopen(tests_write, "wb") as pipe:
                pipe.write(tests.encode())
        except OSError:  # the sandbox ended without reading them
            pass

    writer = threading.Thread(target=feed, name="payoff-tests", daemon=True)
    writer.start()
    try:
        output = run_child(
            {
                "mode": "pair",
                "program": solution,
                "names": names,
                "tests_fd": tests_read,
                "candidate_fd": side_write,
            },
            limits,
            mode,
            extra_fds=(tests_read, side_write),
            side_channel=side_read,
        )
    finally:
        os.close(side_read)
        writer.join(timeout=1)
    return output


def _failure_detail(record: dict, tests: str) -> str:
    """Where the tests stopped and why, with the last calls to the candidate."""
    lines = tests.splitlines()
    line = record.get("line")
    where = ""
    if type(line) is int and 0 < line <= len(lines):
        where = f"line {line}: {lines[line - 1].strip()[:200]}: "
    raised = str(record.get("raised", ""))
    message = str(record.get("message", ""))
    violations = record.get("violations") or []
    if violations:
        why = str(violations[0])
    else:
        why = f"{raised}: {message}" if message else raised
    calls = record.get("calls") or []
    shown = f" ({'; '.join(str(c) for c in calls[-2:])})" if calls else ""
    return f"{where}{why}{shown}"


def run_tests(
    solution: str,
    tests: str,
    timeout: float = 5.0,
    memory_mb: int = 512,
    sandbox: str | None = None,
) -> SandboxResult:
    """Run `solution`, then `tests` against it, each in its own process; the verdict is the
    test script's outcome in the process that never held the solution."""
    mode = check_available(sandbox)
    try:
        names = candidate_names(tests)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        return SandboxResult(False, "invalid_tests", f"the tests do not parse: {err}")
    limits = Limits(timeout=timeout, memory_mb=memory_mb)
    output = _run_pair(solution, tests, names, limits, mode)
    candidate_records = output.side_records
    blocked = [
        r["blocked"]
        for r in candidate_records + output.records
        if isinstance(r.get("blocked"), str)
    ]
    meta = {
        "blocked": blocked,
        "discarded_bytes": output.discarded_bytes,
        "isolated": output.isolated,
    }

    def failed(outcome: str, detail: str) -> SandboxResult:
        """A failure; one that followed a refused operation is reported as 'blocked'."""
        return SandboxResult(False, "blocked" if blocked else outcome, detail, **meta)

    for record in candidate_records:  # (the candidate's own word: it can only fail itself)
        if "program_raised" in record:
            message = str(record.get("message", ""))[:300]
            return failed("crash", f"the solution raised {record['program_raised']}: {message}")
    verdicts = [r for r in output.records if "passed" in r]
    if not verdicts:
        if output.timed_out:
            return SandboxResult(False, "timeout", "ran past its time limit", **meta)
        return failed("crash", "the tests did not finish")
    verdict = verdicts[-1]
    violations = [r for r in output.records if "violation" in r]
    if verdict["passed"] is True and not violations:
        return SandboxResult(True, "pass", **meta)
    detail = _failure_detail(verdict, tests)
    if violations or verdict.get("raised") == "AssertionError":
        return failed("fail", detail)
    return failed("crash", detail)


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
