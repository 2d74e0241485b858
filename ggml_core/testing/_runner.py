"""Running one case on one device: support check, guarded allocation, inputs, compute, comparison.

The CPU device is judged against the numpy references; every other device against the CPU device (node by node,
as test-backend-ops does) and, when asked, against numpy as well.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ggml_core._context import Context
from ggml_core._graph import Graph, build_graph
from ggml_core._tensor import Tensor
from ggml_core.backend.interfaces import Backend, Device, DeviceType
from ggml_core.ops import VIEW_OPS, GGMLOp
from ggml_core.testing._case import Built, Case, CaseUnavailable, MissingBuilder
from ggml_core.testing._compare import Comparison, compare
from ggml_core.testing._guard import GuardedBuffer
from ggml_core.testing._inputs import fill_bytes, round_to_type, values_of

__all__ = [
    "CaseResult",
    "Prepared",
    "Reference",
    "Status",
    "auto_reference",
    "check_support",
    "generate_inputs",
    "measure",
    "prepare",
    "run_case",
]

#: what a device is compared with: numpy, another device, or both
Reference = Literal["numpy", "auto"] | Device | tuple[Device, Literal["numpy"]]


class Status(enum.Enum):
    """Outcome of one case on one device."""

    OK = "OK"
    FAIL = "FAIL"
    NOT_SUPPORTED = "not supported"  #: the device (or the reference device) does not support a node
    SKIPPED = "skipped"  #: no builder, no input generator or no reference: the case could not be run at all


@dataclass
class CaseResult:
    """The outcome of one case on one device in one mode, with test-backend-ops' report fields."""

    case: Case
    device: str
    mode: str
    status: Status
    message: str = ""
    error: float | None = None
    time_us: float | None = None
    n_runs: int | None = None
    flops: int = 0
    bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def supported(self) -> bool:
        """The device supports every node of the case."""
        return self.status in (Status.OK, Status.FAIL)

    @property
    def passed(self) -> bool:
        """The case ran and passed (or, in support/perf mode, was supported and ran)."""
        return self.status == Status.OK

    @property
    def gflops(self) -> float | None:
        """GFLOP/s in perf mode for cases with a FLOP count."""
        if not self.flops or not self.time_us:
            return None
        return self.flops / (self.time_us * 1e-6) / 1e9

    @property
    def bandwidth_gb_s(self) -> float | None:
        """GB/s (2^30 bytes) in perf mode for cases without a FLOP count."""
        if self.flops or not self.time_us or not self.bytes:
            return None
        return self.bytes / (self.time_us * 1e-6) / 2**30

    def as_row(self) -> dict[str, Any]:
        """One row with test-backend-ops' CSV/JSON field names."""
        return {
            "backend_name": self.device,
            "op_name": self.case.op,
            "op_params": self.case.vars,
            "test_mode": self.mode,
            "supported": self.supported if self.status != Status.SKIPPED else False,
            "passed": self.passed,
            "error_message": self.message,
            "time_us": None if self.time_us is None else round(self.time_us, 3),
            "flops": self.flops or None,
            "gflops": None if self.gflops is None else round(self.gflops, 3),
            "bandwidth_gb_s": None if self.bandwidth_gb_s is None else round(self.bandwidth_gb_s, 3),
            "n_runs": self.n_runs,
        }


# ------------------------------------------------------------------------------------------------ preparing


@dataclass
class Prepared:
    """A case built in its own context, with its graph and the bytes of every leaf."""

    ctx: Context
    built: Built
    graph: Graph
    host: dict[int, np.ndarray]


def prepare(case: Case, *, inputs: bool = True) -> Prepared:
    """Build the case in a new context and generate its inputs (deterministic: the case's seed).

    With ``inputs=False`` only the graph is built (support mode needs no data; :func:`generate_inputs` adds them
    later). Raises :class:`MissingBuilder` or :class:`CaseUnavailable` when the case cannot be built here.
    """
    ctx = Context(case.name)
    built = case.build(ctx)
    built.out.set_output()
    p = Prepared(ctx, built, build_graph(built.out), {})
    if inputs:
        generate_inputs(case, p)
    return p


def generate_inputs(case: Case, p: Prepared) -> None:
    """Fill ``p.host`` with the bytes of every leaf (raises :class:`CaseUnavailable` for an ungeneratable type)."""
    rng = np.random.default_rng(case.seed)
    for t in p.ctx:
        if t.view_src is None and t.op == GGMLOp.NONE:
            p.host[t.id] = fill_bytes(rng, t, p.built.init.get(t))


def _unsupported(device: Device, graph: Graph) -> list[str]:
    return [n.op_desc for n in graph.nodes if not device.supports_op(n)]


