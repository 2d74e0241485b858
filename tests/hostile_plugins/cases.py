"""The hostile plugins: one throw-away package per failure class, as module source plus what the host must show.

Every module starts with :data:`PREAMBLE` (a well-behaved device ``Hostile0`` in a registry ``Hostile``, which each
case breaks in one way) and ends with the case's own code. :func:`install` writes a case as a real installed
distribution into a target directory: the package and a ``*.dist-info`` with ``METADATA`` and
``entry_points.txt`` — exactly what ``importlib.metadata`` reads for a pip-installed package.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CASES", "PREAMBLE", "Case", "install"]

PREAMBLE = """
import itertools, time
from ggml_core import (API_VERSION, Backend, BackendReg, Buffer, BufferType, Device, DeviceCaps, DeviceProps,
                       DeviceType, hookimpl)


class Buf(Buffer):
    def __init__(self, buft, size):
        super().__init__(buft, size)
        self.mem = bytearray(size)

    def _write(self, offset, data):
        self.mem[offset:offset + len(data)] = data

    def _read(self, offset, out):
        out[:] = self.mem[offset:offset + len(out)]


class Buft(BufferType):
    def _alloc(self, size):
        return Buf(self, size)


class Dev(Device):
    type = DeviceType.GPU

    def __init__(self, name="Hostile0", device_id=None):
        super().__init__(name, "a hostile test device", device_id=device_id)
        self._buft = Buft(f"{name}_buf", self)

    def memory(self):
        return 1 << 34, 1 << 34  # 16 GiB: past --fit's default 1 GiB margin, so runs reach the hostile hooks

    def buffer_type(self):
        return self._buft

    def init_backend(self, params=None):
        return Backend(self)

    def supports_op(self, op):
        return False


def make_reg(*devices, name="Hostile", priority=0):
    return BackendReg(name, list(devices) or [Dev()], priority=priority)


@hookimpl
def ggml_api_version():
    return API_VERSION
"""

REGISTER = """
@hookimpl
def ggml_register_backends(register):
    register(make_reg())
