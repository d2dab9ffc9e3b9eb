"""Attacks on the agents' tools (issue #56): a calculator call whose cost grows with an
argument, tool text that spells the tokenizer's special tokens, memory that outlives its
episode, and a symlink out of a document folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from payoff.core.errors import ConfigError
from payoff.envs.text.env import ToolEnv
from payoff.envs.text.tools import (
    DocumentIndex,
    ToolCall,
    calculator,
    memory_tool,
    run_tool_call,
    safe_eval,
)

ROOT = Path(__file__).resolve().parents[1]


# ---- 1. the calculator: costs bounded before computing ------------------------------------
@pytest.mark.parametrize(
    "expression",
    ["round(1, -10**7)", "round(1, -99**4)", "round(7, -(10**6))", "round(1.5, 10**7)"],
)
def test_calculator_refuses_round_with_huge_ndigits_at_once(expression):
    """round(int, -n) computes 10**n in C, holding the GIL: 11 s for n = 10**7 on 9fb6ff5,
    past the tool's 10 s timeout and deaf to Ctrl-C. It is refused before it runs."""
    tools = {"calculator": calculator()}
    start = time.perf_counter()
    text, status = run_tool_call(tools, ToolCall("calculator", {"expression": expression}))
    assert time.perf_counter() - start < 1.0
    assert status == "malformed" and "round's ndigits" in text and "1234" in text


def test_calculator_still_rounds_within_the_bounds():
    assert safe_eval("round(123456, -2)") == 123500
    assert safe_eval("round(7.25, 1)") == 7.2
    assert safe_eval("round(2**99, -1234)") == 0
    assert safe_eval("round(3.14159, 1234)") == 3.14159


def test_every_calculator_form_over_big_operands_is_fast():
    """Each function and operator, over the biggest operands an expression can name, stays
    in milliseconds (refused or computed): nothing needs a timeout to be stopped."""
    atoms = ["9**99", "-10**7", "10**7", "1e308", "1e-308", "0.5", "-1", "0", "3"]
    forms = [
        "({a})**({b})",
        "({a})*({b})",
        "({a})//({b})",
        "({a})%({b})",
        "({a})/({b})",
        "round({a},{b})",
        "round({a})",
        "sqrt({a})",
        "max({a},{b})",
        "abs({a})",
    ]
    slowest = 0.0
    for form in forms:
        for a in atoms:
            for b in atoms:
                inner = form.format(a=a, b=b)
                for expression in (inner, form.format(a=inner, b=b)):
                    start = time.perf_counter()
                    try:
                        safe_eval(expression)
                    except (ValueError, ArithmeticError, TypeError):
                        pass
                    slowest = max(slowest, time.perf_counter() - start)
    assert slowest < 2.0  # ms when idle; on 9fb6ff5 round(9**99, -10**7) took 11 s


_SPINNING_TOOL = """
import sys, time
from payoff.envs.text.tools import Tool, ToolCall, run_tool_call
def spin(x):
    while True:
        pass
tools = {"t": Tool("t", "", {"type": "object", "properties": {"x": {"type": "string"}}}, spin,
                   timeout=60.0)}
print("calling", flush=True)
try:
    run_tool_call(tools, ToolCall("t", {"x": "a"}))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child is POSIX")
def test_ctrl_c_reaches_a_tool_call_in_progress():
    """A tool runs in a thread and the episode waits on it: Ctrl-C (SIGINT) interrupts the
    wait at once, not after the tool's 60 s timeout."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SPINNING_TOOL],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout.readline().strip() == "calling"
        time.sleep(0.3)
        start = time.perf_counter()
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=20) == 3
        assert time.perf_counter() - start < 5.0
        assert child.stdout.read().strip() == "interrupted"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# ---- 3. the memory tool: nothing outlives its episode ------------------------------------
_SET = '<tool>{"name": "memory", "arguments": {"op": "set", "key": "k", "value": "secret"}}</tool>'
_GET = '<tool>{"name": "memory", "arguments": {"op": "get", "key": "k"}}</tool>'


def test_memory_starts_empty_at_every_reset():
    env = ToolEnv([memory_tool()], max_turns=4)
    env.reset({"question": "remember", "answer": "x"})
    assert env.step(_SET).observation[0]["content"] == "ok"
    assert env.step(_GET).observation[0]["content"] == "secret"
    env.reset({"question": "recall", "answer": "x"})  # the next episode, same env
    assert env.step(_GET).observation[0]["content"] == "not found"


def test_memory_is_not_shared_by_the_envs_of_a_batch():
    """A task that builds its tools once and gives them to every env (make_env) still gives
    each episode its own memory."""
    tools = [memory_tool()]
    writer, reader = ToolEnv(tools), ToolEnv(tools)
    writer.reset({"question": "q", "answer": "x"})
    reader.reset({"question": "q", "answer": "x"})
    writer.step(_SET)
    assert reader.step(_GET).observation[0]["content"] == "not found"
    assert writer.step(_GET).observation[0]["content"] == "secret"


def test_memory_given_contents_start_every_episode_unchanged():
    preset = {"k": "given"}
    env = ToolEnv([memory_tool(preset)])
    env.reset({"question": "q", "answer": "x"})
    env.step(_SET)
    env.reset({"question": "q", "answer": "x"})
    assert env.step(_GET).observation[0]["content"] == "given"
    assert preset == {"k": "given"}


# ---- 4. the document folder: no symlink followed out of it -------------------------------
def test_document_folder_skips_symlinks_and_says_so(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("password hunter2 lives here")
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "paris.txt").write_text("Paris is the capital of France.")
    (docs / "sub" / "rome.md").write_text("Rome is the capital of Italy.")
    (docs / "notes.txt").symlink_to(outside / "secret.txt")  # a file link out
    (docs / "linked").symlink_to(outside, target_is_directory=True)  # a folder link out
    (docs / "alias.txt").symlink_to(docs / "paris.txt")  # a link inside: skipped too
    with pytest.warns(UserWarning, match=r"skipped 2 symbolic link\(s\)"):
        index = DocumentIndex(docs)
    assert sorted(index.names) == ["paris", "rome"]
    assert not any("hunter2" in text for text in index.texts)
    assert index.search("password hunter2") == "no results"
    with pytest.raises(KeyError):
        index.open("notes")


def test_a_folder_of_only_symlinks_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("hunter2")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.warns(UserWarning), pytest.raises(ConfigError, match="holds no .txt or .md"):
        DocumentIndex(docs)
