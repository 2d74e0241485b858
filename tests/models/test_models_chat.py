"""Chat templates rendered with jinja2 (llama.cpp's --jinja) and ``ggml-core chat``: expected prompts written by
hand from the templates' definitions, end-of-turn tokens, errors naming the file and key, and the chat loop on a
tiny model (stdin lines in, one streamed reply per line out)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from gguf import GGUFWriter
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core import GGUFError
from ggml_core.cli import main
from ggml_core.models import open_gguf
from ggml_core.models.chat import ChatTemplate, end_of_turn_ids
from ggml_core.models.tokenizer import load_tokenizer

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Gemma's shape: BOS first, user/model turns, an error for roles it does not know
GEMMA = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('roles must be user or assistant') }}{% endif %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
TOKENS = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>", "\u2581"] + [chr(c) for c in range(97, 123)]


def test_chatml_and_gemma_templates_render_as_written() -> None:
    msgs = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "?"},
    ]
    want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\n?<|im_end|>\n"
    assert ChatTemplate(CHATML).render(msgs) == want + "<|im_start|>assistant\n"
    assert ChatTemplate(CHATML).render(msgs, add_generation_prompt=False) == want
    got = ChatTemplate(GEMMA, bos_token="<bos>").render([{"role": "user", "content": " Hi "}])
    assert got == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_template_errors_name_the_template() -> None:
    with pytest.raises(GGUFError, match="roles must be user or assistant"):
        ChatTemplate(GEMMA).render([{"role": "system", "content": "x"}])
    with pytest.raises(GGUFError, match="does not parse"):
        ChatTemplate("{% for %}").render([])
    with pytest.raises(GGUFError, match="access to attribute"):  # the sandbox
        ChatTemplate("{{ messages.__class__.__mro__ }}").render([])


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = TinyConfig(n_vocab=64)
    tokens = TOKENS + [f"x{i}" for i in range(cfg.n_vocab - len(TOKENS))]

    def vocab(w: GGUFWriter) -> None:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", [2, 3, 3, 3, 3] + [1] * (len(tokens) - 5))
        w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
        w.add_uint32("tokenizer.ggml.bos_token_id", 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
        w.add_string("tokenizer.chat_template", GEMMA)

    path = tmp_path_factory.mktemp("chat") / "chat.gguf"
    return write_model(path, cfg, random_weights(cfg, 0), "f32", extra=vocab)


def test_end_of_turn_tokens_and_the_template_from_the_file(chat_model: Path) -> None:
    f = open_gguf(chat_model)
    tok = load_tokenizer(f)
    assert end_of_turn_ids(tok) == [2, 4]  # </s> (EOS) and <end_of_turn>
    t = ChatTemplate.from_gguf(f, tok)
    assert t.bos_token == "<s>" and t.render([{"role": "user", "content": "ab"}]).startswith("<s><start_of_turn>user")
    ids = tok.encode(t.render([{"role": "user", "content": "ab"}]), add_bos=False, parse_special=True)
    assert ids[:2] == [1, 3] and 4 in ids  # the control tokens are parsed, not spelled out


@pytest.mark.parametrize("with_call", [True, False])
def test_harmony_end_token_ends_no_turn_when_return_and_call_exist(tmp_path: Path, with_call: bool) -> None:
    """gpt-oss (o200k_harmony): llama.cpp drops <|end|> from the end-of-generation ids when <|return|> and <|call|>
    are both control tokens; otherwise <|end|> ends a turn (phi3)."""
    cfg = TinyConfig(n_vocab=64)
    special = ["<unk>", "<s>", "</s>", "<|end|>", "<|return|>"] + (["<|call|>"] if with_call else [])
    tokens = special + [f"x{i}" for i in range(cfg.n_vocab - len(special))]

    def vocab(w: GGUFWriter) -> None:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", [2] + [3] * (len(special) - 1) + [1] * (len(tokens) - len(special)))
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)

    path = write_model(tmp_path / "harmony.gguf", cfg, random_weights(cfg, 0), "f32", extra=vocab)
    assert end_of_turn_ids(load_tokenizer(open_gguf(path))) == ([2, 4, 5] if with_call else [2, 3, 4])


def test_chat_command_answers_each_line(
    chat_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nagain\n"))
    argv = ["chat", str(chat_model), "--device", "CPU", "--temp", "0", "-n", "5", "--ctx-size", "256"]
    assert main(argv) == 0
    replies = capsys.readouterr().out.splitlines()
    assert len(replies) == 2  # one streamed reply per user line, then end of input ends the chat


def test_run_chat_is_the_chat_command(
    chat_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ggml-core run MODEL --chat`` streams the same greedy replies as ``ggml-core chat MODEL``."""
    flags = ["--device", "CPU", "--temp", "0", "-n", "5", "--ctx-size", "256"]
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nagain\n"))
    assert main(["chat", str(chat_model), *flags]) == 0
    want = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nagain\n"))
    assert main(["run", str(chat_model), "--chat", *flags]) == 0
    got = capsys.readouterr().out
    assert got == want and len(got.splitlines()) == 2 and got.strip()


@pytest.mark.parametrize("flag", [["--tokens", "1,2"], ["--json"]])
def test_run_chat_refuses_one_shot_flags(chat_model: Path, capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    assert main(["run", str(chat_model), "--chat", "--device", "CPU", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert flag[0] in err and "--chat" in err and "\n" not in err


def test_gpt_oss_harmony_template_renders() -> None:
    """gpt-oss's own template (the copy in llama.cpp's sources, read from the sdist the llama.cpp harness caches)
    parses and renders in the sandbox: system text as the developer message, each turn closed by <|end|>, the
    generation prompt an open assistant turn."""
    import tarfile

    from ggml_core.testing import llama_cpp

    sdist = llama_cpp.cache_dir() / llama_cpp.SDIST_FILE
    if not sdist.is_file():
        pytest.skip(f"{sdist} is not cached (the llama.cpp harness downloads it)")
    member = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/openai-gpt-oss-120b.jinja"
    with tarfile.open(sdist) as tar:
        f = tar.extractfile(member)
        assert f is not None
        source = f.read().decode()
    t = ChatTemplate(source, "<|startoftext|>", "<|return|>", "openai-gpt-oss-120b.jinja")
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    text = t.render(turns)
    assert text.startswith("<|start|>system<|message|>") and "<|start|>developer<|message|># Instructions" in text
    assert "Be brief." in text and "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>" in text
    assert text.endswith("<|start|>user<|message|>2+2?<|end|><|start|>assistant")
