"""The job kinds a conductor runs, and the services their handlers use.

Each integration declares its kinds and services as module attributes
(``JOB_KINDS``, ``SERVICES``: see exosuit/jobs.py); this module imports the
in-tree ones by name, so a reader can follow a job from its kind to its
handler. Out-of-tree modules are named in ``[conductor] handler_modules`` and
declare the same two attributes.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from exosuit.conductor import audit, claim_expiry, health, programs, usage_history
from exosuit.conf import ConductorSettings
from exosuit.jobs import Handler, Interval, JobKind, Service
from exosuit.nova import notify
from exosuit.placement import claim_allocations, sync

__all__ = ["IN_TREE", "Registry", "load"]

# The in-tree integrations whose jobs every conductor runs.
IN_TREE: tuple[ModuleType, ...] = (
    sync,
    notify,
    programs,
    claim_expiry,
    claim_allocations,
    audit,
    health,
    usage_history,
)


@dataclasses.dataclass(frozen=True)
class Registry:
    """What one conductor runs: job kinds by name and service factories by name."""

    kinds: Mapping[str, JobKind]
    services: Mapping[str, Callable[[Any], Any]]

    @classmethod
    def of(cls, kinds: Iterable[JobKind] = (), services: Iterable[Service] = ()) -> Registry:
        return cls({k.name: k for k in kinds}, {s.name: s.factory for s in services})

    @property
    def handlers(self) -> dict[str, Handler]:
        return {name: kind.handler for name, kind in self.kinds.items()}

    @property
    def periodic(self) -> dict[str, Interval]:
        return {
            name: kind.interval for name, kind in self.kinds.items() if kind.interval is not None
        }


def load(conf: Any) -> Registry:
    """The in-tree kinds and services plus those of ``[conductor] handler_modules``."""
    modules = [
        *IN_TREE,
        *(
            importlib.import_module(name)
            for name in ConductorSettings.from_conf(conf).handler_modules
        ),
    ]
    kinds: list[JobKind] = []
    services: list[Service] = []
    for module in modules:
        kinds.extend(getattr(module, "JOB_KINDS", ()))
        services.extend(getattr(module, "SERVICES", ()))
    return Registry.of(kinds, services)
