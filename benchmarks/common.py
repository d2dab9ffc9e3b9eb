"""Shared by benchmark scripts: each writes its own section of docs/benchmarks.md.

A section sits between `<!-- BEGIN name -->` and `<!-- END name -->`, so scripts can be
re-run one at a time without clobbering each other's results.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS_MD = ROOT / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Every table below is written by a script under `benchmarks/`, which runs payoff and the
reference library side by side in one process tree on the same machine and prints the
ratio. The command that produced each section is given with it. Machines are noisy: rerun
the command to reproduce, and compare ratios rather than absolute seconds.
"""


def machine() -> str:
    cpus = os.cpu_count()
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return f"{platform.processor() or platform.machine()}, {cpus} CPU cores, Python {platform.python_version()}, torch {torch_version}"


def command_line() -> str:
    script = os.path.relpath(sys.argv[0], ROOT)
    return "python " + " ".join(shlex.quote(a) for a in [script, *sys.argv[1:]])


def write_section(name: str, title: str, body: str) -> Path:
    """Replace (or append) the section `name` of docs/benchmarks.md."""
    BENCHMARKS_MD.parent.mkdir(parents=True, exist_ok=True)
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else HEADER
    section = (
        f"<!-- BEGIN {name} -->\n## {title}\n\n"
        f"Command: `{command_line()}`  \nMeasured: {time.strftime('%Y-%m-%d %H:%M')} on {machine()}\n\n"
        f"{body.strip()}\n<!-- END {name} -->"
    )
    pattern = re.compile(
        rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    tmp = BENCHMARKS_MD.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(BENCHMARKS_MD)
    return BENCHMARKS_MD


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append(
            "| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row) + " |"
        )
    return "\n".join(lines)


def worker_result(script: str, job: dict[str, Any], label: str) -> dict[str, Any]:
    """Run `python SCRIPT --worker JOB` in a fresh process; its last stdout line is the result.

    A fresh process per trial keeps the libraries apart (imports, threads, caches) and lets
    each measure its own peak memory. Prints one line: solved or not, seconds and steps.
    """
    out = subprocess.run(
        [sys.executable, script, "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"{label}: {'solved' if result['solved'] else 'NOT solved'} in "
        f"{result['seconds']:.2f} s, {result['steps']} steps",
        flush=True,
    )
    return result
