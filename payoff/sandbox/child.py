"""The program that runs inside the sandbox. Standard library only; imports nothing of payoff.

It reads one JSON request from stdin, lowers its own resource limits, and then runs as

  - `pair`: a code verdict. It forks the tests' process, which runs the test script as real
    Python and never holds the candidate's code (each name the tests take from the candidate
    is a `Remote`: using it is a request to the candidate's process), then the candidate's,
    which runs the solution and answers those requests on a pair of pipes (look up a name,
    call, get an attribute, iterate, compare two of its objects, ...). The tests' process
    writes whether the script passed.
  - `program`: runs a program and nothing else (the agents' python tool).

What crosses between the two processes is plain data (None, bool, int, float, complex, str,
bytes, tuples and frozensets of data; range, dict views, Fraction, Decimal), builtin
classes and exceptions by name, *links*: mutable containers (list, dict, set, bytearray,
deque, OrderedDict, Counter, defaultdict) both sides hold a copy of, kept equal message by
message, so identity, aliasing and mutation are Python's; and *handles*: an object of one
side that the other holds as a `Remote` (a class of the candidate's as a mirror class). An
exception comes back as its nearest builtin class (a class of the candidate's named
`ValueError` that does not derive from it is not one), or as a class made here that derives
from it, for `except TheirError:`.

The candidate's process may rewrite anything in itself, including this file's functions: it
can only ever answer requests with data, links, handles and builtin exceptions, which is what
some honest solution could have answered too. A handle is never compared by its own `==`
with the tests' values: a candidate's object equals only itself there, and its truth value
is not its own to decide.

Why one file of some 1,500 lines: it is one program, and the sandbox holds exactly this
file. payoff.sandbox.isolation compiles it once and mounts that one file read-only into an
otherwise empty root, where `python -I -S` can import nothing beside it; split into modules,
the sandbox would have to mount a package and trust an import path inside. Its parts (plain
data and links, the conversation of `Peer` and `Remote`, what each side serves, the modes)
are one protocol, each part written against the others.
"""

import base64
import builtins
import contextlib
import io
import json
import operator
import os
import reprlib
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
MAX_MESSAGE_BYTES = 64 << 20  # one message between the two processes
NAME_CHARS = 200  # of a name, a message or a type shown in a verdict's detail


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


# ---- what a process does to itself before untrusted code runs ------------------------------
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP = 4, 38, 22, 24
SECCOMP_MODE_FILTER = 2


_LIBC = []


def _libc():
    """The C library, through ctypes (loaded once per process tree, before any audit hook)."""
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def harden(seccomp_filter):
    """What a process does to itself before untrusted code runs (each of a verdict's two
    processes after its fork; a program's without bubblewrap): no core file or
    /proc/<pid>/mem of it for others of its user; no capabilities (a root trainer's
    CAP_SYS_PTRACE would read the trainer's memory); no process of its own; the sandbox's
    seccomp filter (no new processes, no ptrace, so none outlives the verdict or reads
    another). Returns what could not be done, for the record."""
    import ctypes

    libc = _libc()
    missing = []
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        missing.append("dumpable")
    for capability in range(64):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # fails past the last one: fine

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: empty
    if libc.capset(ctypes.byref(header), data) != 0:
        missing.append("capabilities")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        missing.append("no_new_privs")
    try:  # no process of its own (root's user is exempt: the seccomp filter holds there)
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    except (ValueError, OSError):
        pass
    if seccomp_filter:
        program = base64.b64decode(seccomp_filter)

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

        fprog = Program(len(program) // 8, program)
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            missing.append("seccomp")
    else:
        missing.append("seccomp")
    return missing


def install_audit_hook(result_fd):
    blocked = []

    def hook(event, args):
        if event.startswith(BLOCKED_EVENTS):
            if len(blocked) < 20:
                blocked.append(event)
                write_result(result_fd, {"blocked": event})
            raise PermissionError("sandbox: " + event + " is not allowed")

    sys.addaudithook(hook)


# ---- plain data ---------------------------------------------------------------------------------
class NotPlainData(ValueError):
    """A value that is not typed plain data as `encode` writes it."""


# How many keys of one set or dict may share a hash. Ints are their own hash below 2**61 - 1
# (-1 and -2 share one), so plain data never comes near; keys made to collide (k * (2**61 - 1)
# all hash to 0, and floats and tuples of them follow) make each insertion walk all the
# others: the reader's time grows with the square of their number.
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


MUTABLE = (list, dict, set, bytearray)
MAPPINGS = ("OrderedDict", "Counter", "defaultdict")  # of collections, sent as themselves
VIEWS = {"keys": {}.keys(), "values": {}.values(), "items": {}.items()}
# Builtins that travel by name, both ways: classes and pure functions. Nothing that reaches
# code, frames or files (exec, eval, open, getattr, globals, vars, __import__, ...).
SHARED_BUILTINS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and not name.startswith("_")
) | frozenset(
    [
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "callable",
        "chr",
        "divmod",
        "enumerate",
        "filter",
        "format",
        "hash",
        "hex",
        "id",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "map",
        "max",
        "min",
        "next",
        "oct",
        "ord",
        "pow",
        "print",
        "range",
        "repr",
        "reversed",
        "round",
        "sorted",
        "sum",
        "zip",
    ]
)


def builtin_name(value):
    """The name under which `value` is a shared builtin, or None."""
    try:
        name = value.__name__
    except Exception:
        return None
    if type(name) is str and name in SHARED_BUILTINS and vars(builtins).get(name) is value:
        return name
    return None


def exception_base(cls):
    """The nearest builtin exception class `cls` derives from (BaseException at worst)."""
    for klass in type.mro(cls):
        if vars(builtins).get(getattr(klass, "__name__", None)) is klass:
            return klass
    return BaseException


