"""``ggml-core perplexity``: perplexity over a text file, and the KL divergence of two runs, as llama-perplexity.

The text is tokenized (BOS first when the vocabulary adds it) and cut into chunks of ``-c`` tokens; each chunk runs
from an empty cache with its first token replaced by BOS (when the vocabulary adds one), and is scored on its second
half only: the token at position i+1 under the logits of position i, for i from c/2 to c-2, so that every scored
token has at least c/2 tokens of context. The perplexity is exp of the mean negative log-likelihood; its
uncertainty is the standard error of that mean, times the perplexity.

``--kl-divergence-base FILE`` saves the tokens and the scored positions' log-probabilities in llama.cpp's format
(a file llama-perplexity writes or reads too: ``_logits_``, then n_ctx, n_vocab, n_chunk, the tokens, then per
scored position the log-probabilities on a 16-bit grid spanning the top 16 nats). ``--kl-divergence`` with it
runs the same tokens again (another device, another quantization) and prints per chunk and overall the
perplexities, ln(PPL(Q)/PPL(base)), the mean KL divergence from the base, the RMS of the change in the scored
token's probability and how often both runs give the same most likely token.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ggml_core._errors import GGMLError
from ggml_core.cli._llama_args import check_combination, text_file
from ggml_core.cli._model_args import (
    add_model_args,
    list_devices_if_asked,
    model_params,
    one_line_errors,
    resolve_model_path,
)
from ggml_core.cli.args import output_file

__all__ = [
    "KLStats",
    "LogitsFile",
    "LogitsFileError",
    "add_parser",
    "chunk_nll",
    "quantize_log_probs",
    "run",
    "scored_chunks",
]

MAGIC = b"_logits_"
#: a 16-bit log-probability grid spans this many nats below the most likely token (lower ones read as 0)
SPAN = 16.0
#: rows of a chunk's logits turned into float64 at a time (bounds the temporaries for large vocabularies)
ROWS = 32


class LogitsFileError(GGMLError, ValueError):
    """A ``--kl-divergence-base`` file is not one this model and these flags can be compared with."""


def row_width(n_vocab: int) -> int:
    """uint16 values per saved position: the scale and the lowest log-probability (two float32), then the vocabulary
    rounded up to an even count."""
    return 2 * ((n_vocab + 1) // 2) + 4


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    x = rows.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=1, keepdims=True))
    return x


def chunk_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Negative log-likelihood (float64) of ``targets[i]`` under the logits of row i."""
    out = np.empty(len(targets), dtype=np.float64)
    for s in range(0, len(targets), ROWS):
        lp = _log_softmax(logits[s : s + ROWS])
        out[s : s + ROWS] = -lp[np.arange(len(lp)), targets[s : s + ROWS]]
    return out


def quantize_log_probs(logits: np.ndarray) -> np.ndarray:
    """llama.cpp's saved form of each row's log-probabilities: uint16 ``[n, row_width(n_vocab)]``; the first four
    values hold float32 scale and lowest log-probability, then q such that log p = scale * q + lowest, on a grid
    over the top :data:`SPAN` nats (anything below reads as the lowest)."""
    n, n_vocab = logits.shape
    out = np.zeros((n, row_width(n_vocab)), dtype=np.uint16)
    for s in range(0, n, ROWS):
        x = logits[s : s + ROWS].astype(np.float32)
        hi = x.max(axis=1, keepdims=True)
        lo = np.maximum(x.min(axis=1, keepdims=True), hi - np.float32(SPAN))
        lse = np.log(np.exp((x - hi).astype(np.float64)).sum(axis=1, keepdims=True)).astype(np.float32)
        scale = ((hi - lo) / np.float32(65535)).astype(np.float32)
        head = np.concatenate([scale, (lo - hi - lse).astype(np.float32)], axis=1)
        out[s : s + ROWS, :4] = head.view(np.uint16)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.rint((np.float32(1) / scale) * (x - lo))
        q = np.where((x > lo) & (scale > 0), q, 0)
        out[s : s + ROWS, 4 : 4 + n_vocab] = np.clip(q, 0, 65535).astype(np.uint16)
    return out


