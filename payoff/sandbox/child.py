"""The program that runs inside the sandbox. Standard library only; imports nothing of payoff.

It reads one JSON request from stdin, lowers its own resource limits, and then either

  - `record`: runs the candidate's program, then the test script with each candidate call
    site wrapped in `__payoff_site__(k, lambda: <site>)`; every value a site produces is
    written to the result pipe as plain data (or the name of the exception it raised).
    Assert statements arrive stripped of their expected values: only the calls are here.
  - `check`: runs a test script (no candidate code in this process) whose sites return the
    values recorded by `record`, decoded back to plain data; writes whether it passed.
  - `program`: runs a program and nothing else (the agents' python tool).

Nothing here is trusted by the parent beyond "these are the values the sites returned":
the candidate shares this process in `record` and may rewrite any of it, but it can only
ever report values, and the expected ones never enter this process.
"""

import base64
import builtins
import json
import os
import resource
import sys

BLOCKED_EVENTS = (
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.",
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "ctypes.dlopen",
    "ctypes.cdata",
    "ctypes.dlsym",
)
MAX_DEPTH = 64


def write_result(fd, record):
    data = (json.dumps(record, allow_nan=True) + "\n").encode()
    while data:
        written = os.write(fd, data)
        data = data[written:]


def set_limits(limits):
    """Lower this process's limits before any untrusted code runs (inherited by children)."""
    pairs = (
        (resource.RLIMIT_AS, limits["memory_bytes"]),
        (resource.RLIMIT_CPU, limits["cpu_seconds"]),
        (resource.RLIMIT_FSIZE, limits["file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_NPROC, limits["processes"]),
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in pairs:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass  # never raise a limit above what we were given


def encode(value, depth=0):
    """A value as typed JSON; only exact builtin types (no subclasses: they can redefine ==)."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        if kind is int and abs(value) >= 1 << 63:
            return {"int": str(value)}  # exact, whatever the parser's integer range
        return value
    if kind is list:
        return {"list": [encode(v, depth + 1) for v in value]}
    if kind is tuple:
        return {"tuple": [encode(v, depth + 1) for v in value]}
    if kind is set or kind is frozenset:
        return {kind.__name__: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": base64.b64encode(value).decode()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    raise TypeError(kind.__name__)


def site_value_record(site, produce):
    try:
        value = produce()
    except BaseException as err:  # SystemExit too: leaving early is not a value
        return None, {"site": site, "raised": type(err).__name__, "message": str(err)[:300]}
    try:
        return value, {"site": site, "value": encode(value)}
    except (TypeError, ValueError, RecursionError) as err:
        name = err.args[0] if isinstance(err, TypeError) and err.args else str(err)
        return value, {"site": site, "unencodable": str(name)[:100]}


def install_audit_hook(result_fd):
    blocked = []

    def hook(event, args):
        if event.startswith(BLOCKED_EVENTS):
            if len(blocked) < 20:
                blocked.append(event)
                write_result(result_fd, {"blocked": event})
            raise PermissionError("sandbox: " + event + " is not allowed")

    sys.addaudithook(hook)


class NotPlainData(ValueError):
    """A value that is not typed plain data as `encode` writes it."""


# How many keys of one set or dict may share a hash. Ints are their own hash below 2**61 - 1
# (-1 and -2 share one), so plain data never comes near; keys made to collide (k * (2**61 - 1)
# all hash to 0, and floats and tuples of them follow) make each insertion walk all the
# others: 40,000 such keys cost 8 s of the reader's CPU, a few MB of them hours.
SAME_HASH_LIMIT = 8


def refuse_shared_hashes(keys):
    """The keys, or NotPlainData when more than SAME_HASH_LIMIT of them share one hash: a
    set or dict built from them would take quadratic time. Unhashable keys raise TypeError."""
    counts = {}
    for key in keys:
        digest = hash(key)
        counts[digest] = counts.get(digest, 0) + 1
        if counts[digest] > SAME_HASH_LIMIT:
            shown = repr(key) if len(repr(key)) < 60 else type(key).__name__
            raise NotPlainData(
                f"more than {SAME_HASH_LIMIT} keys with one hash ({shown} among them): "
                f"keys made to collide"
            )
    return keys


def decode(node, depth=0):
    """Inverse of `encode`, strict: anything `encode` cannot have written is refused.

    The parent decodes sandbox 1's values with this (they may have been forged), and so
    does `check` for the values the parent forwards.
    """
    if depth > MAX_DEPTH:
        raise NotPlainData("nested too deeply")
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is not dict or len(node) != 1:
        raise NotPlainData("unexpected " + type(node).__name__)
    ((kind, body),) = node.items()
    if kind == "int" and type(body) is str:
        return int(body)
    if kind in ("list", "tuple", "set", "frozenset") and type(body) is list:
        items = [decode(v, depth + 1) for v in body]
        try:
            if kind in ("set", "frozenset"):
                refuse_shared_hashes(items)
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        except TypeError as err:  # an unhashable item in a set
            raise NotPlainData(str(err)) from None
    if kind == "dict" and type(body) is list:
        pairs = [
            (decode(pair[0], depth + 1), decode(pair[1], depth + 1))
            for pair in body
            if type(pair) is list and len(pair) == 2
        ]
        try:
            refuse_shared_hashes([key for key, _ in pairs])
            return dict(pairs)
        except TypeError as err:
            raise NotPlainData(str(err)) from None
    if kind == "bytes" and type(body) is str:
        return base64.b64decode(body, validate=True)
    if kind == "complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    raise NotPlainData("unknown value kind " + repr(kind))


def record(request, result_fd):
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(request["program"], "solution.py", "exec"), namespace)
    except BaseException as err:
        write_result(result_fd, {"program_raised": type(err).__name__, "message": str(err)[:300]})
        return

    def site(k, produce):
        value, entry = site_value_record(k, produce)
        write_result(result_fd, entry)
        return value

    namespace["__payoff_site__"] = site
    try:
        exec(compile(request["script"], "tests.py", "exec"), namespace)
    except BaseException as err:
        write_result(result_fd, {"script_raised": type(err).__name__, "message": str(err)[:300]})
        return
    write_result(result_fd, {"done": True})


def check(request, result_fd):
    recorded = {int(k): list(v) for k, v in request["values"].items()}

    def site(k, produce):
        values = recorded.get(k) or []
        if not values:
            raise RuntimeError(f"call site {k} produced no value in the candidate's run")
        entry = values.pop(0)
        if "raised" in entry:
            kind = getattr(builtins, entry["raised"], None)
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(entry.get("message", ""))
            raise RuntimeError(entry["raised"] + ": " + entry.get("message", ""))
        if "unencodable" in entry:
            raise TypeError(f"returned a {entry['unencodable']}, not plain data")
        return decode(entry["value"])

    namespace = {"__name__": "__main__", "__payoff_site__": site}
    try:
        exec(compile(request["script"], "tests.py", "exec"), namespace)
    except BaseException as err:
        write_result(
            result_fd, {"passed": False, "raised": type(err).__name__, "message": str(err)[:300]}
        )
        return
    write_result(result_fd, {"passed": True})


def program(request, result_fd):
    """Run a program; the exit status is its own (1 when it raised), as `python file.py` gives."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(request["program"], "program.py", "exec"), namespace)
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
        write_result(result_fd, {"exit": code})
        return code
    except BaseException as err:
        import traceback

        traceback.print_exc()
        write_result(result_fd, {"program_raised": type(err).__name__, "message": str(err)[:300]})
        return 1
    write_result(result_fd, {"exit": 0})
    return 0


def main():
    request = json.loads(sys.stdin.readline())
    result_fd = int(request["result_fd"])
    os.set_inheritable(result_fd, False)
    os.environ.clear()
    os.environ.update({"HOME": request["workdir"], "TMPDIR": request["workdir"]})
    os.chdir(request["workdir"])
    set_limits(request["limits"])
    sys.setrecursionlimit(2000)
    if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit and quit
        builtins.exit = builtins.quit = sys.exit
    install_audit_hook(result_fd)
    status = {"record": record, "check": check, "program": program}[request["mode"]](
        request, result_fd
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status or 0)


if __name__ == "__main__":
    main()