def encode(value, peer=None, depth=0):
    """A value as typed JSON. Exact builtin types only (a subclass can redefine ==).

    With a peer, a mutable container (list, dict, set, bytearray, deque, and the
    collections module's dicts) is *linked*: sent whole the first time with the number it
    goes by ({"list": [...], "as": 7}), as {"link": 7} after, and its changes on either side
    travel with every message (`Peer.changes`), so identity, aliasing, cycles and mutation at
    any time are Python's. Shared builtins travel by name and anything else as a handle.
    Without a peer (plain data at rest), containers are written out whole."""
    kind = type(value)
    if value is None or kind is bool or kind is float or kind is str:
        return value
    if kind is int:
        return value if abs(value) < 1 << 63 else {"int": hex(value)}  # exact, any size
    if depth > MAX_DEPTH:
        if peer is None:
            raise NotPlainData("nested too deeply")
        return peer.handle_for(value)
    if peer is not None and id(value) in peer.link_of:
        return {"link": peer.link_of[id(value)]}
    if _linkable(value):
        if peer is None:
            return _content(value, peer, depth)
        link = peer.link(value)
        node = _content(value, peer, depth)
        node["as"] = link
        return node
    if kind is tuple or kind is frozenset:
        return {kind.__name__: [encode(v, peer, depth + 1) for v in value]}
    if kind is bytes:
        return {"bytes": base64.b64encode(value).decode()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if peer is None:
        raise TypeError(kind.__name__)
    if isinstance(value, Remote) and object.__getattribute__(value, "_payoff_peer_") is peer:
        return {"yours": object.__getattribute__(value, "_payoff_handle_")}
    if type(value) is RemoteClass and value.__dict__.get("_payoff_class_peer_") is peer:
        return {"yours": value.__dict__["_payoff_class_handle_"]}
    name = builtin_name(value)
    if name is not None:
        return {"builtin": name}
    rich = encode_rich(value, kind, peer, depth)
    return rich if rich is not None else peer.handle_for(value)


def _linkable(value):
    """'list', 'dict', 'set', 'bytearray', 'deque' or 'mapping' for a mutable container
    that keeps its identity across the two processes; None for anything else."""
    kind = type(value)
    if kind is list or kind is dict or kind is set or kind is bytearray:
        return kind.__name__
    module = sys.modules.get("collections")
    if module is not None:
        if kind is module.deque:
            return "deque"
        if kind in [getattr(module, name) for name in MAPPINGS]:
            return "mapping"
    return None


class _Same:
    """One item of a snapshot: equal to another only if it is the very same object (so no
    item's own `==` runs, and a Remote's asks nothing), keeping the object alive meanwhile."""

    __slots__ = ("item",)

    def __init__(self, item):
        self.item = item

    def __eq__(self, other):
        return self.item is other.item

    def __hash__(self):
        return id(self.item)


def _snapshot(container):
    """What a linked container holds, compared by identity: a change is any item replaced,
    added, removed or moved (a bytearray by its bytes)."""
    if type(container) is bytearray:
        return bytes(container)
    if isinstance(container, dict):
        return [(_Same(k), _Same(v)) for k, v in dict.items(container)]
    if type(container) is set:
        return {_Same(item) for item in container}
    return [_Same(item) for item in container]


def _content(value, peer, depth):
    """A mutable container's contents as a node, its items encoded (linked ones by link)."""

    def items(values):
        return [encode(v, peer, depth + 1) for v in values]

    kind = _linkable(value)
    if kind == "bytearray":
        return {"bytearray": base64.b64encode(value).decode()}
    if kind == "dict":
        return {"dict": [items(pair) for pair in value.items()]}
    if kind == "deque":
        return {"deque": [items(value), value.maxlen]}
    if kind == "mapping":
        return {"mapping": [type(value).__name__, [items(pair) for pair in dict.items(value)]]}
    return {kind: items(value)}


def _stdlib(module, name):
    """A class of a standard module, if the module is loaded (never imported here)."""
    return getattr(sys.modules.get(module), name, None)


def encode_rich(value, kind, peer, depth):
    """Values that are plain data under another type: views of a dict, ranges, the
    collections module's containers, Fraction and Decimal; and instances of subclasses of
    the plain types (an IntEnum, a namedtuple, a dict subclass) as handles that carry their
    plain value, taken without calling anything of the subclass: it is what they are
    compared by, while their methods and attributes stay theirs. None when the value is
    none of these."""

    def items(values):
        return [encode(v, peer, depth + 1) for v in values]

    if kind is range:
        return {"range": [value.start, value.stop, value.step]}
    for view, made in VIEWS.items():
        if kind is type(made):
            return {view: items(value)}
    if kind is _stdlib("fractions", "Fraction"):
        return {"fraction": [encode(value.numerator), encode(value.denominator)]}
    if kind is _stdlib("decimal", "Decimal"):
        return {"decimal": str(value)}
    for base in (int, float, complex, str, bytes, tuple, list, dict, set, frozenset):
        if isinstance(value, base):
            record = peer.handle_for(value)
            record["plain"] = encode(_plain_copy(value, base), peer, depth + 1)
            return record
    return None


def _plain_copy(value, base):
    """An instance of a subclass of `base` as an exact `base`, through base's own methods."""
    if base is int:
        return int.__add__(value, 0)
    if base is float:
        return float.__float__(value)
    if base is complex:
        return complex.__add__(value, 0j)
    if base is str:
        return str.__str__(value)
    if base is bytes:
        return bytes.__getitem__(value, slice(None))
    if base is tuple:
        return tuple.__getitem__(value, slice(None))
    if base in (list, dict, set, frozenset):
        return base.copy(value) if base is not frozenset else frozenset(set.union(set(), value))
    return base(value)


def decode(node, peer=None, depth=0):
    """Inverse of `encode`, strict: anything `encode` cannot have written is refused.

    The parent decodes what a checkpoint holds with this; with a peer, links and handles
    become the peer's objects (ours back, or `Remote`s of theirs)."""
    if node is None or type(node) in (bool, int, float, str):
        return node
    if depth > MAX_DEPTH:
        raise NotPlainData("nested too deeply")
    if type(node) is not dict or not node:
        raise NotPlainData("unexpected " + type(node).__name__)
    kind, body = next(iter(node.items()))
    link = node.get("as")
    extra = len(node) - 1 - (link is not None)
    if extra and kind != "theirs" or link is not None and (peer is None or kind not in CONTAINERS):
        raise NotPlainData("unexpected value record")
    if kind == "int" and type(body) is str:
        return int(body, 16) if "x" in body else int(body)  # hex as written, or decimal
    if kind == "link" and peer is not None:
        return peer.linked(body)
    if kind in CONTAINERS:
        made = _empty(kind, body)
        if link is not None:
            peer.adopt(link, made)  # before its items: they may mention it
        fill(made, kind, body, peer, depth)
        return made
    if kind in ("tuple", "frozenset") and type(body) is list:
        items = [decode(v, peer, depth + 1) for v in body]
        if kind == "tuple":
            return tuple(items)
        try:
            return frozenset(refuse_shared_hashes(items))
        except TypeError as err:  # an unhashable item
            raise NotPlainData(str(err)) from None
    if kind == "bytes" and type(body) is str:
        return base64.b64decode(body, validate=True)
    if kind == "complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if kind == "builtin" and type(body) is str and body in SHARED_BUILTINS:
        return vars(builtins)[body]
    rich = decode_rich(kind, body, peer, depth)
    if rich is not NOTHING:
        return rich
    if peer is not None and kind in ("yours", "theirs"):
        return peer.object_for(kind, body, node)
    raise NotPlainData("unknown value kind " + repr(kind)[:NAME_CHARS])


CONTAINERS = ("list", "dict", "set", "bytearray", "deque", "mapping")


def _empty(kind, body):
    """An empty container of the kind a node describes (a deque with its maxlen)."""
    import collections

    if kind == "deque":
        maxlen = body[1] if type(body) is list and len(body) == 2 else -1
        if not (maxlen is None or (type(maxlen) is int and maxlen >= 0)):
            raise NotPlainData("a deque that is not [items, maxlen]")
        return collections.deque(maxlen=maxlen)
    if kind == "mapping":
        if not (type(body) is list and len(body) == 2 and body[0] in MAPPINGS):
            raise NotPlainData("a mapping that is not [type, items]")
        return getattr(collections, body[0])()
    return {"list": list, "dict": dict, "set": set, "bytearray": bytearray}[kind]()


def fill(container, kind, body, peer, depth):
    """Give `container` (empty, or one of ours a change is for) the contents a node holds."""

    def items(values):
        if type(values) is not list:
            raise NotPlainData(f"a {kind} whose items are not a list")
        return [decode(v, peer, depth + 1) for v in values]

    def pairs(values):
        found = []
        for pair in values if type(values) is list else [None]:
            if type(pair) is not list or len(pair) != 2:
                raise NotPlainData(f"a {kind} item that is not a pair")
            found.append(tuple(items(pair)))  # key, then value: the order encode wrote them
        refuse_shared_hashes([key for key, _ in found])
        return found

    try:
        if kind == "list":
            container[:] = items(body)
        elif kind == "set":
            new = refuse_shared_hashes(items(body))
            container.clear()
            container.update(new)
        elif kind == "bytearray":
            if type(body) is not str:
                raise NotPlainData("a bytearray that is not base64")
            container[:] = base64.b64decode(body, validate=True)
        elif kind == "deque":
            new = items(body[0])
            container.clear()
            container.extend(new)
        else:
            new = pairs(body if kind == "dict" else body[1])
            dict.clear(container)
            dict.update(container, new)
    except TypeError as err:  # an unhashable key or item
        raise NotPlainData(str(err)) from None


NOTHING = object()


def decode_rich(kind, body, peer, depth):
    """The values `encode_rich` writes, rebuilt as the standard types they are; NOTHING
    when `kind` is none of them."""

    def items(values):
        if type(values) is not list:
            raise NotPlainData(f"a {kind} whose items are not a list")
        return [decode(v, peer, depth + 1) for v in values]

    if kind == "range" and type(body) is list and [type(v) for v in body] == [int] * 3:
        return range(*body)
    if kind in VIEWS:
        values = items(body)
        if kind == "values":
            return dict(enumerate(values)).values()
        if kind == "keys":
            return dict.fromkeys(refuse_shared_hashes(values)).keys()
        if not all(type(pair) is tuple and len(pair) == 2 for pair in values):
            raise NotPlainData("dict items that are not pairs")
        refuse_shared_hashes([key for key, _ in values])
        return dict(values).items()
    if kind == "fraction" and type(body) is list and [type(v) for v in body] == [int, int]:
        import fractions

        return fractions.Fraction(*body)
    if kind == "decimal" and type(body) is str:
        import decimal

        return decimal.Decimal(body)
    return NOTHING


# ---- the two processes' conversation --------------------------------------------------------
class CandidateGone(BaseException):
    """The candidate broke the protocol (ended, answered nonsense, or raised what no correct
    solution raises: StopIteration out of a call, SystemExit, ...). A BaseException, so a
    test's `except Exception:` does not swallow it; and every such event is recorded, so a
    bare `except:` does not either: the verdict fails."""


# What an answer must be, for the requests that promise one type.
RESULT_TYPES = {"len": int, "bool": bool, "str": str, "repr": str, "int": int, "index": int}
RESULT_TYPES.update(float=float, isinstance=bool)


class Peer:
    """One end of the conversation: our objects the other side holds (handles), theirs that
    we hold (`Remote`s), and the containers both hold a copy of (links). Requests nest:
    while waiting for an answer we serve theirs."""

    def __init__(self, read_fd, write_fd, serve_ops, first_link, on_violation=None):
        self.reader = os.fdopen(read_fd, "rb", buffering=1 << 16)
        self.write_fd = write_fd
        self.serve_ops = serve_ops
        self.on_violation = on_violation
        self.ours = {}  # handle -> our object
        self.our_handles = {}  # id(our object) -> handle (the object is kept alive in ours)
        self.theirs = {}  # handle -> Remote, or the class made for an exception class of theirs
        self.links = {}  # link -> [our copy, its contents as last sent or taken]
        self.link_of = {}  # id(our copy) -> link
        self.next_link = first_link  # ours are even on one side, odd on the other
        self.unsettled = []  # links made or changed by the message being read or written
        self.calls = []  # the last calls made through Remotes and what they returned
        self.namespace = {}

    # -- handles
    def handle_for(self, value):
        handle = self.our_handles.get(id(value))
        if handle is None:
            handle = len(self.ours)
            self.ours[handle] = value
            self.our_handles[id(value)] = handle
        record = {"theirs": handle, "kind": describe(value)}
        if isinstance(value, type) and issubclass(value, BaseException):
            record["exception"] = exception_base(value).__name__
        elif _mirrored(value):  # a class: mirrored there, with the bases it mirrors too
            record["bases"] = [encode(base, self) for base in value.__bases__ if _mirrored(base)]
        elif _mirrored(type(value)):  # an instance: of the mirror of its class
            record["of"] = encode(type(value), self)
        return record

    def object_for(self, kind, handle, node):
        if type(handle) is not int:
            raise NotPlainData("a handle that is not a number")
        if kind == "yours":
            if handle not in self.ours:
                raise NotPlainData("a handle to nothing")
            return self.ours[handle]
        if handle in self.theirs:
            return self.theirs[handle]
        label = node.get("kind")
        label = label[:NAME_CHARS] if type(label) is str else "object"
        base = node.get("exception")
        if base is not None:  # a class of exceptions: made here, deriving from its builtin base
            base_class = vars(builtins).get(base) if type(base) is str else None
            if not (isinstance(base_class, type) and issubclass(base_class, BaseException)):
                raise NotPlainData("an exception class with no builtin base")
            name = label.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]
            made = type(
                name if name.isidentifier() else "CandidateError",
                (base_class,),
                {"__getattr__": _their_attribute, "__module__": "candidate"},
            )
            self.theirs[handle] = made
            return made
        if "bases" in node:
            self.theirs[handle] = _mirror(self, handle, label, node["bases"])
            return self.theirs[handle]
        cls = decode(node["of"], self) if "of" in node else Remote
        cls = cls if type(cls) is RemoteClass else Remote
        remote = self.theirs[handle] = Remote.__new__(cls)
        Remote.__init__(remote, self, handle, label)
        if "plain" in node:  # what a subclass of a plain type holds, as plain data
            object.__setattr__(remote, "_payoff_plain_", decode(node["plain"], self))
        return remote

    # -- links: containers both sides hold, kept equal message by message
    def link(self, container):
        link = self.next_link
        self.next_link += 2
        self.links[link] = [container, None]
        self.link_of[id(container)] = link
        self.unsettled.append(link)
        return link

    def adopt(self, link, container):
        if type(link) is not int or link in self.links or link % 2 == self.next_link % 2:
            raise NotPlainData("a link that is not new, or not theirs to make")
        self.links[link] = [container, None]
        self.link_of[id(container)] = link
        self.unsettled.append(link)

    def linked(self, link):
        if type(link) is not int or link not in self.links:
            raise NotPlainData("a link to nothing")
        return self.links[link][0]

    def settle(self):
        """Note what the containers made or changed by the last message now hold, so that
        the next message sends only what changes after."""
        for link in self.unsettled:
            if link in self.links:
                entry = self.links[link]
                entry[1] = _snapshot(entry[0])
        self.unsettled.clear()

    def changes(self):
        """(changes, drops) for the next message: each linked container whose contents
        differ from what the other side last had, and the links to containers nothing else
        here holds any more (the other side forgets them too)."""
        changed, dropped = [], []
        for link, entry in list(self.links.items()):
            alone = sys.getrefcount(entry[0]) <= 2  # held by this entry alone (and the call)
            if _snapshot(entry[0]) != entry[1]:
                # sent even when let go: the other side may hold it still
                changed.append([link, _content(entry[0], self, 0)])
                self.unsettled.append(link)
            if alone:
                del self.link_of[id(entry[0])]
                del self.links[link]
                dropped.append(link)
        return changed, dropped

    def take_changes(self, message):
        """Apply what a message says changed in the containers we share, before its values."""
        drops, changes = message.get("drops", []), message.get("changes", [])
        if type(drops) is not list or type(changes) is not list:
            raise NotPlainData("changes that are not lists")
        for change in changes:
            if type(change) is not list or len(change) != 2 or type(change[1]) is not dict:
                raise NotPlainData("a change that is not [link, contents]")
            container = self.linked(change[0])
            ((kind, body),) = change[1].items() if len(change[1]) == 1 else [(None, None)]
            if kind != _linkable(container):
                raise NotPlainData("a change of a container into another kind")
            fill(container, kind, body, self, 0)
            self.unsettled.append(change[0])
        for link in drops:  # after the changes: a container may change as it is let go
            if type(link) is int and link in self.links:
                del self.link_of[id(self.links.pop(link)[0])]

    # -- messages
    def violation(self, what):
        """Record that the other side broke the rules, and stop the script where it is."""
        if self.on_violation is not None:
            self.on_violation(what)
        raise CandidateGone(what)

    def message(self, fields, values=(), named=None, value=NOTHING):
        """A message: `fields` as they are, then the containers' changes, then the values
        encoded (in that order, the order the other side reads them in)."""
        message = dict(fields)
        message["changes"], message["drops"] = self.changes()
        message["args"] = [encode(v, self) for v in values]
        message["kwargs"] = [[k, encode(v, self)] for k, v in (named or {}).items()]
        if value is not NOTHING:
            message["value"] = encode(value, self)
        self.settle()
        return message

    def send(self, message):
        data = memoryview((json.dumps(message, allow_nan=True) + "\n").encode())
        while data:
            data = data[os.write(self.write_fd, data) :]

    def receive(self):
        line = self.reader.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            self.violation("the candidate's process ended")
        if len(line) > MAX_MESSAGE_BYTES or not line.endswith(b"\n"):
            self.violation("an answer past its size limit")
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if type(message) is not dict:
            self.violation("an answer that is not a JSON object")
        return message

    def request(self, message):
        """Send a request; serve theirs until our answer comes."""
        self.send(message)
        while True:
            reply = self.receive()
            if "op" not in reply:
                return reply
            self.send(self.serve(reply))

    def serve(self, message):
        """Answer one request: the value, or the exception, with what the call changed."""
        op = message.get("op")
        handler = self.serve_ops.get(op) if type(op) is str else None
        printed = io.StringIO()
        try:
            if handler is None:
                raise TypeError("not a request: " + repr(op)[:50])
            self.take_changes(message)
            args, kwargs = _arguments(self, message)
            self.settle()
            with contextlib.redirect_stdout(printed):
                value, error = handler(self, message, args, kwargs), None
        except CandidateGone:
            raise
        except BaseException as err:  # noqa: BLE001 - it goes back as what it is
            value, error = None, err
        fields = {"printed": printed.getvalue()[-(64 << 10) :]}
        try:
            if error is None:
                return self.message(fields, value=value)
            fields["error"] = self.describe_error(error)
            return self.message(fields, values=_exception_args(error), value=error)
        except (NotPlainData, RecursionError, MemoryError) as err:
            return {"error": {"base": "TypeError", "message": str(err)[:NAME_CHARS]}}

    def describe_error(self, err):
        cls = type(err)
        record = {"base": exception_base(cls).__name__}
        try:
            record["message"] = str(err)[:NAME_CHARS]
        except Exception:
            record["message"] = ""
        if vars(builtins).get(cls.__name__) is not cls:
            record["type"] = self.handle_for(cls)
        return record

    def answer(self, reply, op, label):
        """Take an answer: what changed in shared containers, then the value or exception.
        Anything malformed in it is a violation, never an exception the tests could catch."""
        error = reply.get("error")
        try:
            self.take_changes(reply)
            if error is not None:
                raised = self.exception_from(reply, op, label)
            else:
                value = decode(reply.get("value"), self)
            self.settle()
        except (NotPlainData, ValueError, TypeError, ArithmeticError, RecursionError) as err:
            self.violation("an answer that is not plain data: " + str(err)[:NAME_CHARS])
        printed = reply.get("printed")
        if type(printed) is str and printed:
            sys.stdout.write(printed)  # where the tests' print would go: redirect_stdout too
        if error is not None:
            raise raised
        expected = RESULT_TYPES.get(op)
        if expected is not None and type(value) is not expected:
            if op == "bool":
                raise TypeError(f"the truth value of {label} is not its own to decide here")
            raise TypeError(f"{op}() of {label} gave a {type(value).__name__}")
        return value

    def exception_from(self, reply, op, label):
        """The exception an answer stands for: its builtin class, or a class made here that
        derives from it (for `except TheirError:`), with its arguments and attributes."""
        error = reply["error"]
        base = vars(builtins).get(error.get("base")) if type(error) is dict else None
        if not (isinstance(base, type) and issubclass(base, BaseException)):
            raise NotPlainData("an exception that is not a builtin one")
        message = error.get("message")
        message = message[:NAME_CHARS] if type(message) is str else ""
        if base is StopIteration and op == "next":
            return StopIteration()
        cls = base
        if "type" in error:
            made = decode(error["type"], self)
            if isinstance(made, type) and issubclass(made, base):
                cls = made
        if not issubclass(base, Exception) or issubclass(base, StopIteration | StopAsyncIteration):
            # no correct solution ends the tests (SystemExit), or an iteration it is not
            # running (StopIteration out of a call ends all(map(...)) early, as passed)
            self.violation(f"{label} raised {cls.__name__}: {message}".strip(": "))
        args = reply.get("args")
        args = [decode(node, self) for node in args] if type(args) is list else [message]
        try:
            raised = cls(*args)
        except Exception:  # a builtin that wants other arguments (UnicodeDecodeError)
            raised = cls(message)
        instance = decode(reply.get("value"), self)
        if cls is not base and isinstance(instance, Remote):
            raised.__dict__["_payoff_remote_"] = instance  # its attributes, asked of it
        return raised


