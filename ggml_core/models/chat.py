"""Chat: the GGUF's ``tokenizer.chat_template`` rendered with jinja2, as llama.cpp's ``--jinja`` does, and the
model's end-of-turn tokens.

The template gets what Hugging Face templates expect: ``messages`` (dicts with ``role`` and ``content``),
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception(msg)`` and ``strftime_now(fmt)``; it runs
in jinja2's immutable sandbox with ``trim_blocks`` and ``lstrip_blocks`` (the transformers settings). A template that
raises, or does not parse, gives a :class:`~ggml_core.GGUFError` naming the file and the key.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ggml_core._errors import GGUFError
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.tokenizer import TOKEN_TYPE, Tokenizer

__all__ = ["END_OF_TURN_TEXTS", "ChatTemplate", "end_of_turn_ids"]

KEY: Final = "tokenizer.chat_template"
#: token texts llama.cpp treats as end of generation besides the EOS id (its ``special_eog_ids``)
END_OF_TURN_TEXTS: Final = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|return|>",
                            "<|eom_id|>", "<|call|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>")  # fmt: skip


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


@dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template and the strings it is given."""

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

    def _template(self) -> Any:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            return env.from_string(self.source)
        except TemplateError as exc:
            raise GGUFError(*self._where(), f"does not parse: {exc}") from None

    def _where(self) -> tuple[str, str]:
        path, _, field = self.origin.partition(": ")
        return path, field or "chat template"

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``."""
        from jinja2 import TemplateError

        template = self._template()
        try:
            return str(
                template.render(
                    messages=list(messages),
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                )
            )
        except (TemplateError, ValueError, TypeError) as exc:
            raise GGUFError(*self._where(), f"failed to render: {exc}") from None
