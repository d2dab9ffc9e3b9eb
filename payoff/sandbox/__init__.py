"""Isolated execution of model-written code, with verdicts computed outside the sandbox.

    run_tests(program, "assert add(1, 2) == 3")   -> SandboxResult (pass / fail / crash / ...)
    run_program(program)                           -> ProgramResult (output of a program)

See docs/security.md for what the isolation guarantees and what it needs.
"""

from payoff.sandbox.isolation import (
    MODES,
    Limits,
    SandboxUnavailableError,
    check_available,
    resolve_mode,
)
from payoff.sandbox.verdict import (
    ProgramResult,
    SandboxResult,
    candidate_names,
    run_program,
    run_tests,
)

__all__ = [
    "MODES",
    "Limits",
    "ProgramResult",
    "SandboxResult",
    "SandboxUnavailableError",
    "check_available",
    "candidate_names",
    "resolve_mode",
    "run_program",
    "run_tests",
]
