"""The code verifier: reward 1.0 when a completion passes its row's unit tests in the sandbox."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from payoff.rewards.sandbox import SandboxResult, run_tests

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def program_from(prompt: str, completion: str) -> str:
    """The program to test: a fenced block or a whole `def` stands alone; a body completes the prompt."""
    fenced = FENCE.findall(completion)
    code = fenced[-1] if fenced else completion
    if code.lstrip().startswith(("def ", "import ", "from ", "class ")) or "\ndef " in code:
        return code
    return prompt + code


class CodeVerifier:
    """Reward function: run `prompt + completion` against the `tests` column.

    Timeouts, crashes, blocked operations and test tampering all score 0.0 and are counted
    in `counts` (the trainer logs them as reward/code/<outcome>). Rows run in parallel
    threads, each in its own sandboxed process.
    """

    __name__ = "code"

    def __init__(self, timeout: float = 5.0, memory_mb: int = 512, workers: int = 4):
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.workers = workers
        self.counts: Counter[str] = Counter()
        self.last_failures: list[tuple[str, SandboxResult]] = []

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        tests: Sequence[str | None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if tests is None:
            return [None] * len(completions)

        def one(i: int) -> SandboxResult | None:
            if not tests[i]:
                return None
            program = program_from(str(prompts[i]), completions[i])
            return run_tests(program, str(tests[i]), self.timeout, self.memory_mb)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            results = list(pool.map(one, range(len(completions))))
        scores: list[float | None] = []
        self.last_failures = []
        for i, result in enumerate(results):
            if result is None:
                scores.append(None)
                continue
            self.counts[result.outcome] += 1
            if result.outcome in ("timeout", "crash", "tampered", "blocked"):
                self.last_failures.append((completions[i], result))
            scores.append(float(result.passed))
        return scores
