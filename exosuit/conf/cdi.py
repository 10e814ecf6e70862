"""[cdi]: where the agent writes CDI spec files (doc/cdi.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["CdiSettings", "GROUP", "OPTIONS", "options"]

GROUP = "cdi"

OPTIONS: list[cfg.Opt] = [
    cfg.StrOpt(
        "spec_dir",
        default="/var/run/cdi",
        help="Directory where the agent writes the CDI spec files of the devices claimed "
        "for containers (exosuit.dev-<class>_<claim>.json), which container engines read "
        "(podman, containerd and CRI-O read /etc/cdi and /var/run/cdi). `exosuit serve` "
        "uses <data dir>/cdi unless a file sets it (doc/cdi.md).",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class CdiSettings:
    """The ``[cdi]`` options."""

    spec_dir: str

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> CdiSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.cdi
        return cls(
            spec_dir=str(group.spec_dir),
        )