def _prepare_or_result(case: Case, device: str, mode: str, inputs: bool = True) -> Prepared | CaseResult:
    try:
        return prepare(case, inputs=inputs)
    except MissingBuilder as exc:
        return CaseResult(case, device, mode, Status.SKIPPED, str(exc))
    except CaseUnavailable as exc:
        return CaseResult(case, device, mode, Status.SKIPPED, str(exc))
    except Exception as exc:  # noqa: BLE001 - a builder that rejects a valid case is a failure, not a crash
        return CaseResult(case, device, mode, Status.FAIL, f"building the graph failed: {type(exc).__name__}: {exc}")


def check_support(case: Case, device: Device) -> CaseResult:
    """``support`` mode: does ``device`` support every node of the case?"""
    p = _prepare_or_result(case, device.name, "support", inputs=False)
    if isinstance(p, CaseResult):
        return p
    missing = _unsupported(device, p.graph)
    if missing:
        return CaseResult(case, device.name, "support", Status.NOT_SUPPORTED, f"unsupported: {', '.join(missing)}")
    return CaseResult(case, device.name, "support", Status.OK)


# ------------------------------------------------------------------------------------------------ running


@dataclass
class _Run:
    outputs: list[np.ndarray]  # values of every compute node, graph order (the case's output last)
    nodes: list[Tensor]


def _compute(p: Prepared, device: Device, backend: Backend) -> _Run | str:
    """Run a prepared case on a device inside guard bytes; the node values, or a failure message."""
    gb = GuardedBuffer.allocate(p.ctx, device.buffer_type(), p.built.out.id ^ 0xA5A5)
    try:
        for t in p.ctx:
            raw = p.host.get(t.id)
            if raw is not None:
                t.set_bytes(raw)
        gb.arm(p.graph)
        backend.graph_compute(p.graph)
        stray = gb.stray_writes()
        if stray is not None:
            return f"write outside the output: {stray}"
        nodes = [n for n in p.graph.nodes if n.op != GGMLOp.NONE and n.op not in VIEW_OPS]
        if p.built.out not in nodes:
            nodes.append(p.built.out)
        else:
            nodes.remove(p.built.out)
            nodes.append(p.built.out)
        return _Run([n.to_numpy() for n in nodes], nodes)
    finally:
        gb.free()


def _numpy_expected(case: Case, p: Prepared) -> np.ndarray:
    if case.reference is None:
        raise CaseUnavailable("this case has no numpy reference")
    vals = [None if t is None else values_of(t, p.host) for t in p.built.operands]
    out = p.built.out
    with np.errstate(all="ignore"):
        expected = np.asarray(case.reference(*vals))
    shape = (out.ne[3], out.ne[2], out.ne[1], out.ne[0])
    if expected.size != out.nelements:
        raise ValueError(f"the reference returned {expected.size} values for an output of {out.nelements}")
    expected = expected.reshape(shape)
    return round_to_type(expected, out.type) if case.round_output else expected


def _judge(case: Case, expected: np.ndarray, actual: np.ndarray, what: str) -> Comparison:
    cmp = compare(expected, actual, case.check)
    if not cmp.passed:
        return Comparison(False, cmp.error, f"{what}: {cmp.message}")
    return cmp