def _exception_args(error):
    """An exception's arguments, when they are a tuple (what `raise X(a, b)` gave)."""
    args = getattr(error, "args", ())
    return args if type(args) is tuple else ()


def _their_attribute(self, name):
    """An attribute of an exception of the candidate's (`err.shortfall`), asked of it."""
    remote = self.__dict__.get("_payoff_remote_")
    if remote is None or name.startswith("__"):
        raise AttributeError(name)
    return getattr(remote, name)


def _mirrored(cls):
    """Whether a class of the candidate's is mirrored on the tests' side as a class: any
    class but exceptions (made there otherwise) and the interpreter's own types."""
    return (
        isinstance(cls, type)
        and not issubclass(cls, BaseException)
        and cls.__dict__.get("__module__", "builtins") != "builtins"
        and cls is not object
    )


class RemoteClass(type):
    """The class of a mirror: a class on the tests' side standing for one of the
    candidate's, so that `type(s) is Stack`, `isinstance(s, Stack)` and `class
    PairStack(Stack):` in the tests mean what they mean in Python. Calling it makes the
    object in the candidate's process; its attributes are the candidate's class's."""

    def __call__(cls, *args, **kwargs):
        mirror = next(k for k in cls.__mro__ if "_payoff_class_handle_" in k.__dict__)
        if cls is mirror:
            return mirror.__dict__["_payoff_class_remote_"](*args, **kwargs)
        # a class of the tests' own deriving from the candidate's: made there without
        # __init__, then initialised here, where the tests' __init__ (if any) runs
        instance = mirror.__dict__["_payoff_class_remote_"]._payoff_ask_("new")
        object.__setattr__(instance, "__class__", cls)
        cls.__init__(instance, *args, **kwargs)
        return instance

    def __getattr__(cls, name):
        if name.startswith("_payoff"):
            raise AttributeError(name)
        mirror = next(k for k in cls.__mro__ if "_payoff_class_handle_" in k.__dict__)
        return getattr(mirror.__dict__["_payoff_class_remote_"], name)


