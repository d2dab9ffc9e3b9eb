"""The code verifier's sandbox: timeouts, crashes, tampering, escapes -- reward 0, counted, run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from payoff.rewards import CodeVerifier
from payoff.sandbox import run_tests

TESTS = "assert double(2) == 4\nassert double(-1) == -2"
GOOD = "def double(x):\n    return 2 * x\n"


def test_a_correct_solution_passes():
    assert run_tests(GOOD, TESTS).outcome == "pass"


def test_a_wrong_solution_fails_its_asserts():
    assert run_tests("def double(x):\n    return x\n", TESTS).outcome == "fail"


def test_an_infinite_loop_times_out():
    result = run_tests("while True:\n    pass\n", TESTS, timeout=1.0)
    assert result.outcome == "timeout" and not result.passed


def test_a_crash_is_a_crash():
    assert run_tests("raise ValueError('boom')", TESTS).outcome == "crash"


def test_exhausting_memory_is_contained():
    result = run_tests("x = bytearray(4 * 1024**3)\n" + GOOD, TESTS, memory_mb=256)
    assert result.outcome == "crash" and "MemoryError" in result.detail


@pytest.mark.parametrize("escape", ["import sys\nsys.exit(0)", "import os\nos._exit(0)"])
def test_exiting_early_does_not_fake_a_pass(escape):
    assert not run_tests(escape, TESTS).passed


@pytest.mark.parametrize(
    "attack",
    [
        "open('tests.py', 'w').write('')",
        "import os\nos.chmod('.', 0o777)\nopen('tests.py', 'a').write('pass')",
    ],
)
def test_there_is_no_test_file_to_edit(attack):
    """The tests never enter the sandbox, so writing a 'tests.py' changes no verdict."""
    assert not run_tests(attack + "\ndef double(x):\n    return x\n", TESTS).passed
    assert run_tests(attack + "\n" + GOOD, TESTS).passed


def test_writing_outside_its_folder_fails_and_writes_nothing(tmp_path: Path):
    target = tmp_path / "escaped.txt"
    result = run_tests(f"open({str(target)!r}, 'w').write('x')\n" + GOOD, TESTS)
    assert result.outcome == "crash" and not result.passed
    assert not target.exists()


def test_writing_inside_its_folder_is_fine():
    assert run_tests("open('scratch.txt', 'w').write('ok')\n" + GOOD, TESTS).passed


def test_opening_a_socket_is_blocked():
    attack = "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
    assert run_tests(attack + GOOD, TESTS).outcome == "blocked"


def test_starting_a_process_is_blocked():
    assert (
        run_tests("import subprocess\nsubprocess.run(['true'])\n" + GOOD, TESTS).outcome
        == "blocked"
    )


def test_code_verifier_scores_and_counts_outcomes():
    verifier = CodeVerifier(timeout=1.0)
    prompts = ["def double(x):\n"] * 4
    completions = ["    return 2 * x\n", "    return x\n", "    while True: pass\n", GOOD]
    scores = verifier(prompts, completions, tests=[TESTS, TESTS, TESTS, None])
    assert scores == [1.0, 0.0, 0.0, None]  # prompt + body, wrong body, hang, no tests
    assert verifier.counts == {"pass": 1, "fail": 1, "timeout": 1}


def test_every_honest_python_task_solution_passes():
    """Every family of the python task, train and OOD, solved as its reference does."""
    import numpy as np

    from payoff.envs.tasks.python_functions import FAMILIES, OOD_FAMILIES, PythonFunctions

    task = PythonFunctions(tests_per_problem=5)
    rows, rng = [], np.random.default_rng(0)
    seen: set[str] = set()
    while len(seen) < len(FAMILIES) + len(OOD_FAMILIES):
        for split in ("train", "ood"):
            row = task._problem(rng, split)
            seen.add(row["key"].rsplit("_", 1)[0])
            rows.append(row)
    verifier = CodeVerifier(timeout=5.0)
    scores = verifier(
        [r["prompt"] for r in rows], [r["answer"] for r in rows], tests=[r["tests"] for r in rows]
    )
    assert scores == [1.0] * len(rows), verifier.last_failures[:3]
    wrong = verifier(
        [r["prompt"] for r in rows],
        ["    return None\n"] * len(rows),
        tests=[r["tests"] for r in rows],
    )
    assert wrong == [0.0] * len(rows)


def test_the_agents_python_tool_runs_programs():
    from payoff.envs.text.tools import python_runner

    tool = python_runner(timeout=5.0)
    assert tool.fn(code="print(6 * 7)") == "ok: 42"
    assert tool.fn(code="raise ValueError('no')").startswith("error:")
    assert "ValueError: no" in tool.fn(code="raise ValueError('no')")
