"""``ggml-core devices``: every registry and device with props, caps, memory and buffer types; ``--check`` runs one."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from ggml_core.backend.interfaces import Device
from ggml_core.backend.registry import get_registry

__all__ = ["add_parser", "check_device", "run"]


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


def check_device(d: Device) -> tuple[bool, str, float]:
    """Run softmax(x·Wᵀ + b) on ``d`` and compare with numpy; (passed, reason, seconds)."""
    import ggml_core as g
    from ggml_core import ops

    start = time.perf_counter()
    try:
        rng = np.random.default_rng(0)
        w = rng.uniform(-1, 1, (16, 32)).astype(np.float32)
        x = rng.uniform(-1, 1, (4, 32)).astype(np.float32)
        bias = rng.uniform(-1, 1, (16,)).astype(np.float32)
        ctx = g.Context("check")
        tw = ctx.new_tensor_2d("f32", 32, 16, "w")
        tx = ctx.new_tensor_2d("f32", 32, 4, "x")
        tb = ctx.new_tensor_1d("f32", 16, "b")
        out = ops.soft_max(ops.add(ops.mul_mat(tw, tx), tb))
        graph = g.build_graph(out)
        unsupported = [n.op_desc for n in graph.nodes if not d.supports_op(n)]
        if unsupported:
            return False, f"does not support {', '.join(unsupported)}", time.perf_counter() - start
        backend = d.init_backend()
        buf = g.alloc_ctx_tensors(ctx, backend)
        try:
            tw.set_data(w)
            tx.set_data(x)
            tb.set_data(bias)
            backend.graph_compute(graph)
            got = out.to_numpy().reshape(4, 16)
        finally:
            buf.free()
            backend.free()
        logits = x @ w.T + bias
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        err = float(np.abs(got - ref).max())
        if not np.isfinite(got).all() or err > 1e-4:
            return False, f"wrong result: max abs error {err:.3g}", time.perf_counter() - start
        return True, f"max abs error {err:.1e}", time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - a check reports failures, it never crashes
        return False, f"{type(exc).__name__}: {exc}", time.perf_counter() - start


def run(args: argparse.Namespace) -> int:
    """Print devices grouped by registry; exit 1 when --check finds a failing device."""
    reg = get_registry()
    devs = reg.devices()
    regs = reg.regs
    checks: dict[str, tuple[bool, str, float]] = {}
    if args.check:
        checks = {d.name: check_device(d) for d in devs}
    if args.json:
        out = {
            "devices": [
                {**_device_dict(d), **({"check": _check_dict(checks[d.name])} if d.name in checks else {})}
                for d in devs
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
        }
        print(json.dumps(out, indent=2))
    else:
        for r in regs:
            mine = [d for d in devs if d.reg is r]
            print(f"{r.name} (plugin {r.plugin}): {len(mine)} device{'s' if len(mine) != 1 else ''}")
            if not mine and r.unavailable_reason:
                print(f"  no devices: {r.unavailable_reason}")
            for d in mine:
                info = _device_dict(d)
                caps = ", ".join(k for k, v in info["caps"].items() if v) or "none"
                print(f"  {d.name}: {info['description']}")
                print(
                    f"    type {info['type']}, memory {_mib(info['memory_total'])} ({_mib(info['memory_free'])} free), "
                    f"caps: {caps}"
                )
                print(f"    buffer types: {', '.join(b['name'] for b in info['buffer_types'])}")
                if d.name in checks:
                    ok, reason, secs = checks[d.name]
                    print(f"    check: {'PASS' if ok else 'FAIL'} ({reason}; {secs * 1000:.0f} ms)")
        failed = [p for p in reg.plugins if p.status == "error"]
        if failed:
            print(f"{len(failed)} plugin(s) failed to load: {', '.join(p.name for p in failed)} (see 'ggml-core plugins')")
    return 1 if any(not ok for ok, _, _ in checks.values()) else 0


def _check_dict(c: tuple[bool, str, float]) -> dict[str, Any]:
    return {"passed": c[0], "reason": c[1], "seconds": round(c[2], 4)}