def _mirror_init(self, *args, **kwargs):
    """A mirror's __init__ (reached through super().__init__ in the tests' subclass)."""
    Remote.__getattr__(self, "__init__")(*args, **kwargs)


def _mirror(peer, handle, label, bases):
    """The class standing for the candidate's class `handle`."""
    name = label.rsplit(" ", 1)[-1].rsplit(".", 1)[-1]
    mirrored = tuple(
        base
        for base in (decode(node, peer) for node in (bases if type(bases) is list else []))
        if type(base) is RemoteClass
    )
    namespace = {
        "__module__": "candidate",
        "__init__": _mirror_init,
        "_payoff_class_handle_": handle,
        "_payoff_class_peer_": peer,
        "_payoff_class_remote_": Remote(peer, handle, label),
    }
    name = name if name.isidentifier() else "CandidateClass"
    try:
        return RemoteClass(name, mirrored or (Remote,), namespace)
    except TypeError:  # bases that cannot be combined (an MRO the other side made up)
        return RemoteClass(name, (Remote,), namespace)


def describe(value):
    """A short label for a handle: a class, a function's name, or an object's class."""
    try:
        if isinstance(value, type):
            return "class " + str(value.__qualname__)[:NAME_CHARS]
        name = getattr(value, "__qualname__", None) if callable(value) else None
        if type(name) is str:
            return "function " + name[:NAME_CHARS]
        return type(value).__qualname__[:NAME_CHARS] + " object"
    except Exception:
        return "object"


