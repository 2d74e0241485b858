"""Chat templates are code from the model file: rendering is bounded in time, size and nesting, and every failure
is one line naming the template — never a hang, gigabytes of memory, or a MemoryError / RecursionError /
OverflowError traceback.

Each hostile case renders in a child process (a hang or a runaway allocation cannot take the test run with it) under
an address-space cap, with tracemalloc measuring the render's peak; legitimate templates render exactly as plain
jinja2's sandbox renders them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gguf import GGUFWriter
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core import ChatTemplateError, GGUFError
from ggml_core.cli import main
from ggml_core.models.chat import ChatTemplate

ORIGIN = "/models/evil.gguf: metadata 'tokenizer.chat_template'"

_CHILD = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    from ggml_core.models.chat import ChatTemplate
    source, origin = sys.argv[1], sys.argv[2]
    tracemalloc.start()
    try:
        ChatTemplate(source, origin=origin).render([{"role": "user", "content": "hi"}])
        kind, message = None, ""
    except BaseException as exc:
        kind, message = type(exc).__name__, str(exc)
    print(json.dumps({"kind": kind, "message": message, "peak": tracemalloc.get_traced_memory()[1]}))
    """
)

#: (template, what the one-line error says)
HOSTILE = {
    "nested range loops": (
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "longer than",
    ),
    "loops over a stored range": (
        "{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}",
        "longer than",
    ),
    "a huge repeated string": ("{{ 'a' * 10**10 }}", "over the limit"),
    "string doubling with +": (
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
        "over the limit",
    ),
    "string doubling with ~": (
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "over the limit",
    ),
    "doubling through names": (
        "{% set a = 'x' * 500000 %}" + "".join("{% set a = a ~ a ~ a ~ a %}" for _ in range(12)) + "{{ a }}",
        "over the limit",
    ),
    "doubling through a macro": (
        "{% macro d(s, n) %}{{ d(s ~ s, n + 1) if n < 60 else s|length }}{% endmacro %}{{ d('ab', 0) }}",
        "over the limit",
    ),
    "a recursive macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper"),
    "a range past the sandbox's": ("{{ range(10**7)|length }}", "Range too big"),
    "100 MB of output": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "the output"),
    "a huge power": ("{{ 10 ** 100000000 }}", "bits"),
    "a join with a huge separator": ("{{ range(100000)|join('x' * 100000) }}", "over the limit"),
    "a huge pad width": ("{{ 'x'|center(2000000000) }}", "width"),
    "a huge format width": ("{{ '%2000000000d' % 1 }}", "width"),
    "replace blowing up": ("{{ ('x' * 100000).replace('', 'y' * 1000) }}", "over the limit"),
    "indent blowing up": ("{{ ('\\n' * 100000)|indent('y' * 1000) }}", "over the limit"),
    "a huge error message": ("{{ raise_exception('x' * 1000000) }}", "xxxx"),
    "division by zero": ("{{ 1 // 0 }}", "ZeroDivisionError"),
    "a list printed through shared parts": (
        "{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
        "{{ ns.l }}",
        "over the limit",
    ),
    "two such lists compared": (
        "{% set a = namespace(l=[0]) %}{% set b = namespace(l=[0]) %}{% for i in range(40) %}"
        "{% set a.l = [a.l, a.l] %}{% set b.l = [b.l, b.l] %}{% endfor %}{{ a.l == b.l }}",
        "over the limit",
    ),
    "a width taken from the arguments": ("{{ '%*d' % (2000000000, 1) }}", "width"),
    "tojson of shared strings": ("{% set a = 'x' * 900000 %}{{ [a, a, a]|tojson }}", "over the limit"),
}

#: (template, what the one-line error says) for templates that fail before rendering
UNCOMPILABLE = {
    "nesting past the parser's recursion": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "does not parse"),
    "nesting past Python's block limit": (
        "".join(f"{{% for x{i} in [1] %}}" for i in range(30)) + "x" + "{% endfor %}" * 30,
        "does not compile",
    ),
}


