"""[DEFAULT]: this host's name, the state directory, logging and the two deadlines of
the server (binds, programs)."""

from __future__ import annotations

import dataclasses
import socket

from oslo_config import cfg

__all__ = ["DefaultSettings", "GROUP", "OPTIONS", "options"]

GROUP = None

OPTIONS: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<this machine's host name>",
        help="The name of this host: the one name used by the agent, the database, "
        "Placement and Nova's nodename. Also the name of the simulated host of "
        "`exosuit serve`.",
    ),
    cfg.StrOpt(
        "state_path",
        default=".exosuit",
        help="Directory for Exosuit's local state (the SQLite database of the embedded "
        "default, agent cache). `exosuit serve --data-dir` sets it.",
    ),
    cfg.BoolOpt("debug", default=False, help="Log at DEBUG level."),
    cfg.IntOpt(
        "bind_timeout",
        default=60,
        min=1,
        help="Seconds a bind that needs work on its host (programming, mdev creation) may "
        "stay BindStarted waiting for the agent's report; then it is BindFailed and Nova "
        "gets a failed event. As Cyborg's option of that name.",
    ),
    cfg.IntOpt(
        "program_timeout",
        default=600,
        min=1,
        help="Seconds an operator's program of a deployable may take (fetch, load, verify) "
        "before the conductor fails it (doc/programming.md); a bind's program is bounded "
        "by bind_timeout.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class DefaultSettings:
    """The ``[DEFAULT]`` options of Exosuit (not those other libraries put there)."""

    host: str
    state_path: str
    debug: bool
    bind_timeout: int
    program_timeout: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> DefaultSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf
        return cls(
            host=str(group.host),
            state_path=str(group.state_path),
            debug=bool(group.debug),
            bind_timeout=int(group.bind_timeout),
            program_timeout=int(group.program_timeout),
        )
