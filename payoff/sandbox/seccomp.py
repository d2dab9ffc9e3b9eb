"""A seccomp filter (classic BPF, the format bubblewrap's `--seccomp FD` loads) for sandboxed code.

It refuses new processes (fork, vfork, clone without CLONE_THREAD; clone3 answers ENOSYS so
the C library falls back to clone for threads), leaving the process group or session the
sandbox's processes are killed by (setsid, setpgid) and a few kernel interfaces that code under
test has no use for and that widen the kernel's attack surface (ptrace, namespaces, mount,
bpf, perf, keyrings, io_uring, userfaultfd). Everything else is allowed: the namespaces
and the read-only mounts do the rest.

Why processes go here and not in RLIMIT_NPROC: when the trainer runs as root, the kernel
exempts root's user from that limit, so it does nothing in CI or in a container.

A syscall made through another architecture's table (i386 via int 0x80, x32) is killed, so
the numbers below cannot be sidestepped.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

# struct sock_filter instructions
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_GREATER_EQUAL = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JUMP_SET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K

_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000

_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16
_CLONE_THREAD = 0x00010000

# (audit arch, clone, clone3, refused with EPERM)
_TABLES = {
    "x86_64": (
        0xC000003E,
        56,
        435,
        {
            "fork": 57,
            "vfork": 58,
            "setpgid": 109,
            "setsid": 112,
            "ptrace": 101,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "unshare": 272,
            "perf_event_open": 298,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "bpf": 321,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        220,
        435,
        {
            "setpgid": 154,
            "setsid": 157,
            "ptrace": 117,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "unshare": 97,
            "perf_event_open": 241,
            "setns": 268,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "bpf": 280,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
        },
    ),
}


def supported() -> bool:
    return platform.machine() in _TABLES


@functools.cache
def filter_program() -> bytes:
    """The filter for this machine's architecture, as bytes of `struct sock_filter`."""
    machine = platform.machine()
    if machine not in _TABLES:
        raise OSError(f"no seccomp table for architecture {machine!r}")
    arch, clone, clone3, refused = _TABLES[machine]
    program: list[tuple[int, int, int, int]] = []

    def emit(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> None:
        program.append((code, jump_true, jump_false, k))

    refused_numbers = sorted(set(refused.values()))
    emit(_LOAD_WORD, _OFFSET_ARCH)
    emit(_JUMP_EQUAL, arch, 1, 0)
    emit(_RETURN, _KILL_PROCESS)
    emit(_LOAD_WORD, _OFFSET_NR)
    if machine == "x86_64":  # the x32 ABI: same arch value, numbers with bit 30 set
        emit(_JUMP_GREATER_EQUAL, 0x40000000, 0, 1)
        emit(_RETURN, _KILL_PROCESS)
    emit(_JUMP_EQUAL, clone3, 0, 1)
    emit(_RETURN, _ERRNO | errno.ENOSYS)
    for number in refused_numbers:
        emit(_JUMP_EQUAL, number, 0, 1)
        emit(_RETURN, _ERRNO | errno.EPERM)
    emit(_JUMP_EQUAL, clone, 0, 3)
    emit(_LOAD_WORD, _OFFSET_ARG0)  # clone's flags (low 32 bits)
    emit(_JUMP_SET, _CLONE_THREAD, 1, 0)
    emit(_RETURN, _ERRNO | errno.EPERM)
    emit(_RETURN, _ALLOW)
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