def _render_in_child(source: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, source, ORIGIN], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_template_fails_in_one_line_with_bounded_memory(case: str) -> None:
    source, says = HOSTILE[case]
    got = _render_in_child(source)
    assert got["kind"] == "ChatTemplateError", got
    message = str(got["message"])
    assert message.startswith(ORIGIN + ": failed to render: ") and says in message
    assert "\n" not in message and len(message) < 600
    assert int(str(got["peak"])) < 64 << 20  # far from the gigabytes the template asks for


@pytest.mark.parametrize("case", list(UNCOMPILABLE))
def test_template_that_cannot_compile_fails_in_one_line(case: str) -> None:
    source, says = UNCOMPILABLE[case]
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate(source, origin=ORIGIN).render([])
    assert str(err.value).startswith(f"{ORIGIN}: {says}") and "\n" not in str(err.value)


def test_template_that_does_not_parse_names_it() -> None:
    with pytest.raises(ChatTemplateError, match=r"evil\.gguf: metadata 'tokenizer.chat_template': does not parse"):
        ChatTemplate("{% for %}", origin=ORIGIN).render([])
    assert issubclass(ChatTemplateError, GGUFError)  # callers that catch GGUFError keep working


def test_output_bound_follows_the_caller() -> None:
    t = ChatTemplate("{% for m in messages %}{{ m['content'] * 3 }}{% endfor %}")
    msgs = [{"role": "user", "content": "abcd"}]
    assert t.render(msgs, max_chars=12) == "abcd" * 3
    with pytest.raises(ChatTemplateError, match="over the limit of 11"):
        t.render(msgs, max_chars=11)


#: templates using loops with loop.*, recursion, macros, caller, namespaces, filters and ``~`` on odd values
LEGIT = [
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '<' ~ m.role ~ '>' ~ m['content']|trim }}"
    "{% if not loop.last %}|{% endif %}{% endfor %}{{ none ~ 1 ~ 2.5 ~ undefined_name ~ true }}",
    "{% macro turn(m) %}[{{ m.role|upper }}] {{ caller() if caller else m.content }}{% endmacro %}"
    "{% for m in messages %}{% call turn(m) %}{{ m.content|replace('a', 'A')|center(30) }}{% endcall %}{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for m in messages|selectattr('role', 'equalto', 'user') %}"
    "{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s + m.content %}{% endfor %}{{ ns.n }} {{ ns.s|length }}"
    "{{ messages|map(attribute='content')|join(', ') }}{{ (messages|list)[0]|tojson }}",
    "{% for item in tree recursive %}{{ item.name }}{% if item.children %}({{ loop(item.children) }}){% endif %}"
    "{% endfor %}{{ '%05d|%s' % (42, 'x') }}{{ '{:>8}'.format('r') }}{{ 'abc' * 3 }}{{ [1, 2] + [3] }}{{ 2 ** 10 }}",
]


@pytest.mark.parametrize("source", LEGIT)
def test_legitimate_templates_render_as_plain_jinja2_does(source: str) -> None:
    messages = [
        {"role": r, "content": f" {r} says {i} and a bit " * 3} for i, r in enumerate(["user", "assistant"] * 20)
    ]
    tree = [{"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": []}]}]}, {"name": "d"}]
    source = "{% set tree = " + json.dumps(tree) + " %}" + source
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    ctx = {"messages": messages, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    want = env.from_string(source).render(**ctx)
    assert ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(messages) == want


def test_chat_command_prints_one_line_for_a_runaway_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A template expanding to 100 MB for a 128-cell context: one line on stderr naming the file and the key."""
    cfg = TinyConfig(n_vocab=64)
    tokens = ["<unk>", "<s>", "</s>"] + [f"x{i}" for i in range(cfg.n_vocab - 3)]

    def vocab(w: GGUFWriter) -> None:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (len(tokens) - 3))
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
        w.add_string("tokenizer.chat_template", HOSTILE["100 MB of output"][0])

    path = write_model(tmp_path / "evil.gguf", cfg, random_weights(cfg, 0), "f32", extra=vocab)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert main(["chat", str(path), "--device", "CPU", "--ctx-size", "128", "-n", "4"]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "evil.gguf" in err and "tokenizer.chat_template" in err and "the output" in err