class _Shown(reprlib.Repr):
    """Short reprs for a verdict's detail; the candidate's objects by label, unasked."""

    def repr_instance(self, obj, level):
        if isinstance(obj, Remote):
            label = object.__getattribute__(obj, "_payoff_label_")
            if " object" in label:
                return "<" + label + ">"
            return label.removeprefix("function ").removeprefix("class ")
        return super().repr_instance(obj, level)


_shown = _Shown()
_shown.maxstring = _shown.maxother = 80


ARITHMETIC = [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and_",
    "or_",
    "xor",
    "lshift",
    "rshift",
]


def _arithmetic_method(name, reflected):
    def method(self, other):
        return self._payoff_arithmetic_(name, other, reflected)

    return method


def _add_arithmetic(cls):
    for name in ARITHMETIC:
        dunder = name.rstrip("_")
        setattr(cls, f"__{dunder}__", _arithmetic_method(name, False))
        setattr(cls, f"__r{dunder}__", _arithmetic_method(name, True))
    return cls


def label_of(value):
    """How a value reads in a verdict's detail."""
    try:
        return _shown.repr(value)
    except Exception:
        return "?"


class Remote:
    """An object of the other process. Attribute access, calls, iteration, len, str are
    requests; `==` is identity, `in` iterates here (the value looked for stays here), and
    the truth value is asked only of objects that do not decide it themselves (__bool__):
    no object of the candidate's decides a comparison."""

    __slots__ = (
        "_payoff_peer_",
        "_payoff_handle_",
        "_payoff_label_",
        "_payoff_plain_",
        "__weakref__",
    )

    def __init__(self, peer, handle, label):
        object.__setattr__(self, "_payoff_peer_", peer)
        object.__setattr__(self, "_payoff_handle_", handle)
        object.__setattr__(self, "_payoff_label_", label)
        object.__setattr__(self, "_payoff_plain_", NOTHING)

    def _payoff_ask_(self, op, *args, name=None, kwargs=None):
        peer = object.__getattribute__(self, "_payoff_peer_")
        label = label_of(self)
        if op == "call":  # as the arguments are before the call
            shown = [label_of(a) for a in args]
            shown += [f"{k}={label_of(v)}" for k, v in (kwargs or {}).items()]
        fields = {"op": op, "target": object.__getattribute__(self, "_payoff_handle_")}
        fields["name"] = name
        value = peer.answer(peer.request(peer.message(fields, args, kwargs)), op, label)
        if op == "call":
            peer.calls.append(f"{label}({', '.join(shown)}) returned {label_of(value)}")
            del peer.calls[:-3]
        return value

    def __getattr__(self, name):
        return self._payoff_ask_("getattr", name=name)

    def __setattr__(self, name, value):
        self._payoff_ask_("setattr", value, name=name)

    def __delattr__(self, name):
        self._payoff_ask_("delattr", name=name)

    def __call__(self, *args, **kwargs):
        return self._payoff_ask_("call", *args, kwargs=kwargs)

    def __iter__(self):
        if self._payoff_plain_ is not NOTHING:
            return iter(self._payoff_plain_)
        return self._payoff_ask_("iter")

    def __next__(self):
        return self._payoff_ask_("next")

    def __len__(self):
        if self._payoff_plain_ is not NOTHING:
            return len(self._payoff_plain_)
        return self._payoff_ask_("len")

    def __getitem__(self, key):
        if self._payoff_plain_ is not NOTHING:
            return self._payoff_plain_[key]
        return self._payoff_ask_("getitem", key)

    def __setitem__(self, key, value):
        self._payoff_ask_("setitem", key, value)

    def __delitem__(self, key):
        self._payoff_ask_("delitem", key)

    def __contains__(self, item):
        return any(item is element or item == element for element in self)

    def __bool__(self):
        if self._payoff_plain_ is not NOTHING:
            return bool(self._payoff_plain_)
        return self._payoff_ask_("bool")

    def __str__(self):
        return self._payoff_ask_("str")

    def __repr__(self):
        return self._payoff_ask_("repr")

    def __int__(self):
        if self._payoff_plain_ is not NOTHING:
            return int(self._payoff_plain_)
        return self._payoff_ask_("int")

    def __index__(self):
        if self._payoff_plain_ is not NOTHING:
            return operator.index(self._payoff_plain_)
        return self._payoff_ask_("index")

    def __float__(self):
        if self._payoff_plain_ is not NOTHING:
            return float(self._payoff_plain_)
        return self._payoff_ask_("float")

    # Comparisons are the candidate's only between two of its own objects (a Vector's `==`
    # against another Vector, as the tests built it with the candidate's class). Against the
    # tests' values, an object that holds plain data (an IntEnum, a namedtuple) compares by
    # that data; any other is Python's default: identity, and no ordering.
    def _payoff_compare_(self, other, op):
        mine = isinstance(other, Remote) and other._payoff_peer_ is self._payoff_peer_
        if mine:
            return self._payoff_ask_("compare", other, name=op)
        if self._payoff_plain_ is not NOTHING:
            return getattr(operator, op)(self._payoff_plain_, other)
        return NotImplemented

    def __eq__(self, other):
        return True if self is other else self._payoff_compare_(other, "eq")

    def __ne__(self, other):
        return False if self is other else self._payoff_compare_(other, "ne")

    def __lt__(self, other):
        return self._payoff_compare_(other, "lt")

    def __le__(self, other):
        return self._payoff_compare_(other, "le")

    def __gt__(self, other):
        return self._payoff_compare_(other, "gt")

    def __ge__(self, other):
        return self._payoff_compare_(other, "ge")

    def __hash__(self):
        try:
            return hash(self._payoff_plain_) if self._payoff_plain_ is not NOTHING else id(self)
        except TypeError:  # a list's or a dict's subclass
            return id(self)

    # Arithmetic is the candidate's, as in Python: it makes values, and values are compared
    # here. (`__add__` and its kin are set below, one per operator.)
    def _payoff_arithmetic_(self, name, other, reflected):
        return self._payoff_ask_("arithmetic", other, name=name + ("_r" if reflected else ""))

    def __neg__(self):
        return self._payoff_ask_("unary", name="neg")

    def __pos__(self):
        return self._payoff_ask_("unary", name="pos")

    def __abs__(self):
        return self._payoff_ask_("unary", name="abs")

    def __invert__(self):
        return self._payoff_ask_("unary", name="invert")

    def __instancecheck__(self, instance):
        return isinstance(instance, Remote) and self._payoff_ask_("isinstance", instance)

    def __enter__(self):
        return self._payoff_ask_("enter")

    def __exit__(self, *exc_info):
        return self._payoff_ask_("exit") if exc_info[0] is None else None


