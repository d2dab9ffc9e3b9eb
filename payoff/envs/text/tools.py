"""Tools an agent can call: a name, a JSON schema for the arguments and a Python callable.

The model calls a tool by writing JSON inside tags (the documented format):

    <tool>{"name": "calculator", "arguments": {"expression": "4821 * 37"}}</tool>

and receives the result as the next observation, `<result>...</result>`. Nothing the model
writes can crash an episode: malformed JSON, an unknown tool, arguments that do not match
the schema or a tool that raises all come back as `<result>error: ...</result>`, so the model
sees its mistake and can try again (the episode's info counts a call the model got wrong as
malformed, and a tool that raised or ran out of time as a tool error).

A tool's result is text: a string as it is, bytes decoded, None as nothing, a dict, list or
tuple as JSON, anything else by str().
It is cut at the tool's `max_result_chars` (a 10 MB result grew a process to 4.2 GB of token
ids), and a tool with a `timeout` that has not returned by then answers "error: ... timed
out" (it runs in a thread, which Python cannot stop: it is left to finish in the background,
and a tool with 16 such calls still running is not started again). A tool bound to the
thread that made it (an sqlite3 connection, signal handlers) needs `timeout=None`, which runs
it in the caller's thread, without a time limit.

Shipped tools: `calculator` (safe AST evaluation, never eval()), `python` (the code
verifier's sandbox), `search`/`open` over a folder of text documents (BM25 written here),
and a key-value `memory`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import operator
import re
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payoff.core.errors import ConfigError
from payoff.core.pysource import parse_expression

TOOL_OPEN, TOOL_CLOSE = "<tool>", "</tool>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


@dataclass
class Tool:
    """A callable the model may use. `schema` is a JSON schema of the arguments object.

    timeout: seconds a call may take before it answers with an error (None: no limit; the
        call then runs in the episode's own thread).
    max_result_chars: a longer result is cut, with a note saying how much was left out.
    raises_on_bad_input: whatever the tool raises means the model's arguments were wrong (the
        call counts as malformed, as the shipped calculator, open and memory tools raise);
        False: an exception is the tool's own failure (a tool error), except a
        ToolInputError, which a tool raises to say the arguments were wrong.
    per_episode: for a tool with state (the memory): makes a fresh `fn` with empty state;
        ToolEnv.reset calls it, so no state outlives its episode or is shared by two envs.
    """

    name: str
    description: str
    schema: dict[str, Any]
    fn: Callable[..., Any]
    timeout: float | None = 10.0
    max_result_chars: int = 4000
    raises_on_bad_input: bool = False
    per_episode: Callable[[], Callable[..., Any]] | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise ConfigError(
                f"tool {self.name!r}: timeout must be > 0 or None, got {self.timeout}"
            )
        if self.max_result_chars < 1:
            raise ConfigError(
                f"tool {self.name!r}: max_result_chars must be >= 1, got {self.max_result_chars}"
            )

    def for_episode(self) -> Tool:
        """The tool as one episode uses it: itself, or a copy with fresh state."""
        if self.per_episode is None:
            return self
        return dataclasses.replace(self, fn=self.per_episode())

    def spec(self) -> dict[str, Any]:
        """The OpenAI/Hugging Face function spec (for chat templates that list tools)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema,
            },
        }


class ToolInputError(ValueError):
    """Raised by a tool when the model's arguments are wrong: the call counts as malformed
    (what `malformed_cost` charges), not as the tool failing."""


