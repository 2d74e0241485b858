"""``ggml-core perplexity`` (llama-perplexity) against numpy's definition over the model's own logits, against
llama.cpp's logits for the same chunks, and its saved-logits file and KL divergence against numpy read of that file.

The model is the embedded default model (a SentencePiece vocabulary, BOS added); a second one of the same shape and
vocabulary from another seed is the "other run" for the KL divergence.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ggml_core.cli import main
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.default_model import DefaultModelSpec, write_default_model
from ggml_core.testing import llama_cpp

N_CTX = 64
TEXT = " ".join(f"the {w} device runs a tensor graph of {n} layers, and the model answers." for n, w in
                enumerate(["ggml", "core", "backend", "plugin", "token", "world"] * 4))  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ppl")
    (d / "text.txt").write_text(TEXT + "\n", encoding="utf-8")
    return {
        "model": write_default_model(d / "default.gguf"),
        "other": write_default_model(d / "other.gguf", DefaultModelSpec(seed=7)),
        "text": d / "text.txt",
        "dir": d,
    }


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _chunk_log_probs(model_path: Path, tokens: list[int], n_ctx: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per chunk: log-probabilities of positions n_ctx/2 .. n_ctx-2 and the next tokens, from Model's logits of the
    chunk with its first token replaced by BOS."""
    out = []
    params = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=n_ctx, kv_type="f32", progress=False)
    with Model.load(model_path, params) as m:
        bos = m.tokenizer.bos_id
        for i in range(len(tokens) // n_ctx):
            chunk = tokens[i * n_ctx : (i + 1) * n_ctx]
            m.reset()
            logits = m.process_prompt([bos, *chunk[1:]], all_logits=True)
            first = n_ctx // 2
            out.append((_log_softmax(logits[first : n_ctx - 1]), np.array(chunk[first + 1 :])))
    return out


def _ppl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["perplexity", "--device", "CPU", "-ctk", "f32", "-ctv", "f32", *argv])  # both f32, as the reference
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _tokens(model_path: Path) -> list[int]:
    with Model.load(model_path, ModelParams(placement=PlacementRequest(devices=["CPU"]), progress=False)) as m:
        ids: list[int] = m.tokenizer.encode(TEXT)
    assert ids[0] == 1 and len(ids) >= 4 * N_CTX  # BOS first, as llama.cpp's common_tokenize(add_special)
    return ids