_add_arithmetic(Remote)


# ---- serving: what each side lets the other do ---------------------------------------------------
def _target(peer, message):
    handle = message.get("target")
    if type(handle) is not int or handle not in peer.ours:
        raise NotPlainData("a request for an unknown object")
    return peer.ours[handle]


def _arguments(peer, message):
    """The request's arguments, decoded."""
    args, kwargs = message.get("args", []), message.get("kwargs", [])
    if type(args) is not list or type(kwargs) is not list:
        raise NotPlainData("arguments that are not lists")
    values = [decode(node, peer) for node in args]
    named = {}
    for pair in kwargs:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
            raise NotPlainData("a keyword argument that is not a (name, value) pair")
        named[pair[0]] = decode(pair[1], peer)
    return values, named


def _name(message):
    name = message.get("name")
    if type(name) is not str:
        raise NotPlainData("an attribute name that is not a string")
    return name


def _call(peer, message, args, kwargs):
    return _target(peer, message)(*args, **kwargs)


def _on_target(function):
    """A request that applies `function` to its target and its arguments."""

    def op(peer, message, args, kwargs):
        return function(_target(peer, message), *args)

    return op


def _truth(obj):
    cls = type(obj)
    if getattr(cls, "__bool__", None) is not None:
        raise TypeError(f"the truth value of a {cls.__qualname__} object is its own to decide")
    return len(obj) != 0 if getattr(cls, "__len__", None) is not None else True


