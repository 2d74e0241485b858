"""``ggml-core devices``: every registry and device with props, caps, memory and buffer types; ``--check`` runs one.

Names, descriptions and messages come from plugins and RPC peers: the text listing prints them through
:func:`~ggml_core._text.safe_text` (control characters escaped, length bounded); ``--json`` escapes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from ggml_core._text import TEXT_LIMIT, safe_text
from ggml_core.backend._records import Problem
from ggml_core.backend._validate import describe_exc
from ggml_core.backend.interfaces import Device
from ggml_core.backend.registry import get_registry

__all__ = ["add_parser", "check_device", "print_problems", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="list devices (with --check: run a small graph on each)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--check", action="store_true", help="run a small graph on each device and report PASS/FAIL")
    p.set_defaults(func=run)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _device_dict(d: Device) -> dict[str, Any]:
    props = d.props()
    return {
        "name": props.name,
        "description": props.description,
        "type": props.type.name,
        "device_id": props.device_id,
        "memory_free": props.memory_free,
        "memory_total": props.memory_total,
        "caps": {
            "async": props.caps.asynchronous,
            "host_buffer": props.caps.host_buffer,
            "buffer_from_host_ptr": props.caps.buffer_from_host_ptr,
            "events": props.caps.events,
        },
        "buffer_types": [
            {"name": b.name, "alignment": b.alignment, "max_size": b.max_size, "is_host": b.is_host}
            for b in d.all_buffer_types()
        ],
        "backend": d.reg.name if d.reg else None,
        **({"extra": props.extra} if props.extra else {}),
    }


def _check_graphs() -> list[tuple[str, Any]]:
    """Check graphs from richest to simplest: (description, builder) with builder(ctx) -> (inputs, out, reference)."""
    import ggml_core as g
    from ggml_core import ops

    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (16, 32)).astype(np.float32)
    x = rng.uniform(-1, 1, (4, 32)).astype(np.float32)
    bias = rng.uniform(-1, 1, (16,)).astype(np.float32)

    def full(ctx: g.Context) -> tuple[list[tuple[g.Tensor, np.ndarray]], g.Tensor, np.ndarray]:
        tw = ctx.new_tensor_2d("f32", 32, 16, "w")
        tx = ctx.new_tensor_2d("f32", 32, 4, "x")
        tb = ctx.new_tensor_1d("f32", 16, "b")
        out = ops.soft_max(ops.add(ops.mul_mat(tw, tx), tb))
        logits = x @ w.T + bias
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return [(tw, w), (tx, x), (tb, bias)], out, e / e.sum(axis=1, keepdims=True)

    def simple(ctx: g.Context) -> tuple[list[tuple[g.Tensor, np.ndarray]], g.Tensor, np.ndarray]:
        ta, tb = ctx.new_tensor_2d("f32", 16, 4, "a"), ctx.new_tensor_1d("f32", 16, "b")
        out = ops.scale(ops.mul(ops.add(ta, tb), tb), 0.5)
        a = w[:4, :16]
        return [(ta, a), (tb, bias)], out, (a + bias) * bias * np.float32(0.5)

    def mul_mat_only(ctx: g.Context) -> tuple[list[tuple[g.Tensor, np.ndarray]], g.Tensor, np.ndarray]:
        tw, tx = ctx.new_tensor_2d("f32", 32, 16, "w"), ctx.new_tensor_2d("f32", 32, 4, "x")
        return [(tw, w), (tx, x)], ops.mul_mat(tw, tx), x @ w.T

    def add_only(ctx: g.Context) -> tuple[list[tuple[g.Tensor, np.ndarray]], g.Tensor, np.ndarray]:
        ta, tb = ctx.new_tensor_2d("f32", 16, 4, "a"), ctx.new_tensor_2d("f32", 16, 4, "b")
        return [(ta, w[:4, :16]), (tb, w[4:8, :16])], ops.add(ta, tb), w[:4, :16] + w[4:8, :16]

    # a device with few ops still gets checked: the single-op graphs need no broadcasting
    return [
        ("mul_mat, add, soft_max", full),
        ("add, mul, scale", simple),
        ("mul_mat", mul_mat_only),
        ("add of same-shape tensors", add_only),
    ]


def check_device(d: Device) -> tuple[bool, str, float]:
    """Run the richest small check graph ``d`` supports and compare with numpy; (passed, reason, seconds)."""
    import ggml_core as g

    start = time.perf_counter()
    try:
        for desc, build in _check_graphs():
            ctx = g.Context("check")
            inputs, out, ref = build(ctx)
            graph = g.build_graph(out)
            if not all(d.supports_op(n) for n in graph.nodes):
                continue
            backend = d.init_backend()
            buf = g.alloc_ctx_tensors(ctx, backend)
            try:
                for t, v in inputs:
                    t.set_data(v)
                backend.graph_compute(graph)
                got = out.to_numpy().reshape(ref.shape)
            finally:
                buf.free()
                backend.free()
            err = float(np.abs(got - ref).max())
            if not np.isfinite(got).all() or err > 1e-4:
                return False, f"wrong result for {desc}: max abs error {err:.3g}", time.perf_counter() - start
            return True, f"{desc}: max abs error {err:.1e}", time.perf_counter() - start
        return (
            False,
            "supports none of the check graphs (all f32: mul_mat+add+soft_max, add+mul+scale, mul_mat, or add)",
            time.perf_counter() - start,
        )
    except Exception as exc:  # noqa: BLE001 - a check reports failures, it never crashes
        return False, f"{type(exc).__name__}: {exc}", time.perf_counter() - start


def _safe_device_dict(d: Device) -> dict[str, Any]:
    """:func:`_device_dict`, or a stub naming what could not be read (the device's answers are recorded)."""
    try:
        return _device_dict(d)
    except Exception as exc:  # noqa: BLE001 - a listing never dies of one device
        return {"name": d.name, "description": "", "error": describe_exc(exc), "backend": d.reg.name if d.reg else None}


def run(args: argparse.Namespace) -> int:
    """Print devices grouped by registry, then every recorded problem; exit 1 when --check finds a failing device."""
    reg = get_registry()
    devs = reg.devices()
    regs = reg.regs
    checks: dict[str, tuple[bool, str, float]] = {}
    if args.check:
        checks = {d.name: check_device(d) for d in devs}
    infos = {d.name: _safe_device_dict(d) for d in devs}
    same = [{"name": h.name, "same_as": k.name, "device_id": h.device_id} for h, k in reg.same_hardware()]
    if args.json:
        out = {
            "devices": [
                {**infos[d.name], **({"check": _check_dict(checks[d.name])} if d.name in checks else {})} for d in devs
            ],
            "backends": [
                {
                    "name": r.name,
                    "plugin": r.plugin,
                    "devices": [d.name for d in devs if d.reg is r],
                    "unavailable_reason": r.unavailable_reason,
                }
                for r in regs
            ],
            "same_hardware": same,
            "problems": [p.as_dict() for p in reg.problems()],
        }
        print(json.dumps(out, indent=2))
    else:
        for r in regs:
            mine = [d for d in devs if d.reg is r]
            n = len(mine)
            print(f"{safe_text(r.name)} (plugin {safe_text(str(r.plugin))}): {n} device{'s' if n != 1 else ''}")
            if not mine and r.unavailable_reason:
                print(f"  no devices: {safe_text(r.unavailable_reason)}")
            for d in mine:
                _print_device(infos[d.name], checks.get(d.name))
        for s in same:
            name, same_as, dev_id = (safe_text(str(s[k])) for k in ("name", "same_as", "device_id"))
            print(
                f"{name}: the same hardware as {same_as} (device_id {dev_id}), listed once; "
                f"--device {name} still selects it"
            )
        failed = [p for p in reg.plugins if p.status in ("error", "hung")]
        if failed:
            names = ", ".join(safe_text(p.name) for p in failed)
            print(f"{len(failed)} plugin(s) failed to load: {names} (see 'ggml-core plugins')")
        print_problems(reg.problems())
    return 1 if any(not ok for ok, _, _ in checks.values()) else 0


def _print_device(info: dict[str, Any], check: tuple[bool, str, float] | None) -> None:
    print(f"  {safe_text(str(info['name']))}: {safe_text(str(info['description']))}")
    if "error" in info:
        print(f"    cannot be shown: {safe_text(str(info['error']))}")
        return
    caps = ", ".join(k for k, v in info["caps"].items() if v) or "none"
    print(
        f"    type {info['type']}, memory {_mib(info['memory_total'])} ({_mib(info['memory_free'])} free), caps: {caps}"
    )
    print(f"    buffer types: {', '.join(safe_text(str(b['name'])) for b in info['buffer_types'])}")
    if check is not None:
        ok, reason, secs = check
        print(f"    check: {'PASS' if ok else 'FAIL'} ({safe_text(reason)}; {secs * 1000:.0f} ms)")


def print_problems(problems: list[Problem]) -> None:
    """One line per recorded plugin problem (``ggml-core devices`` and ``ggml-core plugins`` end with these)."""
    if problems:
        print(f"{len(problems)} plugin problem{'s' if len(problems) != 1 else ''}:")
    for p in problems:
        print(f"  {p.kind}: {safe_text(str(p), 2 * TEXT_LIMIT)}")


def _check_dict(c: tuple[bool, str, float]) -> dict[str, Any]:
    return {"passed": c[0], "reason": c[1], "seconds": round(c[2], 4)}
