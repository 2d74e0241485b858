"""Chat: the GGUF's ``tokenizer.chat_template`` rendered with jinja2, as llama.cpp's ``--jinja`` does, and the
model's end-of-turn tokens.

The template gets what Hugging Face templates expect: ``messages`` (dicts with ``role`` and ``content``),
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception(msg)`` and ``strftime_now(fmt)``; it runs
in jinja2's immutable sandbox with ``trim_blocks`` and ``lstrip_blocks`` (the transformers settings).

A template is code from the file, so rendering is bounded as well as sandboxed (:class:`_BoundedSandbox`):

- **time**: a deadline (:data:`TIME_LIMIT`), checked at every call, attribute or item access, intercepted
  operator, filter, loop iteration and piece of output;
- **size**: the output is streamed and counted, and every string or list the template builds (``*``, ``+``, ``%``,
  ``~``, ``join``, ``replace``, ``indent``, calls, filters) is checked against the same bound *before* it is built
  where its size is known in advance; values printed, compared, or given to a call or filter are measured through
  their nested lists and dicts first (a list of shared parts prints, and compares, as the sum of its paths). The
  bound is ``max_chars``, by default :data:`MIN_OUTPUT_CHARS` or :data:`OUTPUT_FACTOR` times the text given to the
  template, whichever is larger; a caller that knows the context size passes a tighter one;
- **nesting**: macro, ``caller()`` and recursive-loop calls nest at most :data:`MAX_CALL_DEPTH` deep;
- integers stay small (``**`` and ``*`` of integers past :data:`MAX_INT_BITS` bits are refused) and the widths a
  filter or string method pads to stay under :data:`MAX_WIDTH`.

Every failure (a template that does not parse, raises, or runs past a limit) is a one-line
:class:`~ggml_core.ChatTemplateError` naming the file and the key, its message escaped and bounded.
"""

from __future__ import annotations

import datetime
import functools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jinja2 import nodes
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from ggml_core._errors import ChatTemplateError, GGUFError
from ggml_core._text import safe_text
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.tokenizer import TOKEN_TYPE, Tokenizer

__all__ = [
    "END_OF_TURN_TEXTS",
    "MAX_CALL_DEPTH",
    "MAX_INT_BITS",
    "MAX_WIDTH",
    "MIN_OUTPUT_CHARS",
    "OUTPUT_FACTOR",
    "TIME_LIMIT",
    "ChatTemplate",
    "end_of_turn_ids",
]

KEY: Final = "tokenizer.chat_template"
#: token texts llama.cpp treats as end of generation besides the EOS id (its ``special_eog_ids``)
END_OF_TURN_TEXTS: Final = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|return|>",
                            "<|eom_id|>", "<|call|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>")  # fmt: skip

#: seconds one render may take (real templates take milliseconds)
TIME_LIMIT: Final = 3.0
#: the output (and any value built on the way) may reach this many characters whatever the input...
MIN_OUTPUT_CHARS: Final = 1 << 20
#: ... or this many times the characters of the text given to the template
OUTPUT_FACTOR: Final = 16
#: macro / caller / recursive-loop calls nested deeper than this fail
MAX_CALL_DEPTH: Final = 100
#: integers the template computes stay under this many bits
MAX_INT_BITS: Final = 1 << 16
#: widths and counts given to padding filters and string methods stay under this
MAX_WIDTH: Final = 1 << 16

#: the filter every for loop's iterable is passed through (the loop's deadline check)
_LOOP_FILTER: Final = "ggml_core_loop_deadline"
#: the filter every ``~`` concatenation becomes (its size checked before it is built)
_CONCAT_FILTER: Final = "ggml_core_bounded_concat"
#: the filter every comparison's operands pass through (nested values compared element by element are bounded)
_CHECK_FILTER: Final = "ggml_core_bounded_value"
#: filters and str methods whose integer arguments are widths or counts of what they build
_WIDTH_FILTERS: Final = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice", "tojson", "format"})
_WIDTH_METHODS: Final = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "format", "format_map"})
#: a number in a format string (``%9999999d``, ``{:>9999999}``) past MAX_WIDTH digits
_BIG_NUMBER: Final = re.compile(r"\d{6,}")