def run_case(
    case: Case,
    device: Device,
    backend: Backend | None = None,
    *,
    reference: Reference = "auto",
    ref_backend: Backend | None = None,
) -> CaseResult:
    """``test`` mode: run ``case`` on ``device`` and judge it.

    :param reference: ``"numpy"``; a reference :class:`Device` (compared node by node); ``(device, "numpy")``
        for both; or ``"auto"``: numpy for CPU devices, else the registry's CPU device
    :param backend: a backend of ``device`` to reuse (one is created otherwise)
    :param ref_backend: a backend of the reference device to reuse
    """
    name = device.name
    ref_dev, use_numpy = _resolve_reference(device, reference)
    p = _prepare_or_result(case, name, "test", inputs=False)
    if isinstance(p, CaseResult):
        return p
    missing = _unsupported(device, p.graph)
    if missing:
        return CaseResult(case, name, "test", Status.NOT_SUPPORTED, f"{name} does not support {', '.join(missing)}")
    if ref_dev is not None and _unsupported(ref_dev, p.graph):
        if not use_numpy and case.reference is not None:
            ref_dev, use_numpy = None, True  # the reference device cannot run it: fall back on numpy
        elif not use_numpy:
            msg = f"reference device {ref_dev.name} does not support {', '.join(_unsupported(ref_dev, p.graph))}"
            return CaseResult(case, name, "test", Status.NOT_SUPPORTED, msg)
        else:
            ref_dev = None
    if use_numpy and case.reference is None and ref_dev is None:
        msg = "this case has no numpy reference and no reference device"
        return CaseResult(case, name, "test", Status.SKIPPED, msg)
    try:
        generate_inputs(case, p)
    except CaseUnavailable as exc:
        return CaseResult(case, name, "test", Status.SKIPPED, str(exc))
    own = backend is None
    be = device.init_backend() if backend is None else backend
    try:
        run = _compute(p, device, be)
    except Exception as exc:  # noqa: BLE001 - a crashing kernel is a failing case
        return CaseResult(case, name, "test", Status.FAIL, f"compute failed: {type(exc).__name__}: {exc}")
    finally:
        if own:
            be.free()
    if isinstance(run, str):
        return CaseResult(case, name, "test", Status.FAIL, run)
    worst = 0.0
    if use_numpy and case.reference is not None:
        try:
            expected = _numpy_expected(case, p)
        except CaseUnavailable as exc:  # e.g. no quantizer for the output type: the reference device may still judge
            if ref_dev is None:
                return CaseResult(case, name, "test", Status.SKIPPED, f"no numpy reference: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reference that cannot run this case is reported, not raised
            return CaseResult(case, name, "test", Status.FAIL, f"numpy reference failed: {type(exc).__name__}: {exc}")
        else:
            cmp = _judge(case, expected, run.outputs[-1], "vs numpy")
            if not cmp.passed:
                return CaseResult(case, name, "test", Status.FAIL, cmp.message, cmp.error)
            worst = max(worst, cmp.error)
    if ref_dev is not None:
        cmp = _against_device(case, run, ref_dev, ref_backend)
        if not cmp.passed:
            return CaseResult(case, name, "test", Status.FAIL, cmp.message, cmp.error)
        worst = max(worst, cmp.error)
    return CaseResult(case, name, "test", Status.OK, "", worst)


def _against_device(case: Case, run: _Run, ref_dev: Device, ref_backend: Backend | None) -> Comparison:
    q = prepare(case)  # same seed: identical inputs
    own = ref_backend is None
    be = ref_dev.init_backend() if ref_backend is None else ref_backend
    try:
        ref = _compute(q, ref_dev, be)
    except Exception as exc:  # noqa: BLE001
        return Comparison(False, float("inf"), f"reference device {ref_dev.name} failed: {type(exc).__name__}: {exc}")
    finally:
        if own:
            be.free()
    if isinstance(ref, str):
        return Comparison(False, float("inf"), f"reference device {ref_dev.name}: {ref}")
    worst = 0.0
    for node, got, want in zip(run.nodes, run.outputs, ref.outputs, strict=False):
        cmp = _judge(case, want, got, f"[{node.op_desc}] vs {ref_dev.name}")
        if not cmp.passed:
            return cmp
        worst = max(worst, cmp.error)
    return Comparison(True, worst)


def auto_reference(device: Device) -> Device | Literal["numpy"]:
    """What ``auto`` means for ``device``: numpy for a CPU device, else the registry's CPU device (numpy if none)."""
    if device.type == DeviceType.CPU:
        return "numpy"
    from ggml_core.backend.registry import get_registry

    cpus = [d for d in get_registry().devices() if d.type == DeviceType.CPU and d is not device]
    return cpus[0] if cpus else "numpy"


def _resolve_reference(device: Device, reference: Reference) -> tuple[Device | None, bool]:
    if reference == "auto":
        reference = auto_reference(device)
    if isinstance(reference, tuple):
        return reference[0], True
    if isinstance(reference, Device):
        return (None, True) if reference is device else (reference, False)
    return None, True


# ------------------------------------------------------------------------------------------------ perf


def measure(case: Case, device: Device, backend: Backend, min_seconds: float = 0.25) -> CaseResult:
    """``perf`` mode: µs per graph compute, repeated until at least ``min_seconds`` have passed."""
    from ggml_core.alloc import alloc_ctx_tensors

    p = _prepare_or_result(case, device.name, "perf")
    if isinstance(p, CaseResult):
        return p
    missing = _unsupported(device, p.graph)
    if missing:
        return CaseResult(case, device.name, "perf", Status.NOT_SUPPORTED, f"unsupported: {', '.join(missing)}")
    out = p.built.out
    size = out.nbytes + sum(s.nbytes for s in out.src if s is not None)
    buf = alloc_ctx_tensors(p.ctx, device.buffer_type())
    try:
        for t in p.ctx:
            raw = p.host.get(t.id)
            if raw is not None:
                t.set_bytes(raw)
        start = time.perf_counter()
        backend.graph_compute(p.graph)  # warm-up (binds kernels, compiles programs)
        first = time.perf_counter() - start
        n_runs = max(1, min(100_000, int(min_seconds / max(first, 1e-7))))
        start = time.perf_counter()
        for _ in range(n_runs):
            backend.graph_compute(p.graph)
        backend.synchronize()
        total = time.perf_counter() - start
        while total < min_seconds and n_runs < 1_000_000:  # the warm-up overestimated one run
            extra = n_runs
            t0 = time.perf_counter()
            for _ in range(extra):
                backend.graph_compute(p.graph)
            backend.synchronize()
            total += time.perf_counter() - t0
            n_runs += extra
    except Exception as exc:  # noqa: BLE001
        return CaseResult(case, device.name, "perf", Status.FAIL, f"compute failed: {type(exc).__name__}: {exc}")
    finally:
        buf.free()
    return CaseResult(
        case, device.name, "perf", Status.OK, time_us=total / n_runs * 1e6, n_runs=n_runs, flops=case.flops, bytes=size
    )
