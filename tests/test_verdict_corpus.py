"""payoff's code verdict against CPython's, on the differential corpus of verdict_corpus.py.

The contract: `run_tests(solution, tests)` passes exactly when `solution + "\\n" + tests`, run
as one plain program by a fresh `python -I`, exits with status 0, for every honest and wrong
solution; and fails every hostile one.
"""

from __future__ import annotations

import functools
from collections import Counter

import pytest
import verdict_corpus as corpus

# Forms the corpus must hold (issue #56's list), each with an honest and a wrong solution.
REQUIRED_FORMS = {
    "eq", "not_ne", "if_raise", "is_bool", "bare", "is_none", "chained_lt", "chained_compare",
    "isclose", "abs_diff", "sorted", "len_in", "eq_message", "loop", "all_genexp", "not_any_ne",
    "all_map_lambda", "listcomp", "nested_comp", "nested_listcomp", "walrus", "genexp_walrus",
    "any_and", "all_if_filter", "all_or", "listcomp_if_filter", "humaneval", "helper",
    "no_mutation", "returns_none", "same_list_twice", "same_row_twice", "rows", "nested",
    "try_else", "raises_helper", "context_manager", "isinstance", "tuple_except",
    "none_is_type_error", "next", "islice_lazy", "push_pop", "lifo_len", "own_eq", "counter",
    "permutations",
}  # fmt: skip


@functools.cache
def cases() -> tuple[corpus.Case, ...]:
    return tuple(corpus.build_corpus())


def misfiled(cases_and_verdicts) -> list[str]:
    """Honest cases CPython fails and wrong ones it passes: the corpus's own errors."""
    return [
        f"{case.name} ({case.kind}): reference {detail}"
        for case, (passed, detail) in cases_and_verdicts
        if (case.kind == "honest" and not passed) or (case.kind == "wrong" and passed)
    ]


def test_corpus_size_and_makeup():
    all_cases = cases()
    print(corpus.makeup_table(list(all_cases)))
    kinds = Counter(c.kind for c in all_cases)
    assert len(all_cases) >= 500, len(all_cases)
    assert min(kinds[k] for k in corpus.KINDS) >= 150, kinds
    by_form: dict[str, set[str]] = {}
    for c in all_cases:
        by_form.setdefault(c.form, set()).add(c.kind)
    assert by_form.keys() >= REQUIRED_FORMS, REQUIRED_FORMS - by_form.keys()
    lacking = sorted(f for f in REQUIRED_FORMS if not {"honest", "wrong"} <= by_form[f])
    assert not lacking, f"forms without an honest and a wrong solution: {lacking}"
    # every solution variant of every task is in the corpus at least once
    for task in corpus.VALUE_TASKS + corpus.SCENARIO_TASKS:
        named = {c.name.split("/")[2] for c in all_cases if c.name.startswith(task.name + "/")}
        missing = {v.name for v in task.honest + task.wrong} - named
        assert not missing, f"{task.name}: variants never used: {sorted(missing)}"


@pytest.mark.slow
def test_payoff_verdict_equals_cpython_on_the_corpus():
    """Every honest and wrong case gets CPython's verdict from run_tests; every hostile one
    fails. The corpus checks itself too: honest cases pass CPython and wrong ones fail it.
    On failure: a table of every case that disagrees."""
    outcomes = corpus.evaluate(list(cases()), workers=4)
    bad = misfiled((o.case, (o.reference_passed, o.reference_detail)) for o in outcomes)
    assert not bad, "the corpus itself is wrong:\n" + "\n".join(bad)
    assert all(o.agrees for o in outcomes), corpus.mismatch_table(outcomes)


def test_solutions_reading_memory_and_files_fail_under_unsafe_process():
    """Under unsafe-process the candidate's parent is the trainer, which holds the tests: a
    solution that reads its parent's memory, the test file or other processes still fails."""
    readers = [c for c in cases() if c.kind == "hostile" and "hostile:reads_" in c.name]
    assert len(readers) >= 10
    outcomes = corpus.evaluate(readers, workers=4, sandbox="unsafe-process")
    assert not any(o.payoff_passed for o in outcomes), corpus.mismatch_table(outcomes)
