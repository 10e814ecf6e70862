"""[accelerator_requests]: how many accelerator requests a unit of a profile's group makes."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

from oslo_config import cfg

__all__ = ["AcceleratorRequestsSettings", "GROUP", "OPTIONS", "options"]

GROUP = "accelerator_requests"

OPTIONS: list[cfg.Opt] = [
    cfg.DictOpt(
        "attach_handles_per_unit",
        default={"CUSTOM_FPGA_XILINX": "2"},
        help="TRAIT:N pairs. A device profile group that requires TRAIT gets N "
        "accelerator requests per unit of resource, as Cyborg does for Xilinx "
        "cards (management and user functions).",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class AcceleratorRequestsSettings:
    """The ``[accelerator_requests]`` options; ``attach_handles_per_unit``: TRAIT → N."""

    attach_handles_per_unit: Mapping[str, int]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> AcceleratorRequestsSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.accelerator_requests
        return cls(
            attach_handles_per_unit=types.MappingProxyType(
                {str(k): int(v) for k, v in (group.attach_handles_per_unit or {}).items()}
            ),
        )
