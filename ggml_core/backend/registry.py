"""Plugin discovery and device selection: entry points → isolated loading → registries → ordered devices.

One plugin can never break the host: every entry point is imported, validated and called in its own ``try``;
failures are recorded on the plugin's :class:`PluginInfo` (shown by ``ggml-core plugins``) unless
``GGML_STRICT_PLUGINS=1`` asks for exceptions. ``GGML_BACKENDS=cuda,cpu`` restricts and orders what loads.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.metadata as importlib_metadata
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from ggml_core._errors import DeviceNotFoundError, PluginError
from ggml_core.backend import hookspecs
from ggml_core.backend.interfaces import API_VERSION, Backend, BackendReg, BufferType, Device, DeviceType

__all__ = ["PluginInfo", "Registry", "get_registry", "reset_registry"]

#: device order when GGML_BACKENDS does not give one: accelerators first, the CPU last (as ggml)
_TYPE_RANK = {DeviceType.GPU: 0, DeviceType.IGPU: 1, DeviceType.ACCEL: 2, DeviceType.CPU: 3}


@dataclass
class PluginInfo:
    """What the registry knows about one plugin: where it came from, what it provides, what went wrong."""

    #: entry-point name (or the name given to :meth:`Registry.register_plugin`)
    name: str
    #: entry-point value, e.g. ``"ggml_cpu"``
    value: str = ""
    #: distribution name and version, when installed as a package
    distribution: str | None = None
    version: str | None = None
    #: ``loaded``, ``error``, ``disabled`` (not in GGML_BACKENDS) or ``skipped`` (score 0)
    status: str = "pending"
    #: one-line cause of the failure or skip
    error: str | None = None
    #: full traceback of the failure, for ``ggml-core plugins --verbose``
    traceback: str | None = None
    #: hooks this plugin implements
    hooks: list[str] = field(default_factory=list)
    #: registries it registered
    regs: list[BackendReg] = field(default_factory=list)
    #: non-fatal problems (a device that failed to enumerate, a duplicate device name...)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "name": self.name,
            "entry_point": self.value,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "error": self.error,
            "hooks": sorted(self.hooks),
            "backends": [r.name for r in self.regs],
            "warnings": list(self.warnings),
        }


class Registry:
    """Loads backend plugins and answers "which devices are there" in priority order.

    :param entry_points: a callable returning the entry points to load (default: the installed
        ``ggml.backends`` group); tests pass fakes
    :param environ: the environment to read ``GGML_BACKENDS`` / ``GGML_STRICT_PLUGINS`` from
    """

    def __init__(
        self,
        entry_points: Callable[[], Iterable[Any]] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._entry_points = entry_points or _installed_entry_points
        env = os.environ if environ is None else environ
        self.strict = env.get("GGML_STRICT_PLUGINS", "") not in ("", "0", "false", "no")
        wanted = env.get("GGML_BACKENDS", "").strip()
        #: the GGML_BACKENDS selection, lower-case, in order; None when unset
        self.selection: list[str] | None = [w.strip().lower() for w in wanted.split(",") if w.strip()] or None
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._plugins: dict[str, PluginInfo] = {}
        self._regs: list[BackendReg] = []
        self._devices: list[Device] | None = None
        self._loaded = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------------- loading

    def load(self) -> Registry:
        """Discover and load every entry-point plugin once (later calls do nothing); returns self."""
        with self._lock:
            if self._loaded:
                return self
            self._loaded = True
            try:
                eps = sorted(self._entry_points(), key=lambda ep: ep.name)
            except Exception as exc:  # noqa: BLE001 - a broken metadata install must not stop the host either
                self._fail(PluginInfo("<entry points>"), f"cannot list entry points: {exc!r}", exc)
                eps = []
            for ep in eps:
                self._load_entry_point(ep)
            return self

    def _load_entry_point(self, ep: Any) -> None:
        info = PluginInfo(ep.name, getattr(ep, "value", ""))
        dist = getattr(ep, "dist", None)
        if dist is not None:
            info.distribution = getattr(dist, "name", None) or dist.metadata["Name"]
            info.version = getattr(dist, "version", None)
        if info.name in self._plugins:
            info.name = f"{info.name}:{info.value}"
        self._plugins[info.name] = info
        if not self._selected(info.name, info.distribution):
            info.status, info.error = "disabled", "not listed in GGML_BACKENDS"
            return
        try:
            module = ep.load()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._fail(info, f"import failed: {type(exc).__name__}: {exc}", exc)
            return
        self._register(info, module)

    def register_plugin(self, plugin: object, name: str, *, distribution: str | None = None) -> PluginInfo:
        """Register an in-process plugin object or module (tests, embedding, notebooks); returns its info."""
        with self._lock:
            self.load()
            info = PluginInfo(name, repr(plugin), distribution)
            self._plugins[name] = info
            self._register(info, plugin)
            self._devices = None
            if info.status == "loaded":
                for reg in info.regs:
                    self._call_device_hooks(reg)
            return info

    def _register(self, info: PluginInfo, module: object) -> None:
        try:
            self.pm.register(module, name=info.name)
        except Exception as exc:  # noqa: BLE001 - pluggy validation errors and anything else a plugin triggers
            self._fail(info, f"invalid hook implementation: {exc}", exc)
            return
        info.hooks = [h.name for h in self.pm.get_hookcallers(module) or []]
        ok, version = self._call_one(info, "ggml_api_version", {})
        if not ok:
            self._drop(info, module)
            return
        if "ggml_api_version" not in info.hooks or version is None:
            self._fail(info, "does not implement the required hook ggml_api_version()", None)
            self._drop(info, module)
            return
        if version != API_VERSION:
            self._fail(
                info,
                f"written for plugin API version {version}, this ggml-core speaks version {API_VERSION}; "
                "install a matching version of the plugin",
                None,
            )
            self._drop(info, module)
            return
        if "ggml_score" in info.hooks:
            ok, score = self._call_one(info, "ggml_score", {})
            if not ok:
                self._drop(info, module)
                return
            if score == 0:
                info.status, info.error = "skipped", "score 0: the plugin says it cannot run on this machine"
                self._drop(info, module)
                return
        if "ggml_register_backends" not in info.hooks:
            self._fail(info, "does not implement the required hook ggml_register_backends(register)", None)
            self._drop(info, module)
            return
        new_regs: list[BackendReg] = []
        ok, _ = self._call_one(info, "ggml_register_backends", {"register": new_regs.append})
        if not ok:
            self._drop(info, module)
            return
        for reg in new_regs:
            problem = self._check_reg(reg)
            if problem:
                self._fail(info, problem, None)
                self._drop(info, module)
                return
        for reg in new_regs:
            wanted = self._selected(reg.name, None) or self._selected(info.name, None)
            if self.selection is not None and not wanted:
                continue
            reg.plugin = info.name
            info.regs.append(reg)
            self._regs.append(reg)
        info.status = "loaded"

    def _check_reg(self, reg: object) -> str | None:
        if not isinstance(reg, BackendReg):
            return f"registered {reg!r}, which is not a ggml_core.BackendReg"
        if reg.api_version != API_VERSION:
            return f"backend {reg.name!r} has api_version {reg.api_version}, expected {API_VERSION}"
        taken = {r.name.lower(): r for r in self._regs}
        if reg.name.lower() in taken:
            return f"backend name {reg.name!r} is already registered by plugin {taken[reg.name.lower()].plugin!r}"
        return None

    def _drop(self, info: PluginInfo, module: object) -> None:
        with contextlib.suppress(Exception):  # best effort; the plugin is already marked failed
            self.pm.unregister(module)

    def _call_one(self, info: PluginInfo, hook: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """Call one plugin's implementation of ``hook`` in isolation; (False, None) and a record on failure."""
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():
            if impl.plugin_name != info.name:
                continue
            try:
                return True, impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._fail(info, f"hook {hook} raised {type(exc).__name__}: {exc}", exc)
                return False, None
        return True, None

    def _call_all(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Call every loaded plugin's implementation of ``hook``, each isolated; failures become warnings."""
        caller = getattr(self.pm.hook, hook)
        for impl in caller.get_hookimpls():
            info = self._plugins.get(impl.plugin_name)
            try:
                impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                msg = f"hook {hook} raised {type(exc).__name__}: {exc}"
                if self.strict:
                    raise PluginError(impl.plugin_name, msg) from exc
                if info is not None:
                    info.warnings.append(msg)

    def _fail(self, info: PluginInfo, message: str, exc: BaseException | None) -> None:
        info.status, info.error = "error", message
        if exc is not None:
            info.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if self.strict:
            raise PluginError(info.name, message) from exc

    def _selected(self, name: str, distribution: str | None) -> bool:
        if self.selection is None:
            return True
        names = {name.lower()}
        if distribution:
            d = distribution.lower()
            names |= {d, d.removeprefix("ggml-"), d.removeprefix("ggml_")}
        return bool(names & set(self.selection))

    # ----------------------------------------------------------------------------------------------- devices

    def _call_device_hooks(self, reg: BackendReg) -> None:
        self._call_all("ggml_register_devices", {"reg": reg, "register": reg.add_device})

    def _enumerate(self) -> list[Device]:
        for reg in self._regs:
            self._call_device_hooks(reg)
        found: list[tuple[tuple[int, int, int, int, int], Device]] = []
        names: dict[str, Device] = {}
        for r_index, reg in enumerate(self._regs):
            info = self._plugins.get(reg.plugin or "")
            try:
                devs = reg.devices
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                reason = f"device enumeration of {reg.name} failed: {type(exc).__name__}: {exc}"
                reg.unavailable_reason = reason
                if self.strict:
                    raise PluginError(reg.plugin or reg.name, reason) from exc
                if info is not None:
                    info.warnings.append(reason)
                continue
            for d_index, dev in enumerate(devs):
                key = dev.name.lower()
                if key in names:
                    msg = f"device name {dev.name!r} is already used by {names[key].reg}; {reg.name}'s copy is ignored"
                    if info is not None:
                        info.warnings.append(msg)
                    continue
                names[key] = dev
                bufts: list[BufferType] = []
                self._call_all("ggml_register_buffer_types", {"device": dev, "register": bufts.append})
                dev.extra_buffer_types.extend(b for b in bufts if b not in dev.extra_buffer_types)
                found.append((self._order_key(dev, reg, r_index, d_index), dev))
        return [d for _, d in sorted(found, key=lambda kd: kd[0])]

    def _order_key(self, dev: Device, reg: BackendReg, r_index: int, d_index: int) -> tuple[int, int, int, int, int]:
        sel = len(self.selection) if self.selection else 0
        if self.selection:
            for i, tok in enumerate(self.selection):
                if tok in (reg.name.lower(), (reg.plugin or "").lower(), dev.name.lower()):
                    sel = i
                    break
        return (sel, _TYPE_RANK.get(dev.type, 2), -reg.priority, r_index, d_index)

    # ----------------------------------------------------------------------------------------------- queries

    @property
    def plugins(self) -> list[PluginInfo]:
        """Every plugin seen, loaded or not, by name."""
        self.load()
        return sorted(self._plugins.values(), key=lambda p: p.name)

    @property
    def regs(self) -> list[BackendReg]:
        """Every registered backend registry, in load order."""
        self.load()
        return list(self._regs)

    def devices(self) -> list[Device]:
        """Every device, accelerators first and the CPU last (or in GGML_BACKENDS order)."""
        with self._lock:
            self.load()
            if self._devices is None:
                self._devices = self._enumerate()
            return list(self._devices)

    def errors(self) -> dict[str, str]:
        """Plugin name → error, for every plugin that failed to load."""
        return {p.name: p.error or "" for p in self.plugins if p.status == "error"}

    def get_reg(self, name: str) -> BackendReg:
        """A registry by case-insensitive name."""
        for reg in self.regs:
            if reg.name.lower() == name.lower():
                return reg
        known = [r.name for r in self.regs]
        raise DeviceNotFoundError(name, known, _close(name, known))

    def get_device(self, name: str) -> Device:
        """A device by case-insensitive name ("cpu", "OpenCL0"); the error suggests close names."""
        devs = self.devices()
        for d in devs:
            if d.name.lower() == name.lower():
                return d
        known = [d.name for d in devs]
        raise DeviceNotFoundError(name, known, _close(name, known))

    def devices_by_type(self, type: DeviceType) -> list[Device]:
        """Devices of one type, in priority order."""
        return [d for d in self.devices() if d.type == type]

    def init_backend(self, name: str, params: str | None = None) -> Backend:
        """``ggml_backend_init_by_name``."""
        return self.get_device(name).init_backend(params)

    def init_best(self) -> Backend:
        """``ggml_backend_init_best``: the first GPU, else IGPU, else the CPU."""
        for t in (DeviceType.GPU, DeviceType.IGPU, DeviceType.CPU):
            devs = self.devices_by_type(t)
            if devs:
                return devs[0].init_backend()
        devs = self.devices()
        if not devs:
            raise DeviceNotFoundError("<best>", [], ())
        return devs[0].init_backend()


def _close(name: str, known: list[str]) -> list[str]:
    lower = {k.lower(): k for k in known}
    return [lower[m] for m in difflib.get_close_matches(name.lower(), list(lower), n=2, cutoff=0.5)]


def _installed_entry_points() -> Iterable[Any]:
    return importlib_metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP)


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
        reg = _default
    return reg.load()


def reset_registry(registry: Registry | None = None) -> None:
    """Replace (or drop, with None) the process-wide registry; for tests and for re-reading the environment."""
    global _default
    with _default_lock:
        _default = registry
