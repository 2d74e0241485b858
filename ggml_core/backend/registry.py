"""Plugin discovery and device selection: entry points → isolated loading → registries → ordered devices.

One plugin can never break the host. Every entry point is imported, and every hook and device enumeration
called, in a worker thread under a deadline (``GGML_PLUGIN_TIMEOUT``, default 10 s); every value a plugin hands
back is checked where it enters (:mod:`ggml_core.backend._validate`). A failure leaves out just the plugin,
registry, device or buffer type concerned and is recorded as a :class:`Problem` naming the plugin, the object and
the field (shown by ``ggml-core plugins`` and ``ggml-core devices``); ``GGML_STRICT_PLUGINS=1`` raises instead.
``GGML_BACKENDS=cuda,cpu`` restricts and orders what loads. Name clashes follow :mod:`._naming`.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.metadata as importlib_metadata
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from ggml_core._errors import DeviceNotFoundError, PluginError
from ggml_core.backend import _deadline, _naming, _scope, hookspecs
from ggml_core.backend._records import PluginInfo, Problem, entry_point_identity
from ggml_core.backend._validate import (
    DEVICES_MAX,
    check_buffer_type,
    check_reg,
    describe_exc,
    guarded_call,
    probe_device,
    safe_repr,
    safe_str,
)
from ggml_core.backend.interfaces import API_VERSION, Backend, BackendReg, BufferType, Device, DeviceType

__all__ = ["PluginInfo", "Problem", "Registry", "get_registry", "reset_registry"]

#: device order when GGML_BACKENDS does not give one: accelerators first, the CPU last (as ggml)
_TYPE_RANK = {DeviceType.GPU: 0, DeviceType.IGPU: 1, DeviceType.ACCEL: 2, DeviceType.CPU: 3}
#: plugins (entry point name, value) that overran a deadline in this process → what hung; their thread may still
#: run, so later registries (reset_registry) record them as hung at once instead of waiting again
_HUNG: dict[tuple[str, str], tuple[str, str]] = {}


@dataclass
class _RegEntry:
    """A registry as accepted: its name and priority as they were checked, its owner, its accepted devices."""

    reg: BackendReg
    name: str
    priority: int
    info: PluginInfo
    #: accepted own devices, None until enumerated
    own: list[Device] | None = None
    #: accepted devices other plugins added, with the contributing plugin
    added: list[tuple[Device, PluginInfo]] = field(default_factory=list)


class Registry:
    """Loads backend plugins and answers "which devices are there" in priority order.

    :param entry_points: a callable returning the entry points to load (default: the installed
        ``ggml.backends`` group); tests pass fakes
    :param environ: the environment to read ``GGML_BACKENDS`` / ``GGML_STRICT_PLUGINS`` /
        ``GGML_PLUGIN_TIMEOUT`` from
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
        #: seconds each plugin import, hook call or device enumeration may take (None: no limit)
        self.timeout, self._timeout_problem = _deadline.plugin_timeout(env)
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._plugins: dict[str, PluginInfo] = {}
        self._entries: list[_RegEntry] = []
        self._devices: list[Device] | None = None
        #: devices left out of :meth:`devices` as the same hardware as an earlier one: (hidden, kept)
        self._same: list[tuple[Device, Device]] = []
        #: the listings under a scope (:meth:`enumerating_only`): owners -> (devices, same hardware)
        self._scoped: dict[frozenset[str], tuple[list[Device], list[tuple[Device, Device]]]] = {}
        self._device_hooks_done: set[tuple[str, int]] = set()
        self._buft_hooks_done: set[tuple[str, int]] = set()
        self._runtime_seen: set[tuple[str, str, str]] = set()
        self._loaded = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------------- records

    def _record(
        self, info: PluginInfo, obj: str, where: str, message: str, kind: str, exc: BaseException | None = None
    ) -> None:
        """Record one problem on ``info``; fatal kinds (error, hung) mark the plugin failed. Strict mode raises."""
        problem = Problem(info.name, obj, where, message, kind)
        if problem in info.problems:  # the same finding again (devices are re-listed after register_plugin)
            return
        info.problems.append(problem)
        text = message if obj == "plugin" else f"{obj}: {where}: {message}"
        if kind in ("error", "hung") and obj == "plugin":
            info.status, info.error = kind, text
        else:
            info.warnings.append(text)
        if exc is not None and info.traceback is None:
            with contextlib.suppress(BaseException):
                info.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if self.strict:
            raise PluginError(info.name, text) from exc

    def _fail(self, info: PluginInfo, message: str, exc: BaseException | None = None, where: str = "load") -> None:
        self._record(info, "plugin", where, message, "error", exc)

    def _outcome_failed(self, info: PluginInfo, out: _deadline.Outcome, obj: str, what: str, kind: str) -> bool:
        """Record a hung or raising call; True when it failed."""
        if out.hung:
            self._record(
                info,
                obj,
                what,
                f"did not finish within {self.timeout:g} s (GGML_PLUGIN_TIMEOUT); "
                "skipped, still running in the background",
                "hung",
            )
            if info.value:
                where = what if obj == "plugin" else f"{obj}: {what}"
                _HUNG.setdefault((info.name.split(":")[0], info.value), (where, info.problems[-1].message))
            return True
        if out.exc is not None:
            self._record(info, obj, what, f"raised {describe_exc(out.exc)}", kind, out.exc)
            return True
        return False

    def problems(self) -> list[Problem]:
        """Every problem recorded so far (loading, enumeration, and bad answers at run time), plugin by plugin."""
        with self._lock:
            return [p for info in self.plugins for p in info.problems]

    def _pseudo(self, name: str) -> PluginInfo:
        info = self._plugins.get(name)
        if info is None:
            info = self._plugins[name] = PluginInfo(name)
        return info

    # ----------------------------------------------------------------------------------------------- loading

    def load(self) -> Registry:
        """Discover and load every entry-point plugin once (later calls do nothing); returns self."""
        with self._lock:
            if self._loaded:
                return self
            self._loaded = True
            _deadline.watch_sigint()  # so that a KeyboardInterrupt raised by a device hook is told from Ctrl-C
            if self._timeout_problem:
                self._fail(self._pseudo("<environment>"), self._timeout_problem)
            try:
                eps = [(entry_point_identity(ep), ep) for ep in self._entry_points()]
            except Exception as exc:  # noqa: BLE001 - a broken metadata install must not stop the host either
                self._fail(self._pseudo("<entry points>"), f"cannot list entry points: {describe_exc(exc)}", exc)
                eps = []
            eps.sort(key=lambda ie: _naming.load_order_key(ie[0][2], ie[0][0], ie[0][1]))
            for ident, ep in eps:
                self._load_entry_point(ident, ep)
            return self

    def _load_entry_point(self, ident: tuple[str, str, str | None, str | None], ep: Any) -> None:
        name, value, dist, version = ident
        info = PluginInfo(name, value, dist, version)
        if info.name in self._plugins:
            info.name = f"{info.name}:{info.value}"
        self._plugins[info.name] = info
        if not self._selected(info.name, info.distribution):
            info.status, info.error = "disabled", "not listed in GGML_BACKENDS"
            return
        hung = _HUNG.get((name, value))
        if hung:
            self._record(info, "plugin", hung[0], f"{hung[1]} (earlier in this process; not waited for again)", "hung")
            return
        out = _deadline.call(ep.load, self.timeout, info.name)
        if out.hung or out.exc is not None:
            if out.exc is not None:
                self._fail(info, f"import failed: {describe_exc(out.exc)}", out.exc, "import")
            else:
                self._outcome_failed(info, out, "plugin", "import", "hung")
            return
        self._register(info, out.value)

    def register_plugin(self, plugin: object, name: str, *, distribution: str | None = None) -> PluginInfo:
        """Register an in-process plugin object or module (tests, embedding, notebooks); returns its info."""
        with self._lock:
            self.load()
            info = PluginInfo(name, safe_repr(plugin), distribution)
            self._plugins[name] = info
            self._register(info, plugin)
            self._devices = None
            self._scoped.clear()
            return info

    def _register(self, info: PluginInfo, module: object) -> None:
        try:
            self.pm.register(module, name=info.name)
        except Exception as exc:  # noqa: BLE001 - pluggy validation errors and anything else a plugin triggers
            self._fail(info, f"invalid hook implementation: {safe_str(exc, 600)}", exc)
            return
        info.hooks = [h.name for h in self.pm.get_hookcallers(module) or []]
        if not self._check_version_and_score(info):
            self._drop(module)
            return
        if "ggml_register_backends" not in info.hooks:
            self._fail(info, "does not implement the required hook ggml_register_backends(register)")
            self._drop(module)
            return
        new_regs: list[object] = []
        ok, _ = self._call_one(info, "ggml_register_backends", {"register": new_regs.append})
        if not ok:
            self._drop(module)
            return
        refused = 0
        for reg in list(new_regs):
            problem = check_reg(reg) or self._name_taken(reg, info)
            if problem:
                refused += 1
                self._record(
                    info, "plugin", "ggml_register_backends", f"{problem}; that registry is ignored", "refused"
                )
                continue
            assert isinstance(reg, BackendReg)
            if self.selection is not None and not (self._selected(reg.name, None) or self._selected(info.name, None)):
                continue
            reg.plugin = info.name
            info.regs.append(reg)
            self._entries.append(_RegEntry(reg, reg.name, int(reg.priority), info))
        if refused and not info.regs:
            info.status, info.error = "error", info.warnings[-1]
            self._drop(module)
            return
        info.status = "loaded"

    def _check_version_and_score(self, info: PluginInfo) -> bool:
        ok, version = self._call_one(info, "ggml_api_version", {})
        if not ok:
            return False
        if "ggml_api_version" not in info.hooks or version is None:
            self._fail(info, "does not implement the required hook ggml_api_version()")
            return False
        if type(version) is not int or version != API_VERSION:
            self._fail(
                info,
                f"written for plugin API version {safe_repr(version)}, this ggml-core speaks version {API_VERSION}; "
                "install a matching version of the plugin",
            )
            return False
        if "ggml_score" in info.hooks:
            ok, score = self._call_one(info, "ggml_score", {})
            if not ok:
                return False
            if isinstance(score, bool) or not isinstance(score, int):
                self._fail(info, f"ggml_score() returned {safe_repr(score)}; expected an integer")
                return False
            if score == 0:
                info.status, info.error = "skipped", "score 0: the plugin says it cannot run on this machine"
                return False
        return True

    def _name_taken(self, reg: Any, info: PluginInfo) -> str | None:
        owner = _naming.may_use(reg.name, info.distribution)
        if owner:
            return f"registry name {reg.name!r} is reserved for the first-party distribution {owner}"
        for e in self._entries:
            if e.name.lower() == reg.name.lower():
                return f"backend name {reg.name!r} is already registered by plugin {e.info.name!r}"
        return None

    def _drop(self, module: object) -> None:
        with contextlib.suppress(Exception):  # best effort; the plugin is already marked failed
            self.pm.unregister(module)

    def _impls(self, hook: str) -> list[Any]:
        return list(getattr(self.pm.hook, hook).get_hookimpls())

    def _call_impl(self, impl: Any, kwargs: dict[str, Any], after: Callable[[Any], Any] | None = None) -> Any:
        """Call one implementation under the deadline (then ``after(result)`` in the same worker)."""
        args = {k: v for k, v in kwargs.items() if k in impl.argnames}

        def work() -> Any:
            result = impl.function(**args)
            return after(result) if after is not None else result

        return _deadline.call(work, self.timeout, f"{impl.plugin_name}.{hook_name(impl)}")

    def _call_one(self, info: PluginInfo, hook: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """Call one plugin's implementation of ``hook`` in isolation; (False, None) and a record on failure."""
        for impl in self._impls(hook):
            if impl.plugin_name != info.name:
                continue
            out = self._call_impl(impl, kwargs)
            if out.hung:
                self._outcome_failed(info, out, "plugin", f"hook {hook}", "hung")
                return False, None
            if out.exc is not None:
                self._fail(info, f"hook {hook} raised {describe_exc(out.exc)}", out.exc, hook)
                return False, None
            return True, out.value
        return True, None

    def _selected(self, name: str, distribution: str | None) -> bool:
        if self.selection is None:
            return True
        names = {name.lower()}
        if distribution:
            d = distribution.lower()
            names |= {d, d.removeprefix("ggml-"), d.removeprefix("ggml_")}
        return bool(names & set(self.selection))

    # ----------------------------------------------------------------------------------------------- devices

    def _enumerate_own(self, e: _RegEntry) -> None:
        """The registry's own devices, enumerated and probed under the deadline."""
        e.own = []

        def work() -> list[tuple[Any, tuple[str, str] | None]]:
            devs = e.reg.own_devices()
            return [(d, probe_device(d)) for d in devs[: DEVICES_MAX + 1]]

        out = _deadline.call(work, self.timeout, f"{e.info.name} {e.name}")
        obj = f"registry {e.name!r}"
        if out.hung or out.exc is not None:
            self._outcome_failed(e.info, out, obj, "enumerate_devices()", "disabled")
            what = "hung" if out.hung else describe_exc(out.exc) if out.exc else ""
            with contextlib.suppress(Exception):
                e.reg.unavailable_reason = f"device enumeration of {e.name} failed: {what}"
            return
        reason = getattr(e.reg, "unavailable_reason", None)
        if reason is not None and not isinstance(reason, str):
            self._record(
                e.info, obj, "unavailable_reason", f"is {safe_repr(reason)}; expected None or a string", "warning"
            )
            with contextlib.suppress(Exception):
                e.reg.unavailable_reason = safe_str(reason)
        found = out.value
        if len(found) > DEVICES_MAX:
            self._record(
                e.info,
                obj,
                "enumerate_devices()",
                f"returned more than {DEVICES_MAX} devices; the first {DEVICES_MAX} are used",
                "refused",
            )
            found = found[:DEVICES_MAX]
        e.own = self._accept_probed(e.info, found, obj, "enumerate_devices()")

    def _accept_probed(
        self, info: PluginInfo, found: list[tuple[Any, tuple[str, str] | None]], source: str, where: str
    ) -> list[Device]:
        ok: list[Device] = []
        for index, (dev, problem) in enumerate(found):
            if problem is None:
                ok.append(dev)
                continue
            name = None
            with contextlib.suppress(BaseException):
                name = dev.name if isinstance(dev, Device) else None
            obj = f"device {name!r}" if isinstance(name, str) and name else f"device #{index} of {source} ({where})"
            self._record(info, obj, problem[0], f"{problem[1]}; the device is left out", "disabled")
        return ok

    def _call_device_hooks(self, e: _RegEntry) -> None:
        """``ggml_register_devices`` of every plugin for one registry: validated devices are added, never replace."""
        for impl in self._impls("ggml_register_devices"):
            key = (impl.plugin_name, id(e.reg))
            info = self._plugins.get(impl.plugin_name)
            if key in self._device_hooks_done or info is None:
                continue
            self._device_hooks_done.add(key)
            got: list[object] = []

            def probe_all(_result: object, got: list[object] = got) -> list[tuple[Any, tuple[str, str] | None]]:
                return [(d, probe_device(d)) for d in got[:DEVICES_MAX]]

            out = self._call_impl(impl, {"reg": e.reg, "register": got.append}, after=probe_all)
            if self._outcome_failed(info, out, "hook ggml_register_devices", f"for {e.name!r}", "warning"):
                continue
            for dev in self._accept_probed(info, out.value, f"registry {e.name!r}", "ggml_register_devices"):
                if any(dev is d for d in (e.own or [])) or any(dev is d for d, _ in e.added):
                    continue
                e.reg.add_device(dev)
                e.added.append((dev, info))

    def _call_buft_hooks(self, dev: Device, name: str) -> None:
        for impl in self._impls("ggml_register_buffer_types"):
            key = (impl.plugin_name, id(dev))
            info = self._plugins.get(impl.plugin_name)
            if key in self._buft_hooks_done or info is None:
                continue
            self._buft_hooks_done.add(key)
            got: list[object] = []
            out = self._call_impl(impl, {"device": dev, "register": got.append})
            if self._outcome_failed(info, out, "hook ggml_register_buffer_types", f"for {name!r}", "warning"):
                continue
            for buft in got:
                problem = check_buffer_type(buft)
                if problem:
                    self._record(
                        info,
                        f"buffer type for device {name!r}",
                        "ggml_register_buffer_types",
                        f"registered a buffer type that {problem}; it is left out",
                        "refused",
                    )
                elif not any(buft is b for b in dev.extra_buffer_types):
                    assert isinstance(buft, BufferType)
                    dev.extra_buffer_types.append(buft)

    def _enumerate(self, entries: list[_RegEntry]) -> tuple[list[Device], list[tuple[Device, Device]]]:
        """The devices of ``entries`` (enumerated first where not yet), ordered; those hidden as the same hardware."""
        for e in entries:
            if e.own is None:
                self._enumerate_own(e)
        for e in entries:
            self._call_device_hooks(e)
        found: list[tuple[tuple[int, int, int, int, int], Device]] = []
        taken: dict[str, tuple[Device, PluginInfo]] = {}
        candidates = [(e, d, e.info) for e in entries for d in e.own or []]
        candidates += [(e, d, who) for e in entries for d, who in e.added]
        for e, dev, who in candidates:
            try:
                self._resolve(e, dev, who, taken, found)
            except PluginError:
                raise
            except Exception as exc:  # noqa: BLE001 - an answer that changed after the probe (a flaky property)
                self._record(
                    who,
                    f"device #{len(found)} of registry {e.name!r}",
                    "probe",
                    f"changed its answers after it was checked: {describe_exc(exc)}; left out",
                    "disabled",
                )
        ordered = [d for _, d in sorted(found, key=lambda kd: kd[0])]
        return _naming.drop_same_hardware(ordered)

    def _resolve(
        self,
        e: _RegEntry,
        dev: Device,
        who: PluginInfo,
        taken: dict[str, tuple[Device, PluginInfo]],
        found: list[tuple[tuple[int, int, int, int, int], Device]],
    ) -> None:
        """Apply the name rules to one candidate device; accept it into ``found`` if it passes."""
        name = dev.name
        owner = _naming.may_use(name, who.distribution)
        if owner:
            self._record(
                who,
                f"device {name!r}",
                "name",
                f"is reserved for the first-party distribution {owner}; choose another name; the device is left out",
                "refused",
            )
            return
        if name.lower() in taken:
            first, first_info = taken[name.lower()]
            self._record(
                who,
                f"device {name!r}",
                "name",
                f"is already used by a device of plugin "
                f"{first_info.name!r} (registry {first.reg.name if first.reg else '?'!r}); "
                f"this one is ignored (device names are unique, first by load order wins)",
                "refused",
            )
            return
        self._call_buft_hooks(dev, name)
        key = self._order_key(dev, e, self._entries.index(e), len(found))
        taken[name.lower()] = (dev, who)
        dev._boundary = functools.partial(guarded_call, self._reporter(who, name))
        found.append((key, dev))

    def _reporter(self, info: PluginInfo, name: str) -> Callable[[str, str], None]:
        def report(where: str, message: str) -> None:
            key = (info.name, name, where)
            with self._lock:
                if key in self._runtime_seen:
                    return
                self._runtime_seen.add(key)
                self._record(info, f"device {name!r}", where, f"{message} (at run time; answered safely)", "warning")

        return report

    def _order_key(self, dev: Device, e: _RegEntry, r_index: int, d_index: int) -> tuple[int, int, int, int, int]:
        sel = len(self.selection) if self.selection else 0
        if self.selection:
            for i, tok in enumerate(self.selection):
                if tok in (e.name.lower(), e.info.name.lower(), dev.name.lower()):
                    sel = i
                    break
        return (sel, _TYPE_RANK.get(dev.type, 2), -e.priority, r_index, d_index)

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
        return [e.reg for e in self._entries]

    def devices(self) -> list[Device]:
        """Every device, accelerators first and the CPU last (or in GGML_BACKENDS order), each hardware once.

        Inside :meth:`enumerating_only`, only the devices of the registries in its scope.
        """
        return list(self._listing()[0])

    def _listing(self) -> tuple[list[Device], list[tuple[Device, Device]]]:
        """(devices, same hardware) of the scope in effect (none once everything is listed), or of every registry."""
        with self._lock:
            self.load()
            owners = _scope.current(self)
            if owners is not None and self._devices is None:
                if owners not in self._scoped:
                    entries = [e for e in self._entries if _scope.in_scope(e.info.distribution, owners)]
                    self._scoped[owners] = self._enumerate(entries)
                return self._scoped[owners]
            if self._devices is None:
                self._devices, self._same = self._enumerate(self._entries)
            return self._devices, self._same

    def enumerating_only(self, names: Sequence[str] | None) -> contextlib.AbstractContextManager[bool]:
        """Within the block, list only the registries that can provide the devices ``names`` (and the CPU's): a
        placement that names its devices does not pay for the others' discovery (:mod:`._scope`). Yields whether a
        scope applies; a name not found in it is looked up in the full listing, so that its error names every device.
        """
        return _scope.applied(self, names)

    def same_hardware(self) -> list[tuple[Device, Device]]:
        """Devices left out of :meth:`devices` as the same hardware (same ``device_id``) as a listed one."""
        return list(self._listing()[1])

    def features(self, reg: BackendReg) -> dict[str, str]:
        """A registry's ``features()`` under the deadline, as strings; a failure is shown as ``error``."""
        info = next((e.info for e in self._entries if e.reg is reg), None)
        out = _deadline.call(reg.features, self.timeout, f"{reg.plugin} features")
        if out.hung or out.exc is not None or not isinstance(out.value, Mapping):
            what = "hung" if out.hung else describe_exc(out.exc) if out.exc else f"returned {safe_repr(out.value)}"
            if info is not None and (info.name, reg.name, "features") not in self._runtime_seen:
                self._runtime_seen.add((info.name, reg.name, "features"))
                self._record(info, f"registry {reg.name!r}", "features()", what, "warning")
            return {"error": what}
        return {safe_str(k): safe_str(v) for k, v in list(out.value.items())[:64]}

    def errors(self) -> dict[str, str]:
        """Plugin name → error, for every plugin that failed to load."""
        return {p.name: p.error or "" for p in self.plugins if p.status in ("error", "hung")}

    def get_reg(self, name: str) -> BackendReg:
        """A registry by case-insensitive name."""
        for e in self.load()._entries:
            if e.name.lower() == name.lower():
                return e.reg
        known = [e.name for e in self._entries]
        raise DeviceNotFoundError(name, known, _close(name, known))

    def get_device(self, name: str) -> Device:
        """A device by case-insensitive name ("cpu", "OpenCL0"); the error suggests close names.

        A device hidden as the same hardware as another (:meth:`same_hardware`) is still found by its name.
        """
        listed, same = self._listing()
        devs = listed + [d for d, _ in same]
        for d in devs:
            if d.name.lower() == name.lower():
                return d
        if _scope.current(self) is not None:  # not in the scope: the full listing, for the error's names
            with _scope.lifted():
                return self.get_device(name)
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


def hook_name(impl: Any) -> str:
    """The hook an implementation implements (pluggy keeps it as the function's name)."""
    return getattr(impl.function, "__name__", "hook")


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