@dataclass
class ToolCall:
    """What the model asked for; `error` is set when the call cannot be run."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def parse_tool_call(text: str) -> ToolCall | None:
    """The tool call in a model turn, or None when the turn contains no <tool> tag.

    The first `<tool>...</tool>` block is parsed; a missing closing tag, invalid JSON, or
    JSON without a string "name" and an object "arguments" gives a ToolCall with `error`.
    """
    start = text.find(TOOL_OPEN)
    if start < 0:
        return None
    end = text.find(TOOL_CLOSE, start)
    if end < 0:
        return ToolCall(error=f"malformed tool call: no closing {TOOL_CLOSE}")
    body = text[start + len(TOOL_OPEN) : end].strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        return ToolCall(error=f"malformed tool call: invalid JSON ({err.msg} at char {err.pos})")
    except (RecursionError, ValueError):  # a model can write [[[[... or a 5,000-digit number
        return ToolCall(error="malformed tool call: JSON nested too deep or a number too long")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall(error='malformed tool call: expected {"name": ..., "arguments": {...}}')
    arguments = data.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCall(
            name=data["name"], error="malformed tool call: 'arguments' must be an object"
        )
    return ToolCall(name=data["name"], arguments=arguments)


def check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """'' when `arguments` fit the (flat) schema, else what is wrong (required, types, extras)."""
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in arguments:
            return f"missing required argument {name!r}"
    for name, value in arguments.items():
        if name not in properties:
            return f"unknown argument {name!r}; valid: {sorted(properties)}"
        expected = properties[name].get("type")
        types = _JSON_TYPES.get(expected, (object,))
        if not isinstance(value, types) or (
            expected in ("integer", "number") and isinstance(value, bool)
        ):
            return f"argument {name!r} must be of type {expected}, got {type(value).__name__}"
    return ""


# What a call came to: the tool answered, the model's call was wrong (malformed), or the
# tool itself raised or ran out of time.
OK, MALFORMED, TOOL_ERROR = "ok", "malformed", "tool_error"
# Calls that ran past their timeout and are still running, by tool: past this many, a tool
# is not started again (each keeps a thread; enough of them exhaust the process's).
MAX_STRANDED = 16
_stranded: dict[str, list[threading.Thread]] = {}


def call_tool(tools: dict[str, Tool], call: ToolCall) -> tuple[str, bool]:
    """Run `call`; returns (result text, whether the tool answered). Never raises: errors
    become the result text. `run_tool_call` says which kind of error."""
    text, status = run_tool_call(tools, call)
    return text, status == OK


def run_tool_call(tools: dict[str, Tool], call: ToolCall) -> tuple[str, str]:
    """Run `call`; returns (result text, OK | MALFORMED | TOOL_ERROR). Never raises."""
    if call.error:
        return f"error: {call.error}", MALFORMED
    tool = tools.get(call.name)
    if tool is None:
        return f"error: unknown tool {call.name!r}; available: {sorted(tools)}", MALFORMED
    problem = check_arguments(tool.schema, call.arguments)
    if problem:
        return f"error: {call.name}: {problem}", MALFORMED
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:  # the call and its result's text, both under the timeout
        try:
            outcome.append((True, _result_text(tool.fn(**call.arguments), tool.max_result_chars)))
        except BaseException as err:  # a tool failing is information for the model, not a crash
            outcome.append((False, err))

    if tool.timeout is None:
        run()
    else:
        stranded = [t for t in _stranded.get(tool.name, []) if t.is_alive()]
        _stranded[tool.name] = stranded
        if len(stranded) >= MAX_STRANDED:
            return (
                f"error: {call.name}: not run: {len(stranded)} earlier calls are still running "
                f"past their {tool.timeout:g} s timeout",
                TOOL_ERROR,
            )
        worker = threading.Thread(target=run, name=f"payoff-tool-{tool.name}", daemon=True)
        try:
            worker.start()
        except RuntimeError as err:  # no thread left to start
            return f"error: {call.name}: not run: {err}", TOOL_ERROR
        worker.join(tool.timeout)
        if not outcome:
            stranded.append(worker)
            return f"error: {call.name}: timed out after {tool.timeout:g} s", TOOL_ERROR
    returned, value = outcome[0]
    if not returned:
        status = (
            MALFORMED
            if tool.raises_on_bad_input or isinstance(value, ToolInputError)
            else TOOL_ERROR
        )
        try:
            detail = f"{type(value).__name__}: {value}"
        except Exception:  # an exception whose message cannot be shown
            detail = type(value).__name__
        return f"error: {call.name}: {detail}", status
    return value, OK


def _result_text(value: Any, limit: int) -> str:
    """A tool's return value as the text the model reads, cut at `limit` characters: a
    string as it is, bytes decoded (UTF-8), None as '', a dict, list or tuple as JSON,
    anything else by str()."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", errors="replace")
    elif value is None:
        text = ""
    elif isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):  # keys JSON cannot hold, or a circular list
            text = str(value)
    else:
        text = str(value)
    if len(text) > limit:
        text = f"{text[:limit]} ... [cut: {len(text) - limit:,} more characters]"
    return text