def end_of_turn_ids(tok: Tokenizer) -> list[int]:
    """The ids that end a reply: EOS, and the control tokens with an end-of-turn text."""
    ids = {tok.eos_id} if tok.eos_id is not None else set()
    for text in END_OF_TURN_TEXTS:
        tid = tok.token_id(text)
        if tid is not None and (not tok.types or tok.types[tid] in (TOKEN_TYPE["control"], TOKEN_TYPE["user_defined"])):
            ids.add(tid)
    # llama.cpp's o200k_harmony workaround (gpt-oss): with <|return|> and <|call|> both there, <|end|> only closes
    # the analysis channel inside one reply, so it does not end the turn
    if all(tok.token_id(t) in ids for t in ("<|return|>", "<|call|>")):
        ids.discard(tok.token_id("<|end|>"))
    return sorted(ids)


class _RenderStop(Exception):
    """A render stops: it ran past one of its limits, or the template called raise_exception (the message says)."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple | dict) else 0


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


def _big_format(fmt: Any) -> bool:
    return isinstance(fmt, str) and any(int(m.group()) > MAX_WIDTH for m in _BIG_NUMBER.finditer(fmt))


def _estimate(name: str, value: Any, args: Sequence[Any]) -> int:
    """The length of what ``join``/``replace``/``indent``/``expandtabs`` will build (0 when unknown)."""
    if name == "join" and isinstance(args[0] if args else None, list | tuple) and isinstance(value, str):
        items = args[0]
        return len(value) * len(items) + sum(len(x) for x in items if isinstance(x, str))
    if not isinstance(value, str):
        return 0
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = value.count(args[0]) if args[0] else len(value) + 1
        return len(value) + count * max(0, len(args[1]) - len(args[0]))
    if name == "indent":
        width = args[0] if args else 4
        per_line = width if isinstance(width, int) else _size(width)
        return len(value) + (value.count("\n") + 1) * per_line
    if name == "expandtabs":
        tab = args[0] if args and isinstance(args[0], int) else 8
        return len(value) + value.count("\t") * tab
    return 0


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with a deadline, a size bound and a call-depth bound (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, deadline: float, max_chars: int) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=self._bounded_value)
        self.deadline, self.max_chars, self.depth = deadline, max_chars, 0
        self._sized: dict[int, tuple[Any, int]] = {}  # id → (container, its deep size), for containers measured
        self.globals.pop("lipsum", None)  # builds unbounded text; no chat template uses it
        for name, func in list(self.filters.items()):
            self.filters[name] = self._bounded_filter(name, func)
        self.filters[_LOOP_FILTER] = self._loop
        self.filters[_CONCAT_FILTER] = self._concat
        self.filters[_CHECK_FILTER] = self._bounded_value

    # ------------------------------------------------------------------------------------------------ checks

    def tick(self) -> None:
        """Fail once the deadline has passed."""
        if time.monotonic() > self.deadline:
            raise _RenderStop(f"took longer than the {TIME_LIMIT:g} s limit (a loop that does not end?)")

    def check_size(self, n: int, what: str) -> None:
        """Fail when a value of ``n`` characters (or items) would be over the size bound."""
        if n > self.max_chars:
            raise _RenderStop(f"{what} of {n:,} characters or items is over the limit of {self.max_chars:,}")

    def deep_size(self, value: Any) -> int:
        """Characters and items in ``value``, through nested lists, tuples and dicts (a part reached twice counts
        twice, as printing it would); the count stops once past the size bound."""
        if not isinstance(value, list | tuple | dict):
            return _size(value)
        known = self._sized.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        total, stack, bound = 0, [value], self.max_chars
        while stack and total <= bound:
            item = stack.pop()
            if isinstance(item, list | tuple):
                total += len(item)
                stack.extend(item)
            elif isinstance(item, dict):
                total += len(item)
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                total += _size(item)
        if total <= bound:
            self._sized[id(value)] = (value, total)
        return total

    def _bounded_value(self, value: Any) -> Any:
        """``value`` unchanged, once its deep size is within the bound (printed values, compared values)."""
        self.tick()
        self.check_size(self.deep_size(value), "a value")
        return value

    def _check_args(self, name: str, args: Sequence[Any], kwargs: dict[str, Any], widths: bool) -> None:
        for a in (*args, *kwargs.values()):
            self.check_size(self.deep_size(a), f"an argument to {name}")
            if widths and isinstance(a, int) and abs(a) > MAX_WIDTH:
                raise _RenderStop(f"{name}: the width or count {a} is over the limit of {MAX_WIDTH}")

    # ------------------------------------------------------------------------------------------------ hooks

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.tick()
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", type(__obj).__name__)
        if isinstance(owner, str | bytes | list | tuple):
            __self._check_args(name, args, kwargs, name in _WIDTH_METHODS)
            if name in ("format", "format_map") and isinstance(owner, str) and _big_format(owner):
                raise _RenderStop(f"format: a width in {safe_text(owner, 60)!r} is over {MAX_WIDTH}")
            __self.check_size(_estimate(name, owner, args), f"the result of {name}")
        else:
            __self._check_args(name, args, kwargs, False)
        if __self.depth >= MAX_CALL_DEPTH:
            raise _RenderStop(f"calls nested deeper than {MAX_CALL_DEPTH} (a macro that recurses without end?)")
        __self.depth += 1
        try:
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            __self.depth -= 1
        __self.check_size(_size(result), f"the result of {name}")
        return result

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        if operator == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(n, int) and _size(seq):
                self.check_size(_size(seq) * max(n, 0), "a repeated string or list")
            elif (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() + right.bit_length() > MAX_INT_BITS
            ):
                raise _RenderStop(f"an integer product over {MAX_INT_BITS} bits")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and max(left.bit_length() - 1, 1) * right > MAX_INT_BITS and abs(left) > 1:
                raise _RenderStop(f"a power over {MAX_INT_BITS} bits")
        elif operator == "+":
            self.check_size(_size(left) + _size(right), "a concatenation")
        elif operator == "%" and isinstance(left, str):
            if _big_format(left) or (
                "*" in left and any(isinstance(a, int) and a > MAX_WIDTH for a in _as_tuple(right))
            ):
                raise _RenderStop(f"'%' formatting: a width in {safe_text(left, 60)!r} is over {MAX_WIDTH}")
            self.check_size(self.deep_size(right), "the values given to '%'")
        result = super().call_binop(context, operator, left, right)
        self.check_size(_size(result), f"the result of {operator!r}")
        return result

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.tick()
        value = super().getattr(obj, attribute)
        self.check_size(_size(value), f"attribute {safe_text(attribute, 60)!r}")
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.tick()
        value = super().getitem(obj, argument)
        self.check_size(_size(value), "an item")
        return value

    def _bounded_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        skip = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0  # context / eval context / environment

        @functools.wraps(func)
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self.tick()
            value, rest = (args[skip], args[skip + 1 :]) if len(args) > skip else (None, ())
            self.check_size(self.deep_size(value), f"the value given to filter {name!r}")
            self._check_args(f"filter {name!r}", rest, kwargs, name in _WIDTH_FILTERS)
            if name == "format" and _big_format(value):
                raise _RenderStop(f"filter 'format': a width in {safe_text(str(value), 60)!r} is over {MAX_WIDTH}")
            if name == "join":
                sep = rest[0] if rest else kwargs.get("d", "")
                items = list(value) if isinstance(value, list | tuple | range) else value
                self.check_size(_estimate("join", sep, [items]), "the result of filter 'join'")
            else:
                self.check_size(_estimate(name, value, rest), f"the result of filter {name!r}")
            result = func(*args, **kwargs)
            self.check_size(_size(result), f"the result of filter {name!r}")
            return result

        return bounded

    def _loop(self, iterable: Any) -> Any:
        """A for loop's iterable, checking the deadline at each item (a loop may call nothing else)."""
        if isinstance(iterable, Undefined):
            return iterable
        return _DeadlineIterable(iterable, self)

    def _concat(self, items: list[Any]) -> str:
        """``a ~ b ~ ...`` as jinja2 builds it (``str`` of each), its length checked before it is joined."""
        self.tick()
        self.check_size(sum(map(self.deep_size, items)), "a concatenation ('~')")
        parts = [str(x) for x in items]
        self.check_size(sum(map(len, parts)), "a concatenation ('~')")
        return "".join(parts)

    def bounded_parse(self, source: str) -> nodes.Template:
        """``source`` parsed, every for loop's iterable passed through the deadline filter and every ``~``
        concatenation through the size-checked one."""
        tree = self.parse(source)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None, lineno=loop.lineno)
        for cmp in tree.find_all(nodes.Compare):
            cmp.expr = nodes.Filter(cmp.expr, _CHECK_FILTER, [], [], None, None, lineno=cmp.lineno)
            for op in cmp.ops:
                op.expr = nodes.Filter(op.expr, _CHECK_FILTER, [], [], None, None, lineno=cmp.lineno)
        return _ConcatToFilter().visit(tree)


