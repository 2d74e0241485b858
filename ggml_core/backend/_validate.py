"""The plugin boundary: checks on every value a plugin hands the core, and the records of what failed.

A check returns ``None`` or the problem as one line ("returned -1; expected (free, total): two byte counts with
free <= total"); the registry turns it into a :class:`Problem` naming the plugin, the object and the field, and
leaves out just that object. :func:`probe_device` asks a new device everything the core will later rely on, once,
before the device is accepted. After acceptance the :class:`~ggml_core.backend.interfaces.Device` hooks are
guarded (:func:`guarded_call`): a bad answer at run time is recorded and replaced by a safe one (no memory, not
supported, no host buffer type) or, where there is none (``buffer_type()``), raised as a :class:`PluginError`.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from ggml_core._errors import PluginError
from ggml_core._text import safe_text
from ggml_core.backend.interfaces import (
    API_VERSION,
    DEVICES_MAX,
    Backend,
    BackendReg,
    Buffer,
    BufferType,
    Device,
    DeviceCaps,
    DeviceProps,
    DeviceType,
    Event,
)

__all__ = [
    "BYTES_MAX",
    "DEVICES_MAX",
    "check_buffer_type",
    "check_memory",
    "check_name",
    "check_reg",
    "describe_exc",
    "guarded_call",
    "probe_device",
    "safe_repr",
    "safe_str",
]

#: the largest byte count accepted (ggml's size_t on 64-bit hosts, as a signed value)
BYTES_MAX: Final = 2**63 - 1
#: longest device or registry name (``RPC[host:port]`` names need room)
NAME_MAX: Final = 96
#: largest ``DeviceProps.extra``, as JSON
EXTRA_MAX: Final = 64 * 1024
#: names are used on command lines (``--device CPU,OpenCL0``): no spaces, no commas
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.:\[\]/@+\-]+$")


# ------------------------------------------------------------------------------------------------ printing


def safe_str(value: object, limit: int = 300) -> str:
    """``str(value)`` that never raises (a plugin's exception may have a broken ``__str__``), one line, bounded."""
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - a hostile __str__ may raise anything
        text = f"<unprintable {type(value).__name__}>"
    return safe_text(" ".join(text[: 4 * limit].split()), limit)  # one line, terminal controls escaped


def safe_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` that never raises, bounded."""
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_exc(exc: BaseException) -> str:
    """``TypeName: message`` of an exception, never raising."""
    msg = safe_str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


# ------------------------------------------------------------------------------------------------ scalar checks


def check_name(value: object) -> str | None:
    """A device or registry name: a non-empty string of letters, digits and ``_.:[]/@+-``, at most 96 long."""
    if not isinstance(value, str):
        return f"is {safe_repr(value)} ({type(value).__name__}); expected a non-empty string"
    if not value or len(value) > NAME_MAX or not _NAME_RE.match(value):
        return (
            f"{safe_repr(value)} is not a usable name: expected 1 to {NAME_MAX} letters, digits or _.:[]/@+- "
            "(no spaces or commas: names are used in --device lists)"
        )
    return None


def _check_int(value: object, lo: int, hi: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"is {safe_repr(value)} ({type(value).__name__}); expected an integer"
    if not lo <= int(value) <= hi:
        return f"is {int(value)}; expected {lo} to {hi}"
    return None


def check_memory(value: object) -> tuple[int, int] | str:
    """``memory()``'s answer as (free, total), or the problem with it."""
    expect = f"expected (free, total): two byte counts 0 <= free <= total <= {BYTES_MAX}"
    if not isinstance(value, tuple | list) or len(value) != 2:
        return f"returned {safe_repr(value)}; {expect}"
    for item in value:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral) or not 0 <= int(item) <= BYTES_MAX:
            return f"returned {safe_repr(value)}; {expect}"
    free, total = int(value[0]), int(value[1])
    if free > total:
        return f"returned free {free} > total {total}; {expect}"
    return free, total


def _check_bool(value: object) -> bool:
    return isinstance(value, bool | np.bool_)


def check_buffer_type(buft: object) -> str | None:
    """A buffer type: a :class:`BufferType` with a name, a power-of-two alignment, a positive max_size, is_host."""
    if not isinstance(buft, BufferType):
        return f"is {safe_repr(buft)}, not a ggml_core.BufferType"
    try:
        name, alignment, max_size, is_host = buft.name, buft.alignment, buft.max_size, buft.is_host
    except Exception as exc:  # noqa: BLE001 - a property raising
        return f"its attributes cannot be read: {describe_exc(exc)}"
    if not isinstance(name, str) or not name or len(name) > 2 * NAME_MAX or not name.isprintable():
        return f"name {safe_repr(name)} is not a non-empty printable string"
    problem = _check_int(alignment, 1, 1 << 30)
    if problem is None and int(alignment) & (int(alignment) - 1):
        problem = f"is {alignment}; expected a power of two"
    if problem:
        return f"{name!r}: alignment {problem}"
    problem = _check_int(max_size, 1, BYTES_MAX)
    if problem:
        return f"{name!r}: max_size {problem}"
    if not _check_bool(is_host):
        return f"{name!r}: is_host is {safe_repr(is_host)}; expected True or False"
    return None


def _check_props(props: object, dev_name: str) -> str | None:
    if not isinstance(props, DeviceProps):
        return f"returned {safe_repr(props)}, not a ggml_core.DeviceProps"
    if props.name != dev_name:
        return f"name {safe_repr(props.name)} differs from the device's name {dev_name!r}"
    if not isinstance(props.description, str):
        return f"description is {safe_repr(props.description)}; expected a string"
    mem = check_memory((props.memory_free, props.memory_total))
    if isinstance(mem, str):
        return f"memory_free/memory_total: {mem}"
    if not isinstance(props.type, DeviceType):
        return f"type is {safe_repr(props.type)}; expected a ggml_core.DeviceType"
    if props.device_id is not None and not (isinstance(props.device_id, str) and len(props.device_id) <= 256):
        return f"device_id is {safe_repr(props.device_id)}; expected None or a string"
    if not isinstance(props.caps, DeviceCaps):
        return f"caps is {safe_repr(props.caps)}; expected a ggml_core.DeviceCaps"
    if not isinstance(props.extra, dict):
        return f"extra is {safe_repr(props.extra)}; expected a dict"
    try:
        text = json.dumps(props.extra)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"extra is not JSON data ({describe_exc(exc)})"
    if len(text) > EXTRA_MAX:
        return f"extra is {len(text)} bytes as JSON; at most {EXTRA_MAX}"
    return None


def check_reg(reg: object) -> str | None:
    """A registry: a :class:`BackendReg` with a usable name, this API version and an integer priority."""
    if not isinstance(reg, BackendReg):
        return f"registered {safe_repr(reg)}, which is not a ggml_core.BackendReg"
    try:
        name, version, priority, desc = reg.name, reg.api_version, reg.priority, reg.description
    except Exception as exc:  # noqa: BLE001
        return f"registered a registry whose attributes cannot be read: {describe_exc(exc)}"
    problem = check_name(name)
    if problem:
        return f"registry name {problem}"
    if version != API_VERSION:
        return f"registry {name!r} has api_version {safe_repr(version)}, expected {API_VERSION}"
    problem = _check_int(priority, -(2**31), 2**31 - 1)
    if problem:
        return f"registry {name!r}: priority {problem}"
    if not isinstance(desc, str):
        return f"registry {name!r}: description is {safe_repr(desc)}; expected a string"
    return None


# ------------------------------------------------------------------------------------------------ devices


def probe_device(dev: object) -> tuple[str, str] | None:
    """Ask a new device everything the core relies on; (field, problem) for the first bad answer, else None.

    Runs plugin code (``memory()``, ``props()``, ``buffer_type()``...): call it under the plugin's deadline.
    """
    if not isinstance(dev, Device):
        return "device", f"is {safe_repr(dev)}, not a ggml_core.Device"
    steps: list[tuple[str, Callable[[], str | None]]] = [
        ("name", lambda: check_name(dev.name)),
        (
            "extra_buffer_types",
            lambda: (
                None
                if isinstance(getattr(dev, "extra_buffer_types", None), list)
                else "is missing or not a list (did the device's __init__ call Device.__init__?)"
            ),
        ),
        ("description", lambda: None if isinstance(dev.description, str) else f"is {safe_repr(dev.description)}"),
        ("type", lambda: None if isinstance(dev.type, DeviceType) else _not(dev.type, "a ggml_core.DeviceType")),
        ("caps", lambda: None if isinstance(dev.caps, DeviceCaps) else _not(dev.caps, "a ggml_core.DeviceCaps")),
        ("host_cpu", lambda: None if _check_bool(getattr(dev, "host_cpu", False)) else _not(dev.host_cpu, "a bool")),
        ("device_id", lambda: _check_device_id(dev.device_id)),
        ("memory()", lambda: _as_problem(check_memory(dev.memory()))),
        ("buffer_type()", lambda: check_buffer_type(dev.buffer_type())),
        ("host_buffer_type()", lambda: _check_optional_buft(dev.host_buffer_type())),
        ("props()", lambda: _check_props(dev.props(), dev.name)),
    ]
    for field, step in steps:
        try:
            problem = step()
        except BaseException as exc:  # noqa: BLE001 - runs in the plugin's worker thread; every failure is its own
            problem = f"raised {describe_exc(exc)}"
        if problem:
            return field, problem
    return None


def _not(value: object, expected: str) -> str:
    return f"is {safe_repr(value)} ({type(value).__name__}); expected {expected}"


def _as_problem(result: tuple[int, int] | str) -> str | None:
    return result if isinstance(result, str) else None


def _check_device_id(value: object) -> str | None:
    if value is None or (isinstance(value, str) and len(value) <= 256 and value.isprintable()):
        return None
    return _not(value, "None or a printable string")


def _check_optional_buft(buft: object) -> str | None:
    return None if buft is None else check_buffer_type(buft)


# ------------------------------------------------------------------------------------------------ run-time guard

#: answers that replace a bad one (the hooks not listed have no safe answer: a bad one raises PluginError)
_SAFE: Final[dict[str, Any]] = {
    "supports_op": False,
    "supports_buft": False,
    "offload_op": False,
    "host_buffer_type": None,
    "buffer_from_host_ptr": None,
    "event_new": None,
}
#: the expected type of the answer, for the hooks whose check is an isinstance (None allowed where noted)
_TYPES: Final[dict[str, tuple[type, bool]]] = {
    "buffer_from_host_ptr": (Buffer, True),
    "event_new": (Event, True),
    "init_backend": (Backend, False),
}


def guarded_call(
    report: Callable[[str, str], None],
    dev: Device,
    hook: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call an accepted device's ``hook``; a raise or a bad answer is given to ``report`` (where, problem) and
    replaced (see the module doc). The registry binds ``report`` and installs the rest as the device's guard."""
    from ggml_core.backend._deadline import sigint_count

    problem: str | None
    sigints = sigint_count()
    try:
        value = fn(dev, *args, **kwargs)
    except KeyboardInterrupt as exc:
        if sigints is None or sigint_count() != sigints:
            raise  # a real Ctrl-C (or no way to tell)
        value, problem = None, f"raised {describe_exc(exc)} (no Ctrl-C was pressed)"
    except (SystemExit, PluginError):
        raise
    except Exception as exc:
        if hook == "init_backend":  # its errors (bad params, out of memory) are the caller's to see
            raise
        value, problem = None, f"raised {describe_exc(exc)}"
    else:
        problem = _check_answer(dev, hook, value)
    if problem is None:
        return value
    report(f"{hook}()", problem)
    if hook in _SAFE:
        return _SAFE[hook]
    if hook == "memory":
        return 0, 0
    if hook == "props":
        free, total = dev.memory()
        return DeviceProps(dev.name, str(dev.description), free, total, dev.type, None, DeviceCaps())
    raise PluginError(getattr(dev.reg, "plugin", None) or "?", f"device {dev.name!r}: {hook}(): {problem}")


def _check_answer(dev: Device, hook: str, value: object) -> str | None:
    if hook in ("supports_op", "supports_buft", "offload_op"):
        return None if _check_bool(value) else f"returned {safe_repr(value)}; expected True or False"
    if hook == "memory":
        return _as_problem(check_memory(value))
    if hook == "buffer_type":
        return check_buffer_type(value)
    if hook == "host_buffer_type":
        return _check_optional_buft(value)
    if hook == "props":
        return _check_props(value, dev.name)
    if hook in _TYPES:
        kind, optional = _TYPES[hook]
        if isinstance(value, kind) or (optional and value is None):
            return None
        return f"returned {safe_repr(value)}; expected a ggml_core.{kind.__name__}" + (" or None" if optional else "")
    return None
