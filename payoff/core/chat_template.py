"""A chat template rendered within bounds.

A chat template is code from the model folder's author. payoff renders it itself, in
`BoundedTemplates` (jinja2's immutable sandbox, as transformers uses, with the same
variables and helpers), and bounds what one rendering may cost: numbers of at most
MAX_INT_BITS bits, strings and lists of at most MAX_TEMPLATE_CHARS, MAX_LOOP_STEPS loop
steps and TEMPLATE_SECONDS in all. transformers' own sandbox has no such bounds:
`{{ 7 ** 2000000000 }}` or loops nested over `range(100000)` held tokenization forever.
It lives in core, beside the bounded YAML reader, because text envs render conversations
too (payoff.envs.text.formats) and prompts do (payoff.models.chat).
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from payoff.core.errors import ConfigError

Message = dict[str, str]


def render_chat(
    tokenizer: Any,
    messages: list[Message],
    add_generation_prompt: bool = False,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """`tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, ...)`, rendered
    in `BoundedTemplates`. ConfigError naming the model folder for a template that does not
    parse, refuses these messages (its own raise_exception, e.g. for a system turn it does
    not support) or goes past the bounds."""
    import jinja2

    roles = [m.get("role") for m in messages]
    try:
        template = _compiled(tokenizer.get_chat_template(None, tools))
        variables = {
            **tokenizer.special_tokens_map,
            "messages": [{k: v for k, v in m.items() if v is not None} for m in messages],
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        with _budget():
            return template.render(**_plain(variables))
    except (jinja2.TemplateError, RecursionError, TemplateTooCostly) as err:
        folder = getattr(tokenizer, "name_or_path", "") or "(a tokenizer made in Python)"
        fix = (
            "Use a model whose template stays within them"
            if isinstance(err, TemplateTooCostly)
            else "Repair the template (tokenizer_config.json's chat_template, or "
            "chat_template.jinja, in the model folder)"
        )
        raise ConfigError(
            f"the tokenizer's chat template failed on a conversation with roles {roles} "
            f"(the template of the model in {str(folder)!r}): {type(err).__name__}: "
            f"{str(err)[:300]}. {fix}, or set "
            f"model.chat_template=none to feed prompts as plain text"
        ) from None


# ---- rendering a template within bounds --------------------------------------------------
MAX_INT_BITS = 4096  # a template counts messages and indexes: 64 bits would do
MAX_TEMPLATE_CHARS = 4_000_000  # the longest string or list made, the output included
MAX_LOOP_STEPS = 1_000_000  # steps of all loops of one rendering (a few per message)
TEMPLATE_SECONDS = 10.0  # one rendering; real ones take well under a millisecond


class TemplateTooCostly(Exception):
    """A chat template past one of the bounds above (not a jinja2 error: nothing may catch it)."""


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + TEMPLATE_SECONDS
        self.loop_steps = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateTooCostly(f"it rendered for more than {TEMPLATE_SECONDS:g} s")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("budget", default=None)


class _budget:  # noqa: N801 (a context manager used as `with _budget():`)
    """A fresh budget for one rendering (or one compilation, which folds constants)."""

    def __enter__(self) -> _Budget:
        budget = _Budget()
        self.token = _BUDGET.set(budget)
        return budget

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self.token)


def _tick() -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.tick()


def _size(value: Any, limit: int = MAX_TEMPLATE_CHARS) -> int:
    """Characters in a string, items in a list or dict (with the sizes of what they hold),
    counted up to just past `limit`: what an operation on `value` may copy."""
    if isinstance(value, str | bytes):
        return len(value)
    if not isinstance(value, list | tuple | dict):
        return 1
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, list | tuple):
            total += len(item)
            stack.extend(item)
        elif isinstance(item, dict):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
    return total


def _check_result(value: Any, what: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise TemplateTooCostly(f"{what} made a number of more than {MAX_INT_BITS} bits")
    elif _size(value) > MAX_TEMPLATE_CHARS:
        raise TemplateTooCostly(f"{what} made more than {MAX_TEMPLATE_CHARS:,} characters or items")
    return value


_BIG_WIDTH = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format


def _check_arguments(args: Iterable[Any], what: str) -> None:
    """Refuse, before the call, arguments that make one call costly: an int of a million
    or more (a width: 'a'.center(10**9)), a format with such a width, or more than
    MAX_TEMPLATE_CHARS characters and items in all ([s] * 1000 | join)."""
    total = 0
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) >= 10**6:
            raise TemplateTooCostly(
                f"{what} was given {arg if abs(arg) < 10**30 else 'a huge number'}"
            )
        if isinstance(arg, str) and _BIG_WIDTH.search(arg) and ("%" in arg or "{" in arg):
            raise TemplateTooCostly(f"{what} was given a format with a width of a million or more")
        total += _size(arg)
        if total > MAX_TEMPLATE_CHARS:
            raise TemplateTooCostly(
                f"{what} was given more than {MAX_TEMPLATE_CHARS:,} characters or items"
            )


def _products(name: str, args: tuple[Any, ...]) -> None:
    """The calls whose result may be the product of their arguments' sizes."""
    if name == "replace" and len(args) >= 3 and all(isinstance(a, str) for a in args[:3]):
        text, old, new = args[:3]
        grows = (text.count(old) if old else len(text) + 1) * len(new)
        if len(text) + grows > MAX_TEMPLATE_CHARS:
            raise TemplateTooCostly(
                f"replace would make more than {MAX_TEMPLATE_CHARS:,} characters"
            )
    if name in ("indent", "expandtabs", "center", "ljust", "rjust", "zfill", "wordwrap"):
        text = args[0] if args and isinstance(args[0], str) else ""
        widths = [a for a in args[1:] if isinstance(a, int | str) and not isinstance(a, bool)]
        width = max((len(w) if isinstance(w, str) else w for w in widths), default=0)
        if (text.count("\n") + text.count("\t") + 1) * max(width, 0) + len(
            text
        ) > MAX_TEMPLATE_CHARS:
            raise TemplateTooCostly(
                f"{name} would make more than {MAX_TEMPLATE_CHARS:,} characters"
            )