class _ConcatToFilter(NodeTransformer):
    """Rewrites ``a ~ b`` (a Concat node) as ``[a, b] | ggml_core_bounded_concat``."""

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        items = [self.visit(n) for n in node.nodes]
        return nodes.Filter(
            nodes.List(items, lineno=node.lineno), _CONCAT_FILTER, [], [], None, None, lineno=node.lineno
        )


class _DeadlineIterable:
    """An iterable whose iteration checks the sandbox's deadline at each item (its length is the wrapped one's)."""

    def __init__(self, inner: Any, env: _BoundedSandbox) -> None:
        self.inner, self.env = inner, env

    def __iter__(self) -> Iterator[Any]:
        tick = self.env.tick
        for item in self.inner:
            tick()
            yield item

    def __len__(self) -> int:
        return len(self.inner)


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the strings it is given."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    origin: str = "<template>"

    @classmethod
    def from_gguf(cls, f: GGUFFile, tok: Tokenizer) -> ChatTemplate:
        """The file's template (GGUFError when it has none)."""
        if not f.has(KEY):
            raise GGUFError(f.path, f"metadata {KEY!r}", "is missing: this model has no chat template")
        bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
        eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
        return cls(f.get_str(KEY), bos, eos, f"{f.path}: metadata {KEY!r}")

    def _error(self, message: str) -> ChatTemplateError:
        path, _, field = self.origin.partition(": ")
        return ChatTemplateError(path, field or "chat template", safe_text(message, 400))

    def render(
        self,
        messages: Sequence[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        max_chars: int | None = None,
        time_limit: float = TIME_LIMIT,
    ) -> str:
        """The prompt text for ``messages``.

        :param max_chars: the most characters the output (and any value built on the way) may have; by default
            the larger of :data:`MIN_OUTPUT_CHARS` and :data:`OUTPUT_FACTOR` times the text given to the template
        :param time_limit: seconds the render may take
        :raises ChatTemplateError: the template does not parse, fails, or runs past a limit (one line naming it)
        """
        from jinja2 import TemplateSyntaxError

        given = sum(len(str(v)) for m in messages for v in m.values()) + len(self.bos_token) + len(self.eos_token)
        limit = max_chars if max_chars is not None else max(MIN_OUTPUT_CHARS, OUTPUT_FACTOR * given)
        env = _BoundedSandbox(time.monotonic() + time_limit, limit)

        def raise_exception(message: str) -> None:
            raise _RenderStop(str(message)) from None

        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            template = env.from_string(env.bounded_parse(self.source))
        except TemplateSyntaxError as exc:
            raise self._error(f"does not parse: {exc} (line {exc.lineno})") from None
        except (RecursionError, MemoryError) as exc:
            raise self._error(f"does not parse: {type(exc).__name__} (nested too deeply or too large)") from None
        except Exception as exc:  # noqa: BLE001 - e.g. Python's own limits on the code jinja2 compiles it to
            raise self._error(f"does not compile: {type(exc).__name__}: {exc}") from None
        context = {
            "messages": list(messages),
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        try:
            out: list[str] = []
            n = 0
            for piece in template.generate(context):
                n += len(piece)
                env.check_size(n, "the output")
                env.tick()
                out.append(piece)
            return "".join(out)
        except _RenderStop as exc:
            raise self._error(f"failed to render: {exc}") from None
        except RecursionError:
            raise self._error(
                "failed to render: calls nested too deeply (a macro that recurses without end?)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the template is code from the file: whatever it raises is its failure
            raise self._error(f"failed to render: {type(exc).__name__}: {exc}") from None
