"""The configurations the OpenCL MUL_MAT kernels are tuned over, their shape classes, and the tuning settings.

A configuration is a set of compiler defines of ``k_gemm`` or ``k_mv`` (``kernels/matmul_tuned.cl``); the
candidates of a device start with its default (from its properties, see :mod:`ggml_opencl._device_info`). A
shape class (``gemm/n<=64``, ``mv/Q4_0/n=1``, …) is what a tuning result is kept for; :mod:`ggml_opencl._tuning`
times the candidates and keeps the results in :func:`cache_dir`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Final

from ggml_core import GGMLError, GGMLType
from ggml_opencl._device_info import DeviceInfo

__all__ = [
    "ENV_DIR",
    "ENV_MODE",
    "GEMM_SMALL_N",
    "MV_MAX_COLUMNS",
    "SOURCE_DIGEST",
    "Config",
    "GemmConfig",
    "MvConfig",
    "TuningError",
    "cache_dir",
    "config_from_dict",
    "forced",
    "forced_config",
    "gemm_candidates",
    "gemm_class",
    "mv_candidates",
    "mv_class",
    "tuned_source",
    "tuning_mode",
]

#: environment variable: ``1`` (default) cache + tune, ``0`` no tuning (default shapes), ``force`` re-tune
ENV_MODE: Final = "GGML_OPENCL_TUNE"
#: environment variable: where the tuning results are kept
ENV_DIR: Final = "GGML_OPENCL_TUNING_DIR"
#: N at and below which MUL_MAT uses k_mv; the first gemm shape class ends at GEMM_SMALL_N
MV_MAX_COLUMNS: Final = 16  # beyond ~16 columns packing the weights once beats re-reading them per pass
GEMM_SMALL_N: Final = 64
#: weight rows per work-group of the row-block k_mv candidates
_MV_BLOCK_ROWS: Final = 32


class TuningError(GGMLError, ValueError):
    """A tuning setting (environment variable) is invalid; the message names it and the accepted values."""

    def __init__(self, variable: str, value: str, accepted: str) -> None:
        super().__init__(f"{variable}={value!r} is not valid: use {accepted}")
        self.variable = variable
        self.value = value


# ------------------------------------------------------------------------------------------------ configurations


@dataclass(frozen=True)
class GemmConfig:
    """``k_gemm``: a ``tn`` × ``tm`` tile per work-item (``tm`` floats: one vector, two float16 for 32), K unrolled
    ``ku`` times, work-groups of ``ls``."""

    tm: int
    tn: int
    ku: int
    ls: tuple[int, int]

    def defines(self) -> list[str]:
        """Compiler defines of this configuration."""
        return [f"-DGEMM_TM={self.tm}", f"-DGEMM_VW={min(self.tm, 16)}", f"-DGEMM_TN={self.tn}", f"-DGEMM_KU={self.ku}"]

    def label(self) -> str:
        """Short text for reports."""
        return f"tile {self.tn}x{self.tm} ku{self.ku} wg {self.ls[0]}x{self.ls[1]}"


@dataclass(frozen=True)
class MvConfig:
    """``k_mv``: ``rb`` blocks of ``r`` weight rows (one after the other) per work-group of ``ls`` items, ``nc``
    activation columns per pass, accumulators of ``vw`` lanes (16 or 8)."""

    r: int
    nc: int
    ls: int
    rb: int = 1
    vw: int = 16

    @property
    def rows_per_group(self) -> int:
        """Weight rows one work-group computes."""
        return self.r * self.rb

    def defines(self) -> list[str]:
        """Compiler defines of this configuration (the weight type is added by the tuner)."""
        return [
            f"-DMV_R={self.r}",
            f"-DMV_NC={self.nc}",
            f"-DMV_LS={self.ls}",
            f"-DMV_RB={self.rb}",
            f"-DMV_VW={self.vw}",
        ]

    def label(self) -> str:
        """Short text for reports."""
        extra = (f" x{self.rb} blocks" if self.rb > 1 else "") + (f" vec {self.vw}" if self.vw != 16 else "")
        return f"rows {self.r}{extra} cols {self.nc} wg {self.ls}"


Config = GemmConfig | MvConfig


def _cpu_style(info: DeviceInfo) -> bool:
    """Shapes for compilers that vectorise inside a work-item (one item per group), as ``_device_info`` chose."""
    return tuple(info.gemm_ls) == (1, 1)


def gemm_class(n_cols: int) -> str:
    """The shape class of a GEMM with ``n_cols`` activation rows."""
    return f"gemm/n<={GEMM_SMALL_N}" if n_cols <= GEMM_SMALL_N else f"gemm/n>{GEMM_SMALL_N}"


def mv_class(a_type: GGMLType, n_cols: int) -> str:
    """The shape class of a matrix-vector product with ``a_type`` weights and ``n_cols`` (≤ 16) columns."""
    return f"mv/{a_type.name}/n=1" if n_cols == 1 else f"mv/{a_type.name}/n<={MV_MAX_COLUMNS}"


def gemm_candidates(info: DeviceInfo) -> list[GemmConfig]:
    """The configurations tried for ``k_gemm`` on this device, the default (from its properties) first."""
    default = GemmConfig(info.gemm_tm, info.gemm_tn, 1, (info.gemm_ls[0], info.gemm_ls[1]))
    out = [default]
    if _cpu_style(info):
        width = max(4, min(16, info.vector_width))
        regs = 32 if info.vector_width >= 16 else 16  # AVX-512 has 32 vector registers, AVX2/SSE 16
        for tm, tns in ((2 * width, (6, 8, 12)), (width, (4, 8, 12, 16)), (max(4, width // 2), (8, 16))):
            for tn in tns:
                if tm // min(tm, info.vector_width) * tn <= regs - 4:  # accumulators stay in registers
                    out.append(GemmConfig(tm, tn, 1, (1, 1)))
        out.append(replace(default, ku=4))
    else:
        for tm, tn in ((4, 4), (4, 8), (8, 4), (8, 8)):
            for side in (8, 16):
                if side * side <= info.max_work_group:
                    out.append(GemmConfig(tm, tn, 1, (side, side)))
        out.append(replace(default, ku=4))
    return _unique(out)


def mv_candidates(info: DeviceInfo, n_cols: int) -> list[MvConfig]:
    """The configurations tried for ``k_mv`` with ``n_cols`` columns, the default first."""
    nc = 1 if n_cols == 1 else 4
    out = [MvConfig(1, nc, info.mv_ls)]
    if info.mv_ls == 1:  # one work-item per group: rows per item, or a few items per row with a local reduction
        out += [MvConfig(r, nc, ls) for r, ls in ((2, 1), (4, 1), (8, 1), (2, 4))]
        # row blocks: 32 rows per group one block after another (a CPU device pays for every group it runs), with
        # 16- or 8-lane accumulators (8: half the registers per row, for 16-register AVX2)
        out += [MvConfig(r, nc, 1, _MV_BLOCK_ROWS // r, vw) for r, vw in ((1, 16), (4, 16), (8, 16), (4, 8), (8, 8))]
    else:
        for ls in (32, 64, 128, 256) if n_cols == 1 else (32, 128):
            if ls <= info.max_work_group:
                out += [MvConfig(1, nc, ls), MvConfig(2, nc, ls)]
        if n_cols == 1:  # batch 1: 8-lane accumulators (fewer registers, more groups resident), 4 row blocks
            out += [MvConfig(1, nc, info.mv_ls, 1, 8), MvConfig(1, nc, info.mv_ls, 4)]
    if n_cols > 1:
        out.append(replace(out[0], nc=8))
    return _unique(out)


def _unique(items: Sequence[Config]) -> list[Any]:
    seen: list[Any] = []
    for c in items:
        if c not in seen:
            seen.append(c)
    return seen


def config_from_dict(kind: str, d: Mapping[str, Any]) -> Config:
    """The configuration a cache entry holds (``asdict`` of a :class:`GemmConfig` or :class:`MvConfig`)."""
    if kind == "gemm":
        return GemmConfig(int(d["tm"]), int(d["tn"]), int(d["ku"]), (int(d["ls"][0]), int(d["ls"][1])))
    return MvConfig(int(d["r"]), int(d["nc"]), int(d["ls"]), int(d.get("rb", 1)), int(d.get("vw", 16)))


# ------------------------------------------------------------------------------------------------ settings


def tuning_mode(environ: Mapping[str, str]) -> str:
    """``GGML_OPENCL_TUNE`` as ``auto``, ``off`` or ``force`` (:class:`TuningError` for anything else)."""
    raw = environ.get(ENV_MODE, "1").strip().lower()
    if raw in ("", "1", "on", "auto", "yes"):
        return "auto"
    if raw in ("0", "off", "no"):
        return "off"
    if raw == "force":
        return "force"
    raise TuningError(ENV_MODE, raw, "1 (tune once, cache), 0 (off) or force")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tuning results are kept: ``$GGML_OPENCL_TUNING_DIR`` or ``~/.cache/ggml-core/opencl-tuning``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "ggml-core" / "opencl-tuning"


_FORCED: dict[str, Config] = {}


def forced_config(kind: str) -> Config | None:
    """The configuration :func:`forced` sets for ``kind`` (``gemm``, ``mv``) in this process, or None."""
    return _FORCED.get(kind)


@contextlib.contextmanager
def forced(**configs: Config) -> Iterator[None]:
    """Use these configurations (``gemm=GemmConfig(...)``, ``mv=MvConfig(...)``) instead of tuned ones, in this
    process, while the block runs — CLBlast's ``OverrideParameters``, used by the tests to run every candidate."""
    old = dict(_FORCED)
    _FORCED.update(configs)
    try:
        yield
    finally:
        _FORCED.clear()
        _FORCED.update(old)


# ------------------------------------------------------------------------------------------------ programs


def _source(name: str) -> str:
    return (resources.files("ggml_opencl") / "kernels" / name).read_text(encoding="utf-8")


def tuned_source(kind: str) -> str:
    """The program source of the tuned ``kind`` kernel (``gemm``, ``mv``)."""
    parts = ["common.cl", "quants.cl", "matmul_tuned.cl"] if kind == "mv" else ["common.cl", "matmul_tuned.cl"]
    head = "#define DQ32_INLINE 1\n" if kind == "mv" else ""
    return head + "\n".join(_source(p) for p in parts)


#: digest of the tuned kernels' source: part of every cache key, so an edited kernel is tuned anew
SOURCE_DIGEST: Final = hashlib.sha256((tuned_source("gemm") + tuned_source("mv")).encode()).hexdigest()[:16]