"""


@dataclass(frozen=True)
class Case:
    """One hostile plugin and what the host must show for it."""

    #: short id; the entry point is ``aaa_<id>`` (sorting before every first-party plugin)
    id: str
    #: module code after the preamble
    code: str
    #: text that must appear in the recorded problem naming the plugin ("" when nothing is wrong)
    expect: str = ""
    #: device names that must be listed / must not be
    listed: tuple[str, ...] = ()
    absent: tuple[str, ...] = ("Hostile0",)
    #: extra environment (the hang cases shorten the deadline)
    env: dict[str, str] = field(default_factory=dict)
    #: also run test-ops on every device (the case's device is accepted and misbehaves later)
    test_ops: bool = False
    #: run on the case's device: the one-line error it must give (exit code 2)
    run_error: str = ""
    #: a second distribution in the same site: (distribution, entry point, code)
    other: tuple[str, str, str] | None = None
    #: the distribution name (default ``hostile-<id>``)
    dist: str = ""

    @property
    def plugin(self) -> str:
        """The entry-point name."""
        return f"aaa_{self.id}"


def _dev_case(id: str, body: str, expect: str, **kw: object) -> Case:
    """A case whose device class is broken by ``body`` (methods/attributes of a Dev subclass)."""
    methods = textwrap.indent(textwrap.dedent(body), "    ")
    code = f"class Bad(Dev):\n{methods}\n\n" + REGISTER.replace("make_reg()", "make_reg(Bad())")
    return Case(id, code, expect, **kw)  # type: ignore[arg-type]


HANG = {"GGML_PLUGIN_TIMEOUT": "4"}  # long enough for the first-party imports on a busy machine
REG_R = "@hookimpl\ndef ggml_register_backends(register):\n    register(R('Hostile'))"
ACCEPTED = {"absent": (), "listed": ("Hostile0",)}

CASES: tuple[Case, ...] = (
    # ---- import
    Case("import_error", 'raise ImportError("libhostile.so.1: cannot open shared object file")', "libhostile.so.1"),
    Case("import_hang", "time.sleep(3600)", "did not finish within 4 s", env=HANG),
    Case("import_busy_loop", "while True:\n    pass", "did not finish within 4 s", env=HANG),
    Case("import_keyboard_interrupt", "raise KeyboardInterrupt", "KeyboardInterrupt"),
    Case("import_system_exit", "raise SystemExit(3)", "SystemExit: 3"),
    Case(
        "import_unprintable_exception",
        "class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise Weird()",
        "unprintable Weird",
    ),
    Case("import_prints_to_stdout", 'print("{ not json")\n' + REGISTER, "", **ACCEPTED),
    # ---- hooks
    Case(
        "api_version_string",
        "@hookimpl\ndef ggml_api_version():\n    return '1'\n" + REGISTER,
        "plugin API version '1'",
    ),
    Case("no_register_backends_hook", "", "does not implement the required hook ggml_register_backends"),
    Case(
        "register_backends_raises",
        '@hookimpl\ndef ggml_register_backends(register):\n    raise RuntimeError("boom")',
        "RuntimeError: boom",
    ),
    Case(
        "register_backends_hangs",
        "@hookimpl\ndef ggml_register_backends(register):\n    time.sleep(3600)",
        "did not finish within 4 s",
        env=HANG,
    ),
    Case(
        "register_backends_keyboard_interrupt",
        "@hookimpl\ndef ggml_register_backends(register):\n    raise KeyboardInterrupt",
        "KeyboardInterrupt",
    ),
    Case(
        "register_none",
        "@hookimpl\ndef ggml_register_backends(register):\n    register(None)",
        "registered None, which is not a ggml_core.BackendReg",
    ),
    Case(
        "score_string", "@hookimpl\ndef ggml_score():\n    return 'high'\n" + REGISTER, "ggml_score() returned 'high'"
    ),
    Case(
        "score_raises", "@hookimpl\ndef ggml_score():\n    raise OSError('no lspci')\n" + REGISTER, "OSError: no lspci"
    ),
    # ---- registries
    Case(
        "priority_string",
        '@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(priority="high"))',
        "priority is 'high'",
    ),
    Case(
        "registry_name_none",
        "@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(name=None))",
        "registry name is None",
    ),
    Case(
        "registry_named_cpu",
        '@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(name="CPU"))',
        "reserved for the first-party distribution ggml-cpu",
    ),
    Case(
        "registry_wrong_api",
        "@hookimpl\ndef ggml_register_backends(register):\n    r = make_reg()\n    r.api_version = 99\n    register(r)",
        "api_version 99",
    ),
    Case(
        "enumerate_raises",
        "class R(BackendReg):\n    def enumerate_devices(self):\n        raise OSError('bus error')\n" + REG_R,
        "OSError: bus error",
    ),
    Case(
        "enumerate_hangs",
        "class R(BackendReg):\n    def enumerate_devices(self):\n        time.sleep(3600)\n"
        "@hookimpl\ndef ggml_register_backends(register):\n    register(R('Hostile'))",
        "did not finish within 4 s",
        env=HANG,
    ),
    Case(
        "enumerate_keyboard_interrupt",
        "class R(BackendReg):\n    def enumerate_devices(self):\n        raise KeyboardInterrupt\n" + REG_R,
        "KeyboardInterrupt",
    ),
    Case(
        "enumerate_returns_none",
        "class R(BackendReg):\n    def enumerate_devices(self):\n        return None\n"
        "@hookimpl\ndef ggml_register_backends(register):\n    register(R('Hostile'))",
        "TypeError",
    ),
    Case(
        "enumerate_endless",
        "class R(BackendReg):\n    def enumerate_devices(self):\n"
        "        return (Dev(f'Endless{i}') for i in itertools.count())\n"
        "@hookimpl\ndef ggml_register_backends(register):\n    register(R('Hostile'))",
        "more than 256 devices",
        absent=("Endless256",),
        listed=("Endless0",),
    ),
    Case(
        "unavailable_reason_object",
        "class R(BackendReg):\n    def enumerate_devices(self):\n"
        "        self.unavailable_reason = object()\n        return []\n" + REG_R,
        "unavailable_reason: is <object object",
    ),
    Case(
        "enumerate_not_devices",
        "class R(BackendReg):\n    def enumerate_devices(self):\n        return ['a string']\n" + REG_R,
        "not a ggml_core.Device",
    ),
    # ---- other plugins' registries
    Case(
        "adds_to_cpu_registry",
        REGISTER + "@hookimpl\ndef ggml_register_devices(reg, register):\n"
        "    if reg.name == 'CPU':\n        register(Dev('CPUExtra0'))",
        "",
        listed=("CPUExtra0", "Hostile0"),
        absent=(),
    ),
    Case(
        "adds_none_to_every_registry",
        REGISTER + "@hookimpl\ndef ggml_register_devices(reg, register):\n    register(None)",
        "is None, not a ggml_core.Device",
        listed=("Hostile0",),
        absent=(),
    ),
    Case(
        "duplicate_cpu_device",
        "@hookimpl\ndef ggml_register_backends(register):\n"
        "    d = Dev('CPU')\n    d.type = DeviceType.CPU\n    register(make_reg(d))",
        "'CPU': name: is reserved for the first-party distribution ggml-cpu",
    ),
    Case(
        "reserved_cuda_name",
        "@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(Dev('CUDA0')))",
        "reserved for the first-party distribution ggml-cuda",
        absent=("CUDA0",),
    ),
    Case(
        "same_name_two_plugins",
        "@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(Dev('Twin0'), name='TwinA'))",
        "'Twin0': name: is already used by a device of plugin 'zzz_twin'",
        dist="hostile-z",
        listed=("Twin0",),
        absent=(),
        other=(
            "hostile-a",
            "zzz_twin",
            "@hookimpl\ndef ggml_register_backends(register):\n    register(make_reg(Dev('Twin0'), name='TwinB'))",
        ),
    ),
    # ---- devices
    _dev_case("name_none", "def __init__(self):\n    super().__init__()\n    self.name = None", "name: is None"),
    _dev_case(
        "name_with_space",
        "def __init__(self):\n    super().__init__()\n    self.name = 'Bad Name'",
        "is not a usable name",
    ),
    _dev_case(
        "name_property_raises",
        "@property\ndef name(self):\n    raise RuntimeError('no name')\n@name.setter\ndef name(self, v):\n    pass",
        "RuntimeError: no name",
    ),
    _dev_case("no_super_init", "def __init__(self):\n    pass", "AttributeError"),
    _dev_case("type_string", "type = 'GPU'", "type: is 'GPU'"),
    _dev_case("caps_garbage", "caps = 'all of them'", "caps: is 'all of them'"),
    _dev_case(
        "device_id_int", "def __init__(self):\n    super().__init__()\n    self.device_id = 42", "device_id: is 42"
    ),
    _dev_case(
        "memory_raises",
        "def memory(self):\n    raise RuntimeError('driver gone')",
        "memory(): raised RuntimeError: driver gone",
    ),
    _dev_case("memory_negative", "def memory(self):\n    return -1, 10", "memory(): returned (-1, 10)"),
    _dev_case("memory_none", "def memory(self):\n    return None", "memory(): returned None"),
    _dev_case("memory_strings", "def memory(self):\n    return '1', '2'", "memory(): returned ('1', '2')"),
    _dev_case("memory_huge", "def memory(self):\n    return 10**30, 10**30", "memory(): returned"),
    _dev_case("memory_free_over_total", "def memory(self):\n    return 10, 5", "free 10 > total 5"),
    _dev_case(
        "buffer_type_raises",
        "def buffer_type(self):\n    raise RuntimeError('no heap')",
        "buffer_type(): raised RuntimeError: no heap",
    ),
    _dev_case("buffer_type_none", "def buffer_type(self):\n    return None", "buffer_type(): is None"),
    _dev_case(
        "buffer_type_bad_alignment",
        "def buffer_type(self):\n    self._buft.alignment = 3\n    return self._buft",
        "alignment is 3; expected a power of two",
    ),
    _dev_case(
        "host_buffer_type_garbage",
        "def host_buffer_type(self):\n    return 'pinned'",
        "host_buffer_type(): is 'pinned'",
    ),
    _dev_case("props_garbage", "def props(self):\n    return 'props'", "props(): returned 'props'"),
    _dev_case(
        "props_extra_not_json",
        "def props(self):\n    p = super().props()\n"
        "    return DeviceProps(p.name, p.description, 1, 1, p.type, None, p.caps, {'x': object()})",
        "extra is not JSON data",
    ),
    # ---- accepted devices that misbehave later
    _dev_case(
        "supports_op_raises",
        "def supports_op(self, op):\n    raise ValueError('which op?')",
        "supports_op(): raised ValueError: which op?",
        test_ops=True,
        **ACCEPTED,
    ),
    _dev_case(
        "supports_op_not_bool",
        "def supports_op(self, op):\n    return 'no'",
        "supports_op(): returned 'no'",
        test_ops=True,
        **ACCEPTED,
    ),
    _dev_case(
        "alloc_none",
        "def supports_op(self, op):\n    return True\n"
        "def buffer_type(self):\n    self._buft._alloc = lambda size: None\n    return self._buft",
        "",
        test_ops=True,
        run_error="_alloc returned NoneType",
        **ACCEPTED,
    ),
    _dev_case(
        "alloc_too_small",
        "def supports_op(self, op):\n    return True\n"
        "def buffer_type(self):\n    self._buft._alloc = lambda size: Buf(self._buft, 0)\n    return self._buft",
        "",
        test_ops=True,
        run_error="_alloc returned a 0-byte buffer",
        **ACCEPTED,
    ),
    _dev_case(
        "alloc_memory_error",
        "def supports_op(self, op):\n    return True\n"
        "def buffer_type(self):\n    def alloc(size):\n        raise MemoryError('out of device memory')\n"
        "    self._buft._alloc = alloc\n    return self._buft",
        "",
        test_ops=True,
        run_error="_alloc raised MemoryError: out of device memory",
        **ACCEPTED,
    ),
    _dev_case(
        "init_backend_none",
        "def supports_op(self, op):\n    return True\ndef init_backend(self, params=None):\n    return None",
        "",
        run_error="init_backend(): returned None; expected a ggml_core.Backend",
        **ACCEPTED,
    ),
    _dev_case(
        "compute_raises_type_error",
        "def supports_op(self, op):\n    return True\n"
        "def init_backend(self, params=None):\n    b = Backend(self)\n"
        "    def compute(graph):\n        raise TypeError('unsupported operand')\n"
        "    b.graph_compute_async = compute\n    return b",
        "",
        run_error="TypeError: unsupported operand",
        **ACCEPTED,
    ),
    # ---- buffer types for other devices
    Case(
        "buffer_type_hook_none",
        REGISTER + "@hookimpl\ndef ggml_register_buffer_types(device, register):\n    register(None)",
        "registered a buffer type that is None",
        **ACCEPTED,
    ),
    Case(
        "buffer_type_hook_raises",
        REGISTER + "@hookimpl\ndef ggml_register_buffer_types(device, register):\n"
        "    raise RuntimeError('no pinned memory')",
        "RuntimeError: no pinned memory",
        **ACCEPTED,
    ),
)


def install(case: Case, target: Path) -> None:
    """Write the case (and its ``other`` distribution) as installed distributions into ``target``."""
    _write_dist(target, case.dist or f"hostile-{case.id}", case.plugin, PREAMBLE + "\n" + case.code)
    if case.other:
        dist, ep, code = case.other
        _write_dist(target, dist, ep, PREAMBLE + "\n" + code)


def _write_dist(target: Path, dist: str, ep: str, code: str) -> None:
    module = f"ggml_{ep}"
    pkg = target / module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(code)
    info = target / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ggml.backends]\n{ep} = {module}\n")
    (info / "top_level.txt").write_text(module + "\n")