def _setitem(obj, key, value):
    obj[key] = value


def _delitem(obj, key):
    del obj[key]


def _instance(cls, obj):
    """isinstance decided by the class's MRO alone, asking nothing of a metaclass."""
    return isinstance(cls, type) and cls in type.mro(type(obj))


def _one(args):
    if len(args) != 1:
        raise TypeError("expected one operand")
    return args[0]


def candidate_ops():
    """What the test process may ask of the candidate's objects: what Python would."""

    def resolve(peer, message, args, kwargs):
        return {n: peer.namespace[n] for n in args if type(n) is str and n in peer.namespace}

    def compare(peer, message, args, kwargs):
        op = _name(message)
        if op not in ("eq", "ne", "lt", "le", "gt", "ge"):
            raise TypeError("not a comparison: " + op[:20])
        return bool(getattr(operator, op)(_target(peer, message), _one(args)))

    def arithmetic(peer, message, args, kwargs):
        name = _name(message)
        if name.removesuffix("_r") not in ARITHMETIC:
            raise TypeError("not an operator: " + name[:20])
        target, other = _target(peer, message), _one(args)
        function = getattr(operator, name.removesuffix("_r"))
        return function(other, target) if name.endswith("_r") else function(target, other)

    def unary(peer, message, args, kwargs):
        name = _name(message)
        if name not in ("neg", "pos", "abs", "invert"):
            raise TypeError("not an operator: " + name[:20])
        return getattr(operator, name)(_target(peer, message))

    return {
        "resolve": resolve,
        "call": _call,
        "getattr": lambda peer, m, a, k: getattr(_target(peer, m), _name(m)),
        "setattr": lambda peer, m, a, k: setattr(_target(peer, m), _name(m), _one(a)),
        "delattr": lambda peer, m, a, k: delattr(_target(peer, m), _name(m)),
        "iter": _on_target(iter),
        "next": _on_target(next),
        "len": _on_target(len),
        "getitem": _on_target(lambda obj, key: obj[key]),
        "setitem": _on_target(_setitem),
        "delitem": _on_target(_delitem),
        "bool": _on_target(_truth),
        "str": _on_target(str),
        "repr": _on_target(repr),
        "int": _on_target(int),
        "index": _on_target(lambda obj: type(obj).__index__(obj)),
        "float": _on_target(float),
        "isinstance": _on_target(_instance),
        "compare": compare,
        "arithmetic": arithmetic,
        "unary": unary,
        "new": _on_target(lambda cls: cls.__new__(cls)),
        "enter": _on_target(lambda obj: type(obj).__enter__(obj)),
        "exit": _on_target(lambda obj: type(obj).__exit__(obj, None, None, None)),
    }


