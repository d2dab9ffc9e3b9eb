"""Run untrusted code against unit tests in a separate process, and never let it hurt the run.

Each run gets:
  - a throw-away working directory holding `solution.py` and `tests.py` (tests read-only,
    their hash checked afterwards: a changed test file counts as tampering);
  - a child `python -I` with rlimits: address space (memory), CPU seconds, file size,
    no new processes;
  - an audit hook (installed before the solution runs, and impossible to remove from
    Python) that refuses sockets, subprocesses, and opening files for writing outside
    the working directory, and refuses touching the tests;
  - a wall-clock timeout; the whole process group is killed when it runs over.

The verdict is trusted only when the child prints a secret token after the tests pass, so
`sys.exit(0)` or `os._exit(0)` inside the solution cannot fake a pass.

This is a guard against accidents and crude reward hacks of a model in training, not a
security boundary against a determined attacker (for that, run in a container or VM).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Runs inside the child. It reads the token and the limits on stdin, installs the guards,
# then executes solution + tests in one namespace.
RUNNER = r"""
import json, os, sys
config = json.loads(sys.stdin.readline())
token, workdir = config["token"], os.path.realpath(config["workdir"])
tests_path = os.path.join(workdir, "tests.py")
solution = open(os.path.join(workdir, "solution.py")).read()
tests = open(tests_path).read()
BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
           "os.fork", "os.kill", "pty.", "ctypes.", "os.startfile")

def guard(event, args):
    if event.startswith(BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args[0], args[1], args[2]
        if isinstance(path, int):
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & 3)
        real = os.path.realpath(os.fsdecode(path)) if path is not None else ""
        if writing and (real == tests_path or not real.startswith(workdir + os.sep)):
            raise PermissionError(f"sandbox: writing {real} is not allowed")
    if event in ("os.remove", "os.rename", "os.chmod", "os.rmdir", "os.truncate", "os.utime",
                 "shutil.rmtree", "shutil.move", "os.link", "os.symlink"):
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                real = os.path.realpath(os.fsdecode(arg))
                if real == tests_path or not real.startswith(workdir + os.sep):
                    raise PermissionError(f"sandbox: {event} on {real} is not allowed")

sys.addaudithook(guard)
namespace = {"__name__": "__main__"}
try:
    exec(compile(solution, "solution.py", "exec"), namespace)
    exec(compile(tests, "tests.py", "exec"), namespace)
except BaseException as err:  # SystemExit included: exiting early is not passing
    sys.stderr.write(f"{type(err).__name__}: {err}\n")
    sys.stderr.flush()
    os._exit(1)
sys.stdout.write("\n" + token + "\n")
sys.stdout.flush()
os._exit(0)
"""


@dataclass
class SandboxResult:
    """Verdict of one run: passed, or why not.

    'tampered': touched the tests; 'blocked': tried a forbidden operation (network,
    subprocess, writing outside its folder); 'timeout', 'crash', 'fail' (an assert failed).
    """

    passed: bool
    outcome: str  # 'pass' | 'fail' | 'timeout' | 'crash' | 'tampered' | 'blocked'
    detail: str = ""


def _limits(memory_mb: int, cpu_seconds: int):
    def apply() -> None:
        import resource

        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # 1 MiB per file
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_tests(
    solution: str, tests: str, timeout: float = 5.0, memory_mb: int = 512
) -> SandboxResult:
    """Execute `solution` then `tests` (assert lines) in a sandboxed child process."""
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="payoff-sandbox-") as workdir:
        work = Path(workdir)
        (work / "solution.py").write_text(solution)
        tests_file = work / "tests.py"
        tests_file.write_text(tests)
        tests_file.chmod(0o444)
        digest = hashlib.sha256(tests.encode()).hexdigest()
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "PYTHONDONTWRITEBYTECODE": "1",
            "no_proxy": "*",
            "http_proxy": "http://0.0.0.0:9",
            "https_proxy": "http://0.0.0.0:9",
        }
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", RUNNER],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill takes any children too
            preexec_fn=_limits(memory_mb, max(1, int(timeout) + 1)),
        )
        try:
            out, err = process.communicate(
                json.dumps({"token": token, "workdir": workdir}).encode() + b"\n", timeout=timeout
            )
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return SandboxResult(False, "timeout", f"ran past {timeout:g} s")
        finally:
            _kill_group(process)
        tampered = (
            not tests_file.is_file()
            or hashlib.sha256(tests_file.read_bytes()).hexdigest() != digest
        )
        stderr = err.decode(errors="replace").strip()
        if tampered or ("sandbox:" in stderr and "tests.py" in stderr):
            return SandboxResult(False, "tampered", stderr[-300:] or "tests.py was changed")
        if "sandbox:" in stderr:
            return SandboxResult(False, "blocked", stderr[-300:])
        if process.returncode == 0 and out.decode(errors="replace").rstrip().endswith(token):
            return SandboxResult(True, "pass")
        if "AssertionError" in stderr:
            return SandboxResult(False, "fail", stderr[-300:])
        return SandboxResult(False, "crash", stderr[-300:] or f"exit status {process.returncode}")


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
