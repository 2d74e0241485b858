"""What the registry records: each plugin's :class:`PluginInfo` and each :class:`Problem` a plugin caused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ggml_core.backend._validate import safe_str

if TYPE_CHECKING:
    from ggml_core.backend.interfaces import BackendReg

__all__ = ["PluginInfo", "Problem", "entry_point_identity"]


@dataclass(frozen=True)
class Problem:
    """One thing a plugin got wrong: who (``plugin``), what (``obj``: "registry 'X'", "device 'X'"), where."""

    #: the plugin's name (its entry point)
    plugin: str
    #: the object concerned: ``plugin``, ``registry 'CUDA'``, ``device 'CUDA0'``, ``buffer type 'X'``
    obj: str
    #: the field or hook: ``import``, ``memory()``, ``name``, ``ggml_register_backends``
    field: str
    #: what was wrong and what the core did about it
    message: str
    #: ``error`` (the plugin is not loaded), ``hung`` (it overran its deadline), ``disabled`` (the object is left
    #: out), ``refused`` (a value was not accepted, e.g. a taken name) or ``warning`` (recorded, nothing left out)
    kind: str = "error"

    def __str__(self) -> str:
        where = f"{self.obj}: {self.field}" if self.obj != "plugin" else self.field
        return f"plugin {self.plugin!r}: {where}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        """JSON-ready."""
        return {
            "plugin": self.plugin,
            "object": self.obj,
            "field": self.field,
            "kind": self.kind,
            "message": self.message,
            "text": str(self),
        }


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
    #: ``loaded``, ``error``, ``hung``, ``disabled`` (not in GGML_BACKENDS) or ``skipped`` (score 0)
    status: str = "pending"
    #: one-line cause of the failure or skip
    error: str | None = None
    #: full traceback of the failure, for ``ggml-core plugins --verbose``
    traceback: str | None = None
    #: hooks this plugin implements
    hooks: list[str] = field(default_factory=list)
    #: registries it registered
    regs: list[BackendReg] = field(default_factory=list)
    #: non-fatal problems (a device left out, a refused name...), as text
    warnings: list[str] = field(default_factory=list)
    #: every problem recorded for this plugin, fatal or not
    problems: list[Problem] = field(default_factory=list)

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
            "problems": [p.as_dict() for p in self.problems],
        }


def entry_point_identity(ep: Any) -> tuple[str, str, str | None, str | None]:
    """(name, value, distribution, version) of an entry point; metadata that cannot be read gives None."""
    name, value = safe_str(getattr(ep, "name", "?")), safe_str(getattr(ep, "value", ""))
    dist_name: object = None
    version: object = None
    dist = getattr(ep, "dist", None)
    if dist is not None:
        try:
            dist_name = getattr(dist, "name", None) or dist.metadata["Name"]
            version = getattr(dist, "version", None)
        except Exception:  # noqa: BLE001 - broken METADATA: the plugin still loads
            pass
        if not isinstance(dist_name, str) or not dist_name:
            dist_name = "<unnamed distribution>"  # installed, so never trusted with first-party names
    return name, value, dist_name if isinstance(dist_name, str) else None, version if isinstance(version, str) else None