def _bounded_filter(name: str, function: Any) -> Any:
    @functools.wraps(function)  # (keeps jinja's pass_context marks)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        plain = [a for a in args if not _is_jinja_object(a)]
        _check_arguments([*plain, *kwargs.values()], f"the filter {name!r}")
        _products(name, (*plain, *kwargs.values()))
        return _check_result(function(*args, **kwargs), f"the filter {name!r}")

    return bounded


def _is_jinja_object(value: Any) -> bool:
    return type(value).__module__.startswith("jinja2")


def _counted(items: Any) -> Iterator[Any]:
    """A loop's items, each a step of the rendering's budget."""
    budget = _BUDGET.get()
    for item in items:
        if budget is not None:
            budget.loop_steps += 1
            if budget.loop_steps > MAX_LOOP_STEPS:
                raise TemplateTooCostly(f"its loops took more than {MAX_LOOP_STEPS:,} steps")
            budget.tick()
        yield item


def _joined(items: Any) -> str:
    """`a ~ b ~ c`, refused before it is joined when it would be too long."""
    _tick()
    parts = [str(item) for item in items]
    if sum(map(len, parts)) > MAX_TEMPLATE_CHARS:
        raise TemplateTooCostly(f"'~' would make more than {MAX_TEMPLATE_CHARS:,} characters")
    return "".join(parts)


def _make_environment() -> Any:
    """`BoundedTemplates` with transformers' extensions, filters and globals; every filter
    bounded, loops counted, `~` joined and the output concatenated within the budget."""
    import jinja2.ext

    template_filters, template_globals = _transformers_helpers()
    environment = _bounded_templates()(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_generation_tag(), jinja2.ext.loopcontrols],
    )
    environment.filters.update(template_filters)
    environment.filters = {
        name: _bounded_filter(name, function) for name, function in environment.filters.items()
    }
    environment.filters["_payoff_counted"] = _counted
    environment.filters["_payoff_joined"] = _joined
    environment.globals.update(template_globals)
    environment.concat = _bounded_concat  # the output, as it is rendered
    return environment


def _generation_tag() -> Any:
    """The jinja2 extension for transformers' `generation` tag."""
    import jinja2.ext

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (transformers marks the assistant's
        tokens with it); rendered as its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return Generation