def test_perplexity_is_numpys_over_the_second_halves(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    tokens = _tokens(files["model"])
    chunks = _chunk_log_probs(files["model"], tokens, N_CTX)
    nll = [-lp[np.arange(len(t)), t] for lp, t in chunks]
    want = [float(np.exp(np.concatenate(nll[: i + 1]).mean())) for i in range(len(nll))]
    rc, out, _ = _ppl(capsys, str(files["model"]), "-f", str(files["text"]), "-c", str(N_CTX), "--json")
    assert rc == 0
    got = json.loads(out)
    assert got["n_chunk"] == len(tokens) // N_CTX and got["n_scored"] == len(chunks) * (N_CTX - 1 - N_CTX // 2)
    assert got["chunks"] == pytest.approx(want, rel=1e-6)
    all_nll = np.concatenate(nll)
    assert got["ppl_err"] == pytest.approx(want[-1] * all_nll.std() / np.sqrt(all_nll.size - 1), rel=1e-6)
    # the text output: llama.cpp's running values, then the final estimate
    rc, out, err = _ppl(capsys, str(files["model"]), "-f", str(files["text"]), "-c", str(N_CTX), "--chunks", "2")
    assert rc == 0 and "calculating perplexity over 2 chunks, n_ctx=64" in err
    running, final = out.strip().split("\n")
    assert running == f"[1]{want[0]:.4f},[2]{want[1]:.4f},"
    two = np.concatenate(nll[:2])
    assert final == f"Final estimate: PPL = {want[1]:.4f} +/- {want[1] * two.std() / np.sqrt(two.size - 1):.5f}"


def test_perplexity_matches_llama_cpps_logits(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    try:
        llama_cpp.harness()
    except llama_cpp.Unavailable as exc:
        pytest.skip(f"llama.cpp cannot be built here: {exc}")
    ref = llama_cpp.LlamaCpp(files["model"], threads=1)
    tokens = ref.tokenize(TEXT, add_special=True)
    assert tokens == _tokens(files["model"])
    nll = []
    for i in range(2):
        chunk = [1, *tokens[i * N_CTX + 1 : (i + 1) * N_CTX]]
        lp = _log_softmax(ref.logits(chunk, n_ctx=N_CTX))[N_CTX // 2 : N_CTX - 1]
        nll.append(-lp[np.arange(len(lp)), chunk[N_CTX // 2 + 1 :]])
    want = float(np.exp(np.concatenate(nll).mean()))
    rc, out, _ = _ppl(
        capsys, str(files["model"]), "-f", str(files["text"]), "-c", str(N_CTX), "--chunks", "2", "--json"
    )
    assert rc == 0
    assert json.loads(out)["ppl"] == pytest.approx(want, rel=1e-4)  # f32 logits within 1e-4 of llama.cpp's


def _saved(files: dict[str, Path], capsys: pytest.CaptureFixture) -> Path:
    base = files["dir"] / "base.bin"
    if not base.exists():
        args = ["-f", str(files["text"]), "-c", str(N_CTX), "--kl-divergence-base", str(base)]
        assert _ppl(capsys, str(files["model"]), *args)[0] == 0
    return base


def test_saved_file_has_llama_cpps_layout(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    """'_logits_', n_ctx (u32), n_vocab, n_chunk (i32), the tokens, then per scored position two float32 (scale,
    lowest log-probability) and uint16 log-probabilities on that grid, the row padded to an even count."""
    raw = _saved(files, capsys).read_bytes()
    tokens = _tokens(files["model"])
    chunks = _chunk_log_probs(files["model"], tokens, N_CTX)
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw[8:20], "<i4")
    assert (n_ctx, n_chunk) == (N_CTX, len(tokens) // N_CTX) and n_vocab == chunks[0][0].shape[1]
    assert np.frombuffer(raw, "<i4", n_ctx * n_chunk, 20).tolist() == tokens[: n_ctx * n_chunk]
    width = 2 * ((n_vocab + 1) // 2) + 4
    rows = np.frombuffer(raw, "<u2", offset=20 + 4 * n_ctx * n_chunk).reshape(n_chunk, -1, width)
    assert rows.shape[1] == N_CTX - 1 - N_CTX // 2
    for (lp, _), saved in zip(chunks, rows, strict=True):
        scale, lowest = np.ascontiguousarray(saved[:, :4]).view("<f4").T
        assert scale == pytest.approx((lp.max(1) - np.maximum(lp.min(1), lp.max(1) - 16)) / 65535, rel=1e-5)
        back = scale[:, None] * saved[:, 4 : 4 + n_vocab] + lowest[:, None]
        inside = lp > lowest[:, None] + scale[:, None]  # above the grid's floor: within half a step
        assert np.abs(back - lp)[inside].max() <= 0.5 * scale.max() + 1e-5


def test_kl_divergence_of_a_run_with_itself_is_zero(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    base = _saved(files, capsys)
    rc, out, _ = _ppl(capsys, str(files["model"]), "--kl-divergence-base", str(base), "--kl-divergence", "--json")
    assert rc == 0
    s = json.loads(out)
    assert abs(s["kld"]) < 2e-5  # the 16-bit grid's rounding only (a step of 16/65535 nats)
    assert s["same_top"] == 1.0 and s["rms_p_diff"] < 1e-4
    rc, plain, _ = _ppl(capsys, str(files["model"]), "-f", str(files["text"]), "-c", str(N_CTX), "--json")
    assert s["ppl"] == pytest.approx(json.loads(plain)["ppl"], rel=1e-9)


def test_kl_divergence_from_another_model_is_numpys(files: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    base = _saved(files, capsys)
    tokens = _tokens(files["model"])
    p = _chunk_log_probs(files["model"], tokens, N_CTX)
    q = _chunk_log_probs(files["other"], tokens, N_CTX)
    lp_base, lp = np.concatenate([x for x, _ in p]), np.concatenate([x for x, _ in q])
    targets = np.concatenate([t for _, t in p])
    kld = (np.exp(lp_base) * (lp_base - lp)).sum(1)
    same = float((lp_base.argmax(1) == lp.argmax(1)).mean())
    rc, out, _ = _ppl(capsys, str(files["other"]), "--kl-divergence-base", str(base), "--kl-divergence", "--json")
    assert rc == 0
    s = json.loads(out)
    assert kld.mean() > 0.1 and s["kld"] == pytest.approx(kld.mean(), rel=1e-3, abs=1e-4)
    assert s["same_top"] == pytest.approx(same, abs=1.5 / len(kld))
    assert s["ppl"] == pytest.approx(np.exp(-lp[np.arange(len(lp)), targets].mean()), rel=1e-9)
    # the text output carries llama.cpp's summary lines
    rc, out, _ = _ppl(capsys, str(files["other"]), "--kl-divergence-base", str(base), "--kl-divergence")
    assert rc == 0
    assert f"Mean    KLD: {s['kld']:10.6f} ± {s['kld_err']:10.6f}" in out
    assert f"Same top p: {100 * s['same_top']:6.3f} ± " in out and "Mean PPL(Q)-PPL(base)         :" in out


@pytest.mark.parametrize(
    "argv, culprit",
    [
        (["-c", str(N_CTX), "--chunks", "1", "-f", "SHORT"], "needs at least 128"),
        (["--kl-divergence"], "--kl-divergence needs --kl-divergence-base"),
        (["--kl-divergence", "--kl-divergence-base", "NOTLOGITS"], "no '_logits_' header"),
        (["--kl-divergence", "--kl-divergence-base", "TRUNCATED"], "truncated"),
        (["-c", "2", "-f", "TEXT"], "chunks of 3 tokens or more"),
        ([], "give --file FILE"),
        (["--kl-divergence", "--kl-divergence-base", "DIR"], "is not a regular file"),
        (["-f", "TEXT", "--kl-divergence-base", "DIR"], "is a directory"),
    ],
)
def test_bad_input_is_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture, argv: list[str], culprit: str
) -> None:
    d = files["dir"]
    (d / "short.txt").write_text("hello world", encoding="utf-8")
    (d / "not.bin").write_bytes(b"x" * 64)
    (d / "trunc.bin").write_bytes(_saved(files, capsys).read_bytes()[:-2])
    names = {
        "SHORT": d / "short.txt",
        "NOTLOGITS": d / "not.bin",
        "TRUNCATED": d / "trunc.bin",
        "TEXT": files["text"],
        "DIR": d,
    }
    rc, _, err = _ppl(capsys, str(files["model"]), *[str(names.get(a, a)) for a in argv])
    assert rc == 2
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("ggml-core perplexity: error: ") and culprit in errors[0]
    assert "Traceback" not in err
