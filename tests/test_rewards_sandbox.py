"""The code verifier's sandbox: timeouts, crashes, tampering, escapes -- reward 0, counted, run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from payoff.rewards import CodeVerifier, run_tests

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
        "import os\nos.chmod('tests.py', 0o666)\nopen('tests.py', 'a').write('pass')",
        "import os\nos.remove('tests.py')",
    ],
)
def test_editing_the_tests_is_tampering(attack):
    result = run_tests(attack + "\n" + GOOD, TESTS)
    assert result.outcome == "tampered" and not result.passed


def test_writing_outside_its_folder_is_blocked(tmp_path: Path):
    target = tmp_path / "escaped.txt"
    result = run_tests(f"open({str(target)!r}, 'w').write('x')\n" + GOOD, TESTS)
    assert result.outcome == "blocked"
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