def _bounded_templates() -> Any:
    """The class `BoundedTemplates` (jinja2 is imported when a template is first rendered)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    budgeted = _budgeted()

    class BoundedTemplates(ImmutableSandboxedEnvironment):
        """jinja2's immutable sandbox, with each operation that can cost without bound
        checked against the rendering's budget (see the module's docstring)."""

        intercepted_binops = frozenset({"**", "*", "+", "%", "//"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _tick()
            numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
            if (
                operator == "**"
                and numbers
                and right > 0
                and (abs(left).bit_length() - 1) * right > MAX_INT_BITS  # (its bits, at least)
            ):
                raise TemplateTooCostly(
                    f"'**' would make a number of more than {MAX_INT_BITS} bits"
                )
            if operator == "*" and not numbers:
                count = right if isinstance(right, int) else left if isinstance(left, int) else 1
                other = left if isinstance(right, int) else right
                if isinstance(count, int) and count * _size(other) > MAX_TEMPLATE_CHARS:
                    raise TemplateTooCostly(
                        f"'*' would make more than {MAX_TEMPLATE_CHARS:,} characters or items"
                    )
            if operator == "%" and isinstance(left, str):
                _check_arguments([left], "'%'")
            return _check_result(
                super().call_binop(context, operator, left, right), f"'{operator}'"
            )

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _tick()
            name = getattr(__obj, "__name__", "a function")
            bound = getattr(__obj, "__self__", None)
            receiver = [bound] if isinstance(bound, str | list | tuple | dict) else []
            _check_arguments([*receiver, *args, *kwargs.values()], f"{name}()")
            _products(name, (*receiver, *args))
            result = super().call(__context, __obj, *args, **kwargs)
            return _check_result(result, f"{name}()")

        def getattr(self, obj: Any, attribute: str) -> Any:
            _tick()
            if isinstance(obj, str) and attribute in ("format", "format_map"):
                _check_arguments([obj], f"{attribute}()")  # (jinja wraps the method)
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _tick()
            return super().getitem(obj, argument)

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            tree = budgeted().visit(super()._parse(source, name, filename))
            tree.set_environment(self)
            return tree

    return BoundedTemplates


def _budgeted() -> Any:
    """The parse-tree rewrite that puts loops and `~` under the budget."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    class Budgeted(NodeTransformer):
        """Every loop's items count against the budget; `a ~ b` is joined by `_joined`."""

        def visit_For(self, node: Any) -> Any:  # noqa: N802 (jinja's visitor names)
            self.generic_visit(node)
            node.iter = nodes.Filter(node.iter, "_payoff_counted", [], [], None, None)
            node.iter.set_lineno(node.lineno)
            return node

        def visit_Concat(self, node: Any) -> Any:  # noqa: N802
            self.generic_visit(node)
            items = nodes.List(node.nodes)
            joined = nodes.Filter(items, "_payoff_joined", [], [], None, None)
            return joined.set_lineno(node.lineno)

    return Budgeted


def _transformers_helpers() -> tuple[dict[str, Any], dict[str, Any]]:
    """(filters, globals) that transformers gives a chat template: `tojson`, and
    `raise_exception`, `strftime_now`, `dict` and `namespace`."""
    import jinja2

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    class TemplateDict:  # `dict(...)` and `dict.fromkeys(...)`, nothing else of the class
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class Namespace(jinja2.utils.Namespace):
        """jinja's namespace, refusing names that start with '_' (as transformers does)."""

        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (jinja's signature trick)
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for key in attrs:
                Namespace.check(key)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, key: str, value: Any) -> None:
            Namespace.check(key)
            jinja2.utils.Namespace.__setitem__(self, key, value)

        @staticmethod
        def check(key: Any) -> None:
            if isinstance(key, str) and key.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"a namespace name may not start with '_': {key!r}"
                )

    return {"tojson": tojson}, {
        "raise_exception": raise_exception,
        "strftime_now": lambda format: datetime.now().strftime(format),
        "dict": TemplateDict(),
        "namespace": Namespace,
    }


def _bounded_concat(pieces: Iterable[str]) -> str:
    out, length = [], 0
    for piece in pieces:
        length += len(piece)
        if length > MAX_TEMPLATE_CHARS:
            raise TemplateTooCostly(f"its output is longer than {MAX_TEMPLATE_CHARS:,} characters")
        out.append(piece)
    return "".join(out)


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    return _make_environment()


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> Any:
    with _budget():  # (compiling folds constant expressions)
        return _environment().from_string(source)


def _plain(value: Any) -> Any:
    """What a template may see: JSON-like data only, copied (as transformers does)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
