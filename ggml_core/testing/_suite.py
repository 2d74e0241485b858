"""``conformance_suite``: the one line that gives a plugin's tests one parametrized test per conformance case.

.. code-block:: python

    # plugins/ggml-opencl/tests/test_conformance.py
    from ggml_core.testing import conformance_suite

    test_conformance = conformance_suite("OpenCL0")

Each case becomes ``test_conformance[OP(params)]``: it passes, fails with the comparison's message, or skips
with the reason (device absent, op unsupported by the device, builder or input generator missing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ggml_core.testing._runner import Reference, Status, run_case
from ggml_core.testing.cases import select

__all__ = ["conformance_suite", "resolve_reference"]

#: pytest option that names the device when a suite does not (``pytest --ggml-device OpenCL0``)
DEVICE_OPTION = "ggml_device"
REFERENCE_OPTION = "ggml_reference"


def resolve_reference(device: Any, choice: str) -> Reference:
    """The reference for ``device`` from a ``--ggml-reference`` choice: auto, numpy, cpu or both."""
    if choice == "numpy":
        return "numpy"
    if choice in ("cpu", "both"):
        from ggml_core.backend.interfaces import DeviceType
        from ggml_core.backend.registry import get_registry

        cpus = [d for d in get_registry().devices() if d.type == DeviceType.CPU and d is not device]
        if not cpus:
            return "numpy"
        return (cpus[0], "numpy") if choice == "both" else cpus[0]
    return "auto"


def conformance_suite(
    device: str | None = None,
    *,
    ops: str | Iterable[str] | None = None,
    pattern: str | None = None,
    reference: str = "auto",
) -> Callable[..., None]:
    """A pytest test function parametrized over the conformance cases, run on ``device``.

    :param device: the device name (``"OpenCL0"``); None takes ``--ggml-device`` or, without it, ``"CPU"``
    :param ops: only these ops (``"MUL_MAT,ADD"``)
    :param pattern: only cases whose full name matches this regular expression
    :param reference: ``auto`` (numpy for CPU devices, the CPU device for others), ``numpy``, ``cpu`` or ``both``
        (``--ggml-reference`` overrides it)
    """
    import pytest

    cases = {c.name: c for c in select(ops=ops, pattern=pattern)}
    state: dict[str, Any] = {}

    @pytest.mark.parametrize("ggml_case", list(cases))
    def test_conformance(ggml_case: str, request: Any) -> None:
        name = device or request.config.getoption(DEVICE_OPTION, None) or "CPU"
        choice = request.config.getoption(REFERENCE_OPTION, None) or reference
        key = f"{name}|{choice}"
        if key not in state:
            state[key] = _open(name, choice)
        dev, backend, ref, ref_backend, why = state[key]
        if dev is None:
            pytest.skip(why)
        result = run_case(cases[ggml_case], dev, backend, reference=ref, ref_backend=ref_backend)
        if result.status == Status.OK:
            return
        if result.status in (Status.NOT_SUPPORTED, Status.SKIPPED):
            pytest.skip(f"{result.status.value}: {result.message}")
        pytest.fail(f"{ggml_case} [{name}]: {result.message}", pytrace=False)

    test_conformance.__doc__ = f"Conformance of device {device or '(--ggml-device, default CPU)'} with ggml's ops."
    test_conformance.ggml_conformance = True  # --ggml-op/--ggml-pattern narrow it (see the pytest plugin)
    return test_conformance


def _open(name: str, choice: str) -> tuple[Any, Any, Reference, Any, str]:
    """(device, backend, reference, reference backend, why-not) for a device name; device None with the reason
    when it is absent."""
    from ggml_core._errors import DeviceNotFoundError
    from ggml_core.backend.registry import get_registry

    try:
        dev = get_registry().get_device(name)
    except DeviceNotFoundError as exc:
        return None, None, "numpy", None, f"device {name} is not available here: {exc}"
    try:
        backend = dev.init_backend()
    except Exception as exc:  # noqa: BLE001 - a device that cannot start a stream is reported as absent
        return None, None, "numpy", None, f"device {name} could not start a backend: {type(exc).__name__}: {exc}"
    ref = resolve_reference(dev, choice)
    if ref == "auto":
        from ggml_core.testing._runner import auto_reference

        ref = auto_reference(dev)
    ref_dev = ref[0] if isinstance(ref, tuple) else ref
    ref_backend = ref_dev.init_backend() if not isinstance(ref_dev, str) else None
    return dev, backend, ref, ref_backend, ""