def tests_ops():
    """What the candidate may ask of the test's objects: call them and iterate them (a key
    function, a generator passed in), and read and set public attributes of instances of
    the test's own classes (a linked list's nodes); nothing that reaches a frame, a
    function's globals or a module, where the expected values are."""

    def own_instance(obj, name):
        cls = type(obj)
        if getattr(cls, "__module__", None) != "__main__" or isinstance(obj, type):
            raise AttributeError(f"a {describe(obj)} shows no attributes to the candidate")
        if name.startswith("_"):
            raise AttributeError(f"the test's attribute {name!r} is not the candidate's to see")
        return obj

    def getattr_op(peer, message, args, kwargs):
        name = _name(message)
        return getattr(own_instance(_target(peer, message), name), name)

    def setattr_op(peer, message, args, kwargs):
        name = _name(message)
        setattr(own_instance(_target(peer, message), name), name, _one(args))

    return {
        "call": _call,
        "iter": _on_target(iter),
        "next": _on_target(next),
        "len": _on_target(len),
        "str": _on_target(str),
        "repr": _on_target(repr),
        "getattr": getattr_op,
        "setattr": setattr_op,
    }


# ---- the modes ------------------------------------------------------------------------------------
def candidate(request, result_fd):
    """Run the candidate's program, then answer the tests' requests until they end."""
    peer = Peer(request["from_tests"], request["to_tests"], candidate_ops(), first_link=1)
    peer.receive()  # the tests' go: their process no longer shows its memory to others
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    peer.namespace = namespace
    try:
        exec(compile(request["program"], "solution.py", "exec"), namespace)
    except BaseException as err:
        write_result(result_fd, {"program_raised": type(err).__name__, "message": str(err)[:300]})
        return 0
    while True:
        try:
            message = peer.receive()
        except CandidateGone:  # the tests ended and closed their end
            return 0
        if "op" in message:
            peer.send(peer.serve(message))


def run_test_script(request, result_fd):
    """Run the tests as Python, the candidate's names standing for its objects; write the
    verdict: passed, or what was raised where, and the last calls made."""
    violations = []

    def note(what):
        violations.append(what)
        if len(violations) <= 5:
            write_result(result_fd, {"violation": what[:300]})

    peer = Peer(request["from_candidate"], request["to_candidate"], tests_ops(), 0, note)
    peer.send({"go": True})
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        resolve = peer.message({"op": "resolve", "target": None}, request["names"])
        found = peer.answer(peer.request(resolve), "resolve", "the candidate's program")
        if type(found) is not dict:
            peer.violation("names answered with something else")
        for name, value in found.items():
            if name in request["names"]:
                if isinstance(value, Remote) and " object" not in value._payoff_label_:
                    object.__setattr__(value, "_payoff_label_", name)  # as the tests call it
                namespace[name] = value
        exec(compile(request["script"], "tests.py", "exec"), namespace)
    except SystemExit as err:  # the tests' own: the candidate's would be a violation
        if err.code not in (None, 0):
            write_result(result_fd, {"passed": False, "raised": "SystemExit", "message": str(err)})
            return 0
    except BaseException as err:
        record = {"passed": False, "raised": type(err).__name__, "message": str(err)[:300]}
        record.update(line=failing_line(err), calls=peer.calls, violations=violations)
        write_result(result_fd, record)
        return 0
    write_result(result_fd, {"passed": not violations, "violations": violations[:5]})
    return 0


def pair(request, result_fd):
    """A verdict's two processes in one sandbox, forked from this one: the tests' first,
    which makes itself undumpable before it reads the tests (from a pipe only it holds);
    then, once it has, the candidate's, which never holds the tests, their pipe or the
    verdict's channel (it reports on a channel of its own, read as untrusted). Each loads
    the seccomp filter itself after the fork (bubblewrap loads none in this mode), so
    neither can make a process, trace the other or read its memory."""
    tests_fd, candidate_fd = request.pop("tests_fd"), request.pop("candidate_fd")
    _libc()  # loaded once, before the forks, so neither child loads a library to harden itself
    to_candidate_read, to_candidate_write = os.pipe()
    to_tests_read, to_tests_write = os.pipe()
    ready_read, ready_write = os.pipe()
    tests_pid = os.fork()
    if tests_pid == 0:
        for fd in (to_candidate_read, to_tests_write, candidate_fd, ready_read):
            os.close(fd)
        unhardened = harden(request.get("seccomp"))
        if unhardened:
            write_result(result_fd, {"unhardened": unhardened})
        install_audit_hook(result_fd)
        os.write(ready_write, b"1")
        os.close(ready_write)
        with os.fdopen(tests_fd, "rb") as pipe:
            request["script"] = pipe.read().decode()
        request.update(from_candidate=to_tests_read, to_candidate=to_candidate_write)
        _finish(run_test_script(request, result_fd))
    os.close(ready_write)
    os.read(ready_read, 1)  # the tests' process is undumpable before the candidate exists
    os.close(ready_read)
    os.close(tests_fd)
    candidate_pid = os.fork()
    if candidate_pid == 0:
        for fd in (to_tests_read, to_candidate_write, result_fd):
            os.close(fd)
        harden(request.get("seccomp"))
        install_audit_hook(candidate_fd)
        request.update(from_tests=to_candidate_read, to_tests=to_tests_write)
        _finish(candidate(request, candidate_fd))
    for fd in (to_candidate_read, to_candidate_write, to_tests_read, to_tests_write):
        os.close(fd)
    os.close(candidate_fd)
    harden(request.get("seccomp"))
    os.waitpid(tests_pid, 0)
    os.kill(candidate_pid, 9)  # the verdict is in: whatever the candidate still does ends
    os.waitpid(candidate_pid, 0)
    return 0


def _finish(status):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status or 0)


def failing_line(err):
    """The line of tests.py the error left from (the innermost one)."""
    line = None
    trace = err.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "tests.py":
            line = trace.tb_lineno
        trace = trace.tb_next
    return line


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
    if request.get("harden"):
        unhardened = harden(request.get("seccomp"))
        if unhardened:
            write_result(result_fd, {"unhardened": unhardened})
    os.environ.clear()
    os.environ.update({"HOME": request["workdir"], "TMPDIR": request["workdir"]})
    os.chdir(request["workdir"])
    set_limits(request["limits"])  # (a pair forks its two processes first: see harden)
    sys.setrecursionlimit(2000)
    if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit and quit
        builtins.exit = builtins.quit = sys.exit
    if request["mode"] == "program":
        install_audit_hook(result_fd)
    modes = {"pair": pair, "program": program}  # a pair's processes install their own
    status = modes[request["mode"]](request, result_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status or 0)


if __name__ == "__main__":
    main()
