"""The code verifier: reward 1.0 when a completion passes its row's unit tests in the sandbox."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from payoff.sandbox import SandboxResult, check_available, run_tests

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def program_from(prompt: str, completion: str) -> str:
    """The program to test: a fenced block or a whole `def` stands alone; a body completes the prompt."""
    fenced = FENCE.findall(completion)
    code = fenced[-1] if fenced else completion
    if code.lstrip().startswith(("def ", "import ", "from ", "class ")) or "\ndef " in code:
        return code
    return prompt + code


class CodeVerifier:
    """Reward function: run `prompt + completion` against the `tests` column, isolated.

    The completion runs in a fresh OS sandbox (payoff.sandbox: namespaces, no network, no
    host files, no new processes); the expected values never enter it, so the score is 1.0
    only when the values its functions return equal them. Timeouts, crashes and blocked
    operations score 0.0 and are counted in `counts` (the trainer logs them as
    reward/code/<outcome>); a row whose tests do not parse scores None (skipped, counted as
    'invalid_tests'). Rows run in parallel threads, each in its own sandbox.

    sandbox: 'bwrap' (default: OS isolation, refused with a clear error where the machine
    has none) or 'unsafe-process' (an opt-in: a plain child process that can read and write
    what the trainer can; `counts['unisolated']` then counts every run).
    tests_column: the column whose tests decide (default 'tests'). A verifier of
    'visible_tests' checks only the example shown in the prompt: weak in what it checks,
    the loophole of the 'code-hack-grpo' recipe.

    Identical programs with identical tests in one call run once (a converged policy
    repeats itself), and share that verdict.
    """

    __name__ = "code"

    def __init__(
        self,
        timeout: float = 5.0,
        memory_mb: int = 512,
        workers: int = 4,
        sandbox: str | None = None,
        tests_column: str = "tests",
    ):
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.workers = workers
        self.sandbox = check_available(sandbox)  # fail at construction, not mid-training
        self.tests_column = tests_column
        self.counts: Counter[str] = Counter()
        self.last_failures: list[tuple[str, SandboxResult]] = []

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        **columns: Any,
    ) -> list[float | None]:
        tests: Sequence[str | None] | None = columns.get(self.tests_column)
        if tests is None:
            return [None] * len(completions)
        jobs: dict[tuple[str, str], int] = {}  # (program, tests) -> index of its run
        which: list[int | None] = []
        for prompt, completion, test in zip(prompts, completions, tests, strict=True):
            if not test:
                which.append(None)
                continue
            job = (program_from(str(prompt), completion), str(test))
            which.append(jobs.setdefault(job, len(jobs)))

        def one(job: tuple[str, str]) -> SandboxResult:
            return run_tests(job[0], job[1], self.timeout, self.memory_mb, self.sandbox)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            verdicts = list(pool.map(one, jobs))
        results = [None if w is None else verdicts[w] for w in which]
        scores: list[float | None] = []
        self.last_failures = []
        for i, result in enumerate(results):
            if result is None:
                scores.append(None)
                continue
            self.counts[result.outcome] += 1
            if result.blocked:
                self.counts["blocked_operations"] += len(result.blocked)
            if not result.isolated:
                self.counts["unisolated"] += 1
            if result.outcome == "invalid_tests":
                scores.append(None)
                continue
            if result.outcome in ("timeout", "crash", "blocked"):
                self.last_failures.append((completions[i], result))
            scores.append(float(result.passed))
        return scores
