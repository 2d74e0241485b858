"""ggml-core's whole op conformance suite on an RPC device (a ggml-core server serving the CPU on loopback),
compared node by node with the local CPU plugin: every op goes through serialization, the server's checks and its
rebuild through the op builders, and must come back with the CPU's values. The remote device supports exactly
what the local CPU supports (it asks the server), and nothing the CPU runs is refused."""

from __future__ import annotations

from ggml_core import Device
from ggml_core.testing._runner import Status, run_case
from ggml_core.testing.cases import all_cases
from ggml_rpc import RPCDevice
from ggml_rpc.server import RPCServer


def test_conformance_suite_over_rpc(rpc_dev: RPCDevice, cpu: Device, server: RPCServer) -> None:
    backend, ref_backend = rpc_dev.init_backend(), cpu.init_backend()
    failures, ok, unsupported_here, unsupported_cpu = [], 0, set(), set()
    cases = all_cases()
    for case in cases:
        result = run_case(case, rpc_dev, backend, reference=cpu, ref_backend=ref_backend)
        if result.status == Status.OK:
            ok += 1
        elif result.status == Status.NOT_SUPPORTED:
            unsupported_here.add(case.name)
        elif result.status != Status.SKIPPED:
            failures.append(f"{case.name}: {result.status.name}: {result.message}")
        if run_case(case, cpu, ref_backend, reference="numpy").status == Status.NOT_SUPPORTED:
            unsupported_cpu.add(case.name)
    assert not failures, "\n".join(failures[:20])
    assert ok >= 0.75 * len(cases)
    assert unsupported_here == unsupported_cpu
    assert server.stats["graphs computed"] >= 0.9 * ok  # (a few cases have only view nodes or empty tensors)
    assert server.stats["refused"] == 0 and server.stats["internal errors"] == 0