# ---- calculator -------------------------------------------------------------------------
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max}


def _check_call(name: str, args: list[Any], max_bits: int) -> None:
    """Refuse a call whose cost grows with an argument before it runs. Such a call in C
    holds the GIL to its end: no timeout and no Ctrl-C reaches it (round(1, -10**7) ran
    11 s in the tool's thread, past its 10 s timeout)."""
    if name == "round" and len(args) == 2 and isinstance(args[1], int):
        # round(int, -n) computes 10**n; past the digits of the largest integer allowed the
        # answer is 0 anyway.
        digits = math.ceil(max_bits * math.log10(2))
        if abs(args[1]) > digits:
            raise ValueError(
                f"round's ndigits {args[1]} is outside [-{digits}, {digits}] (the digits of "
                f"a {max_bits}-bit integer)"
            )


def safe_eval(
    expression: str, max_power: int = 100, max_length: int = 200, max_bits: int = 4096
) -> int | float:
    """Evaluate arithmetic by walking its AST: numbers, + - * / // % **, a few functions.

    Names, attributes, calls other than the listed functions, exponents above `max_power`,
    integers past `max_bits` (both could hang the process: ((9**99)**99)**99)**99 needs
    gigabytes) and round's ndigits past the digits of a `max_bits` integer raise
    ValueError, each checked before it is computed: nothing here runs longer than
    milliseconds, so the tool's timeout and Ctrl-C are never needed to stop it.
    """
    if len(expression) > max_length:
        raise ValueError(f"expression longer than {max_length} characters")
    tree = parse_expression(expression)

    def bounded(value: Any) -> Any:
        if isinstance(value, int) and value.bit_length() > max_bits:
            raise ValueError(f"an intermediate result has over {max_bits} bits")
        return value

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > max_power:
                raise ValueError(f"exponent {right} is above {max_power}")
            power = isinstance(node.op, ast.Pow) and isinstance(left, int) and right > 0
            if power and left.bit_length() * right > max_bits:
                raise ValueError(f"the power would have over {max_bits} bits")
            return bounded(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and not node.keywords
        ):
            args = [walk(a) for a in node.args]
            _check_call(node.func.id, args, max_bits)
            return bounded(_FUNCTIONS[node.func.id](*args))
        raise ValueError(f"not allowed in an expression: {ast.dump(node)[:60]}")

    value = walk(tree)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value


