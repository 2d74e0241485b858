"""What one conformance case is: an op with its types, shapes and parameters, how to build its graph, its numpy
reference and how its result is judged.

A case never holds tensors: :attr:`Case.build` creates them in a fresh :class:`~ggml_core.Context` every run, so
one case list serves every device, every process (``-j``) and every mode.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ggml_core import ops
from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType

__all__ = [
    "DEFAULT_NMSE",
    "Built",
    "Case",
    "CaseUnavailable",
    "Check",
    "CheckKind",
    "Init",
    "MissingBuilder",
    "builder",
    "format_params",
]

#: test-backend-ops' default NMSE threshold
DEFAULT_NMSE: Final = 1e-7

#: fills one leaf tensor: ``init(rng, tensor) -> values`` with the tensor's numpy shape ``(ne3, ne2, ne1, ne0)``
#: (floats for float and quantized types, integers for integer types), or raw ``uint8`` bytes of ``tensor.nbytes``
Init = Callable[[np.random.Generator, Tensor], np.ndarray]

#: a numpy reference: the values of the case's operands (None for absent ones) → the expected output values
Reference = Callable[..., np.ndarray]


class MissingBuilder(LookupError):
    """The op builder a case needs does not exist in :mod:`ggml_core.ops` (yet)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no builder ggml_core.ops.{name}")
        self.name = name


class CaseUnavailable(LookupError):
    """A case cannot be run here for a reason other than the device (e.g. no way to generate an input type)."""


def builder(name: str) -> Callable[..., Any]:
    """The op builder ``ggml_core.ops.<name>``, or :class:`MissingBuilder` when it does not exist."""
    fn = getattr(ops, name, None)
    if fn is None or not callable(fn):
        raise MissingBuilder(name)
    return fn


class CheckKind(enum.Enum):
    """How a result is compared with its reference."""

    NMSE = "nmse"  #: normalised mean squared error against a threshold (NaN fails, infinities must match)
    EXACT = "exact"  #: every value identical
    SET = "set"  #: each row holds the same set of values in any order (TOP_K)


@dataclass(frozen=True)
class Check:
    """The comparison of one case: a kind and, for NMSE, the largest error that passes."""

    kind: CheckKind = CheckKind.NMSE
    threshold: float = DEFAULT_NMSE

    @staticmethod
    def nmse(threshold: float = DEFAULT_NMSE) -> Check:
        """NMSE at most ``threshold``."""
        return Check(CheckKind.NMSE, threshold)

    @staticmethod
    def exact() -> Check:
        """Bit-identical values."""
        return Check(CheckKind.EXACT, 0.0)

    @staticmethod
    def row_sets() -> Check:
        """Same set per row."""
        return Check(CheckKind.SET, 0.0)

    def describe(self) -> str:
        """``nmse<=1e-07``, ``exact`` or ``set``."""
        if self.kind == CheckKind.NMSE:
            return f"nmse<={self.threshold:.1e}"
        return self.kind.value


@dataclass
class Built:
    """What :attr:`Case.build` returns: the output, the operands the reference sees and special input fillers.

    ``operands`` are leafs or views of leafs (their values are known on the host before compute); the runner
    hands their values, in this order, to the case's reference. Leafs without an entry in ``init`` are filled
    uniformly in [-1, 1] (integer leafs with small integers).
    """

    out: Tensor
    operands: Sequence[Tensor | None]
    init: dict[Tensor, Init] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Case:
    """One conformance case.

    :param op: the op's name as ``ggml_op_desc`` gives it (the sub-op for UNARY and GLU: ``"GELU"``, ``"SWIGLU"``)
    :param params: the variables shown in the case's name, test-backend-ops style (``type=f32,ne=[4,3,2,1]``)
    :param build: creates the case's tensors in a context and returns them (raises :class:`MissingBuilder`)
    :param reference: numpy reference from the operands' values; its result is rounded to the output's type
        unless ``round_output`` is False (the reference then rounds what it writes itself)
    :param check: how the result is judged
    :param flops: floating-point operations of one run (MUL_MAT family), 0 to report bandwidth instead
    :param perf_only: a large case run only in perf mode
    """

    op: str
    params: Mapping[str, Any]
    build: Callable[[Context], Built]
    reference: Reference | None
    check: Check = Check()
    flops: int = 0
    round_output: bool = True
    perf_only: bool = False

    @property
    def vars(self) -> str:
        """The parameters as test-backend-ops prints them: ``type=f32,ne=[10,5,4,3]``."""
        return format_params(self.params)

    @property
    def name(self) -> str:
        """``OP(vars)``: unique within the case list; what ``-p REGEX`` matches."""
        return f"{self.op}({self.vars})"

    @property
    def seed(self) -> int:
        """A seed derived from the name, so that every device and every process sees the same inputs."""
        return zlib.crc32(self.name.encode("utf-8"))

    def __repr__(self) -> str:
        return f"Case({self.name})"


def _fmt(v: Any) -> str:
    if isinstance(v, GGMLType):
        return v.traits.name
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if v is None:
        return "none"
    return str(v)


def format_params(params: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> str:
    """``k=v`` pairs joined by commas, lists as ``[a,b]``, types by their ggml name, booleans as 0/1."""
    items = params.items() if isinstance(params, Mapping) else params
    return ",".join(f"{k}={_fmt(v)}" for k, v in items)
