"""[inventory]: how the devices an agent reports for the first time start (doc/devices.md)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf._values import texts

__all__ = ["GROUP", "InventorySettings", "OPTIONS", "options"]

GROUP = "inventory"

OPTIONS: list[cfg.Opt] = [
    cfg.StrOpt(
        "new_device_activation",
        default="inactive",
        choices=[
            (
                "inactive",
                "Listed with its state, fully reserved in Placement and never bindable "
                "until an operator marks it ready (doc/devices.md).",
            ),
            ("ready", "Offered at once, as Cyborg offers every device it finds."),
        ],
        help="The activation of a device an agent reports for the first time.",
    ),
    cfg.ListOpt(
        "ready_drivers",
        default=[],
        help="Driver plug-ins (the agent's enabled_drivers names) whose new devices start "
        "ready whatever new_device_activation says (`exosuit serve` lists simulated, so "
        "that its demo works at once). A device from an agent that does not say which "
        "plug-in found it is matched by its driver_name.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class InventorySettings:
    """The ``[inventory]`` options."""

    new_device_activation: str
    ready_drivers: tuple[str, ...]

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> InventorySettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.inventory
        return cls(
            new_device_activation=str(group.new_device_activation),
            ready_drivers=texts(group.ready_drivers),
        )