def calculator() -> Tool:
    """Arithmetic on numbers: + - * / // % ** and sqrt, abs, round, min, max."""
    return Tool(
        "calculator",
        "Evaluate an arithmetic expression, e.g. '4821 * 37'.",
        {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
        lambda expression: safe_eval(expression),
        raises_on_bad_input=True,
    )


# ---- python ------------------------------------------------------------------------------
def python_runner(timeout: float = 5.0, sandbox: str | None = None) -> Tool:
    """Run a Python program in payoff's OS sandbox; the result is its outcome and output.

    The program gets a fresh sandbox per call (no network, no host files, no new processes);
    the agent sees 'ok', 'error' or 'timeout' and the last 500 characters of its output.
    """
    from payoff.sandbox import check_available, run_program

    mode = check_available(sandbox)

    def run(code: str) -> str:
        result = run_program(code, timeout=timeout, sandbox=mode)
        output = (result.stdout + result.stderr).strip()
        return result.outcome + (f": {output[-500:]}" if output else "")

    return Tool(
        "python",
        "Run a Python program in a sandbox (no network, no files outside its folder, no "
        "subprocesses); returns ok/error/timeout and its output.",
        {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        run,
        timeout=timeout + 10.0,  # the sandbox's own timeout ends the program first
    )


# ---- search / open over local documents ------------------------------------------------------
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 over a list of documents (k1, b as in Robertson & Zaragoza 2009)."""

    def __init__(self, documents: list[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.terms = [Counter(words(d)) for d in documents]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.average = sum(self.lengths) / max(1, len(self.lengths))
        frequency: Counter[str] = Counter()
        for t in self.terms:
            frequency.update(t.keys())
        n = len(documents)
        # The +1 inside the log keeps idf positive for words found in most documents.
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in frequency.items()}

    def scores(self, query: str) -> list[float]:
        out = []
        for terms, length in zip(self.terms, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / max(self.average, 1e-9))
            out.append(
                sum(
                    self.idf.get(w, 0.0) * terms[w] * (self.k1 + 1) / (terms[w] + norm)
                    for w in words(query)
                    if w in terms
                )
            )
        return out

    def top(self, query: str, k: int) -> list[int]:
        scores = self.scores(query)
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [i for i in ranked[:k] if scores[i] > 0]


class DocumentIndex:
    """Text files of a folder (*.txt, *.md), searchable with BM25 and readable by name.

    Symbolic links are skipped, with one warning that counts them: a link named notes.txt
    that points at ~/.ssh/id_rsa or /etc/passwd would hand that file to the model.
    """

    def __init__(self, folder: str | Path):
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"document folder {str(folder)!r} does not exist")
        root = folder.resolve()
        paths, links = [], []
        for path in sorted(folder.rglob("*")):
            if path.suffix not in (".txt", ".md"):
                continue
            # rglob does not descend into linked folders today; resolve() also catches a
            # linked folder above the file should that change (Python 3.13's rglob options).
            if path.is_symlink() or not path.resolve().is_relative_to(root):
                links.append(path)
            elif path.is_file():
                paths.append(path)
        if links:
            warnings.warn(
                f"document folder {str(folder)!r}: skipped {len(links)} symbolic link(s), "
                f"e.g. {str(links[0].relative_to(folder))!r}: documents must be files in the "
                f"folder itself",
                stacklevel=2,
            )
        if not paths:
            raise ConfigError(f"document folder {str(folder)!r} holds no .txt or .md files")
        self.names = [p.stem for p in paths]
        self.texts = [p.read_text(encoding="utf-8") for p in paths]
        self.bm25 = BM25(self.texts)

    def search(self, query: str, k: int = 3) -> str:
        hits = self.bm25.top(query, k)
        return ", ".join(self.names[i] for i in hits) if hits else "no results"

    def open(self, name: str) -> str:
        if name not in self.names:
            raise KeyError(f"no document {name!r}")
        return self.texts[self.names.index(name)].strip()


def search_tools(index: DocumentIndex, k: int = 3) -> list[Tool]:
    """`search` (names of the k best documents for a query) and `open` (a document's text)."""
    return [
        Tool(
            "search",
            f"Names of the {k} documents that best match a query (BM25).",
            {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            lambda query: index.search(query, k),
        ),
        Tool(
            "open",
            "The text of a document, by the name search returned.",
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            lambda name: index.open(name),
            raises_on_bad_input=True,
        ),
    ]


# ---- memory ----------------------------------------------------------------------------------
def memory_tool(store: dict[str, str] | None = None) -> Tool:
    """A key-value memory: {"op": "set", "key", "value"} stores, {"op": "get", "key"} reads.

    Each episode starts from a copy of `store` (default: empty): ToolEnv.reset makes the
    memory afresh, so nothing one episode stored is read by the next or by another env.
    """
    initial = dict(store or {})

    def fresh() -> Callable[..., str]:
        episode_store = dict(initial)

        def memory(op: str, key: str, value: str = "") -> str:
            if op == "set":
                episode_store[key] = value
                return "ok"
            if op == "get":
                return episode_store.get(key, "not found")
            raise ValueError(f"op must be 'set' or 'get', got {op!r}")

        return memory

    return Tool(
        "memory",
        "A key-value store that lasts for the episode: op 'set' (key, value) or 'get' (key).",
        {
            "type": "object",
            "properties": {
                "op": {"type": "string"},
                "key": {"type": "string"},
                "value": {"type": "string"},
            },
            "required": ["op", "key"],
        },
        fresh(),
        raises_on_bad_input=True,
        per_episode=fresh,
    )