def dequantize_log_probs(rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """float32 ``[n, n_vocab]`` log-probabilities from :func:`quantize_log_probs`' rows."""
    head = np.ascontiguousarray(rows[:, :4]).view(np.float32)
    return head[:, :1] * rows[:, 4 : 4 + n_vocab].astype(np.float32) + head[:, 1:2]


@dataclass
class LogitsFile:
    """A saved run: header, tokens and the memory-mapped log-probability rows (llama.cpp's layout)."""

    path: Path
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray
    rows: np.ndarray

    @staticmethod
    def header(n_ctx: int, n_vocab: int, n_chunk: int, tokens: np.ndarray) -> bytes:
        """The bytes before the first row."""
        head = MAGIC + np.array([n_ctx], "<u4").tobytes() + np.array([n_vocab, n_chunk], "<i4").tobytes()
        return head + np.asarray(tokens[: n_chunk * n_ctx], "<i4").tobytes()

    @classmethod
    def open(cls, path: Path, n_vocab: int) -> LogitsFile:
        """Read and check the header; LogitsFileError names what does not match."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read, a directory fail it
                raise LogitsFileError(f"--kl-divergence-base {str(path)!r} is not a regular file")
            with open(path, "rb") as fh:
                head = fh.read(20)
            size = path.stat().st_size
        except OSError as exc:
            raise LogitsFileError(f"cannot read --kl-divergence-base {str(path)!r}: {exc.strerror or exc}") from None
        if len(head) < 20 or head[:8] != MAGIC:
            raise LogitsFileError(
                f"{str(path)!r} is not a saved-logits file (no '_logits_' header): make it with "
                "'ggml-core perplexity -f TEXT --kl-divergence-base FILE' or llama-perplexity's"
            )
        n_ctx = int(np.frombuffer(head, "<u4", 1, 8)[0])
        file_vocab, n_chunk = (int(v) for v in np.frombuffer(head, "<i4", 2, 12))
        if file_vocab != n_vocab:
            raise LogitsFileError(
                f"{str(path)!r} was saved with a vocabulary of {file_vocab} tokens; this model has {n_vocab}: compare "
                "runs of the same model family"
            )
        if n_ctx < 3 or n_chunk < 1:
            raise LogitsFileError(f"{str(path)!r} holds n_ctx {n_ctx} and {n_chunk} chunks: nothing to compare")
        scored = n_ctx - 1 - n_ctx // 2
        expected = 20 + 4 * n_ctx * n_chunk + 2 * n_chunk * scored * row_width(n_vocab)
        if size != expected:
            raise LogitsFileError(
                f"{str(path)!r} has {size} bytes; its header (n_ctx {n_ctx}, n_vocab {n_vocab}, {n_chunk} chunks) "
                f"needs {expected}: the file is truncated or not a saved-logits file"
            )
        tokens = np.fromfile(path, "<i4", n_ctx * n_chunk, offset=20)
        rows = np.memmap(path, "<u2", "r", offset=20 + 4 * n_ctx * n_chunk, shape=(n_chunk, scored, row_width(n_vocab)))
        return cls(path, n_ctx, n_vocab, n_chunk, tokens, rows)


@dataclass
class KLStats:
    """llama.cpp's KL-divergence sums over scored tokens, and each token's KLD and Δp for the percentiles."""

    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld: list[np.ndarray] = field(default_factory=list)
    p_diff: list[np.ndarray] = field(default_factory=list)

    def add(self, logits: np.ndarray, base_rows: np.ndarray, targets: np.ndarray) -> None:
        """One chunk: current logits ``[n, n_vocab]`` against the base's saved rows for the same positions."""
        n_vocab = logits.shape[1]
        for s in range(0, len(targets), ROWS):
            lp = _log_softmax(logits[s : s + ROWS])
            base = dequantize_log_probs(np.asarray(base_rows[s : s + ROWS]), n_vocab).astype(np.float64)
            idx = np.arange(len(lp))
            t = targets[s : s + ROWS]
            nll, nll_base = -lp[idx, t], -base[idx, t]
            p_base = np.where(base > -SPAN, np.exp(base), 0.0)
            kld = (p_base * (base - lp)).sum(axis=1)
            p_diff = np.exp(-nll) - np.exp(-nll_base)
            self.sum_nll += float(nll.sum())
            self.sum_nll2 += float((nll * nll).sum())
            self.sum_nll_base += float(nll_base.sum())
            self.sum_nll_base2 += float((nll_base * nll_base).sum())
            self.sum_nll_nll_base += float((nll * nll_base).sum())
            self.sum_kld += float(kld.sum())
            self.sum_kld2 += float((kld * kld).sum())
            self.sum_p_diff2 += float((p_diff**2).sum())
            self.sum_p_diff4 += float((p_diff**4).sum())
            self.n_same_top += int((lp.argmax(axis=1) == base.argmax(axis=1)).sum())
            self.count += len(t)
            self.kld.append(kld)
            self.p_diff.append(p_diff)

    def mean(self, total: float, total2: float) -> tuple[float, float]:
        """Mean and its standard error (0 below 11 values, as llama.cpp)."""
        if self.count < 1:
            return 0.0, 0.0
        f = total / self.count
        var = total2 / self.count - f * f
        return f, math.sqrt(var / (self.count - 1)) if var > 0 and self.count > 10 else 0.0

    def covariance(self) -> float:
        """Covariance of the two mean log-likelihoods (0 below 10 values, as llama.cpp)."""
        if self.count < 10:
            return 0.0
        c = self.count
        return (self.sum_nll_nll_base / c - (self.sum_nll / c) * (self.sum_nll_base / c)) / (c - 1)

    def summary(self) -> dict[str, float]:
        """The overall figures llama.cpp prints (values as fractions, not percentages)."""
        lp, lp_err = self.mean(self.sum_nll, self.sum_nll2)
        lb, lb_err = self.mean(self.sum_nll_base, self.sum_nll_base2)
        cov = self.covariance()
        ratio_err = math.sqrt(max(lp_err**2 + lb_err**2 - 2 * cov, 0.0))
        ppl, ppl_base = math.exp(lp), math.exp(lb)
        kld, kld_err = self.mean(self.sum_kld, self.sum_kld2)
        mse, mse_err = self.mean(self.sum_p_diff2, self.sum_p_diff4)
        rms = math.sqrt(mse)
        top = self.n_same_top / max(self.count, 1)
        return {
            "ppl": ppl,
            "ppl_err": ppl * lp_err,
            "ppl_base": ppl_base,
            "ppl_base_err": ppl_base * lb_err,
            "cor_ln_ppl": cov / (lp_err * lb_err) if lp_err and lb_err else 0.0,
            "ln_ppl_ratio": lp - lb,
            "ln_ppl_ratio_err": ratio_err,
            "ppl_ratio": math.exp(lp - lb),
            "ppl_ratio_err": math.exp(lp - lb) * ratio_err,
            "ppl_diff": ppl - ppl_base,
            "ppl_diff_err": math.sqrt(
                max((ppl * lp_err) ** 2 + (ppl_base * lb_err) ** 2 - 2 * ppl * ppl_base * cov, 0.0)
            ),
            "kld": kld,
            "kld_err": kld_err,
            "rms_p_diff": rms,
            "rms_p_diff_err": 0.5 / rms * mse_err if rms else 0.0,
            "same_top": top,
            "same_top_err": math.sqrt(top * (1 - top) / (self.count - 1)) if self.count > 1 else 0.0,
        }


def scored_chunks(
    model: Any, tokens: np.ndarray, n_ctx: int, n_chunk: int, bos: int | None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per chunk: the logits of positions n_ctx/2 .. n_ctx-2 and the tokens they predict (llama.cpp's scoring)."""
    first = n_ctx // 2
    for i in range(n_chunk):
        chunk = tokens[i * n_ctx : (i + 1) * n_ctx].astype(np.int64).tolist()
        if bos is not None:
            chunk[0] = bos
        model.reset()
        logits = model.process_prompt(chunk, all_logits=True)
        yield logits[first : n_ctx - 1], tokens[i * n_ctx + first + 1 : (i + 1) * n_ctx].astype(np.int64)


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="perplexity over a text file, KL divergence between runs (as llama-perplexity)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    for action in p._actions:  # llama-perplexity's context: the chunk size, 512 by default
        if action.dest == "ctx_size":
            action.default = 512
            action.help = "tokens per chunk (default 512); each chunk is scored on its second half"
    p.add_argument("--file", "-f", dest="text", type=text_file, help="the UTF-8 text to score")
    p.add_argument("--chunks", type=int, default=-1, metavar="N", help="score at most N chunks (default -1: all)")
    p.add_argument(
        "--kl-divergence-base", "--save-all-logits", dest="logits_file", type=Path, metavar="FILE",
        help="save the tokens and log-probabilities here (llama.cpp's format); with --kl-divergence: read them",
    )  # fmt: skip
    p.add_argument(
        "--kl-divergence", action="store_true", help="run the tokens of --kl-divergence-base FILE and compare"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Score the text (or the saved run's tokens) and print the results."""
    problem = check_combination(args)
    if problem is None and args.kl_divergence and args.logits_file is None:
        problem = "--kl-divergence needs --kl-divergence-base FILE (a run saved with it)"
    if problem is None and not args.kl_divergence and args.text is None and not args.list_devices:
        problem = "no text to score: give --file FILE (-f)"
    if problem is None and args.logits_file is not None and not args.kl_divergence:  # to be written
        try:
            output_file(str(args.logits_file))
        except argparse.ArgumentTypeError as exc:
            problem = f"--kl-divergence-base: {exc}"
    if problem is None and args.ctx_size is not None and args.ctx_size < 3:
        problem = f"--ctx-size {args.ctx_size}: perplexity needs chunks of 3 tokens or more"
    if problem is not None:
        print(f"ggml-core perplexity: error: {problem}", file=sys.stderr)
        return 2
    return one_line_errors("perplexity", _run, args)


def _run(args: argparse.Namespace) -> int:
    from ggml_core.models import Model, open_gguf
    from ggml_core.models.arch import read_hparams
    from ggml_core.models.tokenizer import load_tokenizer

    listed = list_devices_if_asked(args)
    if listed is not None:
        return listed
    path, is_default = resolve_model_path(args)
    f = open_gguf(path)
    hp = read_hparams(f)
    tok = load_tokenizer(f)
    bos = tok.bos_id if tok.add_bos else None
    err = sys.stderr
    base: LogitsFile | None = None
    if args.kl_divergence:
        base = LogitsFile.open(Path(args.logits_file), hp.n_vocab)
        n_ctx, tokens = base.n_ctx, base.tokens
        n_chunk = base.n_chunk if args.chunks < 0 else min(args.chunks, base.n_chunk)
    else:
        n_ctx = args.ctx_size
        print("perplexity: tokenizing the input ..", file=err)
        t0 = time.perf_counter()
        tokens = np.asarray(tok.encode(args.text), dtype=np.int32)
        print(f"perplexity: tokenization took {1e3 * (time.perf_counter() - t0):g} ms", file=err)
        if len(tokens) < 2 * n_ctx:
            raise ValueError(
                f"{len(tokens)} tokens in the text; perplexity with a context of {n_ctx} needs at least {2 * n_ctx} "
                "(a longer file, or a smaller -c)"
            )
        n_chunk = len(tokens) // n_ctx if args.chunks < 0 else min(args.chunks, len(tokens) // n_ctx)
    if n_chunk < 1:
        raise ValueError("--chunks 0: nothing to score")
    if n_ctx > hp.n_ctx_train:
        print(f"warning: {path.name} was trained on only {hp.n_ctx_train} context tokens ({n_ctx} specified)", file=err)
    args.batch_size = min(args.batch_size, n_ctx)
    params = model_params(args, n_ctx, default_model=is_default, n_prompt=n_ctx)
    with Model.load(f, params) as model:
        what = "computing over" if base else "calculating perplexity over"
        print(f"perplexity: {what} {n_chunk} chunks, n_ctx={n_ctx}, batch_size={args.batch_size}, n_seq=1", file=err)
        chunks = scored_chunks(model, tokens, n_ctx, n_chunk, bos)
        timed = _timed(chunks, n_chunk, err)
        if base is not None:
            return _kl_divergence(timed, base, args.json)
        return _perplexity(timed, args, tokens, n_ctx, n_chunk, hp.n_vocab)


def _timed(chunks: Iterator[tuple[np.ndarray, np.ndarray]], n_chunk: int, err: IO[str]) -> Iterator[Any]:
    """The chunks, with llama.cpp's seconds-per-pass and ETA line after the first."""
    t0 = time.perf_counter()
    for i, item in enumerate(chunks):
        if i == 0:
            t = time.perf_counter() - t0
            total = int(t * n_chunk)
            hours = f"{total // 3600} hours " if total >= 3600 else ""
            print(f"perplexity: {t:.2f} seconds per pass - ETA {hours}{total % 3600 / 60:.2f} minutes", file=err)
        yield item


def _perplexity(
    chunks: Iterator[tuple[np.ndarray, np.ndarray]],
    args: argparse.Namespace,
    tokens: np.ndarray,
    n_ctx: int,
    n_chunk: int,
    n_vocab: int,
) -> int:
    out = sys.stdout
    save: IO[bytes] | None = None
    if args.logits_file is not None:
        print(f"perplexity: saving all logits to {args.logits_file}", file=sys.stderr)
        save = open(args.logits_file, "wb")  # noqa: SIM115 (closed below, also on errors)
    try:
        if save is not None:
            save.write(LogitsFile.header(n_ctx, n_vocab, n_chunk, tokens))
        nll = nll2 = 0.0
        count = 0
        per_chunk = []
        for i, (logits, targets) in enumerate(chunks):
            v = chunk_nll(logits, targets)
            if save is not None:
                save.write(quantize_log_probs(logits).tobytes())
            nll, nll2, count = nll + float(v.sum()), nll2 + float((v * v).sum()), count + len(v)
            per_chunk.append(math.exp(nll / count))
            if not args.json:
                out.write(f"[{i + 1}]{per_chunk[-1]:.4f},")
                out.flush()
    finally:
        if save is not None:
            save.close()
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (count - 1)) if var > 0 and count > 1 else None
    if args.json:
        print(json.dumps({"ppl": ppl, "ppl_err": err, "n_ctx": n_ctx, "n_chunk": n_chunk, "n_scored": count,
                          "chunks": per_chunk}))  # fmt: skip
        return 0
    out.write("\n")
    if err is None:
        print(f"Final estimate: PPL = {ppl:.4f} (no uncertainty: too few scored tokens)", file=out)
    else:
        print(f"Final estimate: PPL = {ppl:.4f} +/- {err:.5f}", file=out)
    return 0


def _kl_divergence(chunks: Iterator[tuple[np.ndarray, np.ndarray]], base: LogitsFile, as_json: bool) -> int:
    out = sys.stdout
    stats = KLStats()
    if not as_json:
        print(
            "\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS"
            "            Same top p",
            file=out,
        )
    for i, (logits, targets) in enumerate(chunks):
        stats.add(logits, base.rows[i], targets)
        if not as_json:
            s = stats.summary()
            print(
                f"{i + 1:4d}    {s['ppl']:9.4f} ± {s['ppl_err']:9.4f}    {s['ln_ppl_ratio']:10.5f} ± "
                f"{s['ln_ppl_ratio_err']:10.5f}    {s['kld']:10.5f} ± {s['kld_err']:10.5f}    "
                f"{100 * s['rms_p_diff']:6.3f} ± {100 * s['rms_p_diff_err']:6.3f} %    {100 * s['same_top']:6.3f} ± "
                f"{100 * s['same_top_err']:6.3f} %",
                file=out,
            )
    s = stats.summary()
    kld = np.sort(np.concatenate(stats.kld))
    p_diff = np.sort(np.concatenate(stats.p_diff))
    if as_json:
        s.update(kld_median=float(np.median(kld)), kld_max=float(kld[-1]), p_diff_max=float(np.abs(p_diff).max()))
        print(json.dumps(s))
        return 0
    _print_summary(out, stats, s, kld, p_diff)
    return 0


def _print_summary(out: IO[str], stats: KLStats, s: dict[str, float], kld: np.ndarray, p_diff: np.ndarray) -> None:
    """llama.cpp's three blocks of statistics."""
    pct: Callable[[np.ndarray, float], float] = lambda v, q: float(np.quantile(v, q))  # noqa: E731 (linear, as its)
    lines = [
        "",
        "====== Perplexity statistics ======",
        f"Mean PPL(Q)                   : {s['ppl']:10.6f} ± {s['ppl_err']:10.6f}",
        f"Mean PPL(base)                : {s['ppl_base']:10.6f} ± {s['ppl_base_err']:10.6f}",
        f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * s['cor_ln_ppl']:6.2f}%",
        f"Mean ln(PPL(Q)/PPL(base))     : {s['ln_ppl_ratio']:10.6f} ± {s['ln_ppl_ratio_err']:10.6f}",
        f"Mean PPL(Q)/PPL(base)         : {s['ppl_ratio']:10.6f} ± {s['ppl_ratio_err']:10.6f}",
        f"Mean PPL(Q)-PPL(base)         : {s['ppl_diff']:10.6f} ± {s['ppl_diff_err']:10.6f}",
        "",
        "====== KL divergence statistics ======",
        f"Mean    KLD: {s['kld']:10.6f} ± {s['kld_err']:10.6f}",
        f"Maximum KLD: {kld[-1]:10.6f}",
    ]
    for label, q in (("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9)):
        lines.append(f"{label}   KLD: {pct(kld, q):10.6f}")
    lines.append(f"Median  KLD: {float(np.median(kld)):10.6f}")
    for label, q in (("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)):
        lines.append(f"{label}   KLD: {pct(kld, q):10.6f}")
    lines += [f"Minimum KLD: {kld[0]:10.6f}", "", "====== Token probability statistics ======"]
    mean_dp, dp_err = stats.mean(float(p_diff.sum()), float((p_diff * p_diff).sum()))
    lines.append(f"Mean    Δp: {100 * mean_dp:6.3f} ± {100 * dp_err:5.3f} %")
    lines.append(f"Maximum Δp: {100 * p_diff[-1]:6.3f}%")
    for label, q in (("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9), ("75.0%", 0.75)):
        lines.append(f"{label}   Δp: {100 * pct(p_diff, q):6.3f}%")
    lines.append(f"Median  Δp: {100 * float(np.median(p_diff)):6.3f}%")
    for label, q in (("25.0%", 0.25), ("10.0%", 0.1), (" 5.0%", 0.05), (" 1.0%", 0.01), (" 0.1%", 0.001)):
        lines.append(f"{label}   Δp: {100 * pct(p_diff, q):6.3f}%")
    lines += [
        f"Minimum Δp: {100 * p_diff[0]:6.3f}%",
        f"RMS Δp    : {100 * s['rms_p_diff']:6.3f} ± {100 * s['rms_p_diff_err']:5.3f} %",
        f"Same top p: {100 * s['same_top']:6.3f} ± {100 * s['same_top_err']:5.3f} %",
    ]
    print("\n".join(lines), file=out)
