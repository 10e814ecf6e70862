"""oslo.policy rules: Cyborg's persona defaults (its rule names, so overrides carry over).

``list_rules`` is the ``oslo.policy.policies`` hook (namespace ``exosuit``):
``oslopolicy-sample-generator --namespace exosuit`` or ``exosuit-manage
policy-sample`` prints the defaults, and ``[oslo_policy] policy_file`` overrides them.
"""

from __future__ import annotations

import itertools

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from exosuit.api.policies import (
    agent,
    arqs,
    attach_handles,
    attributes,
    audit,
    base,
    claims,
    deployables,
    device_profiles,
    devices,
    discoveries,
    drivers,
    hosts,
    images,
    jobs,
    metrics,
    partitions,
    permissions,
    servers,
    services,
    summary,
    usage_history,
)

__all__ = ["list_rules", "make_enforcer", "permission_rules"]


def list_rules() -> list[policy.RuleDefault]:
    return list(
        itertools.chain(
            base.list_rules(),
            device_profiles.list_rules(),
            arqs.list_rules(),
            devices.list_rules(),
            deployables.list_rules(),
            attributes.list_rules(),
            agent.list_rules(),
            hosts.list_rules(),
            attach_handles.list_rules(),
            jobs.list_rules(),
            summary.list_rules(),
            images.list_rules(),
            services.list_rules(),
            drivers.list_rules(),
            discoveries.list_rules(),
            claims.list_rules(),
            partitions.list_rules(),
            metrics.list_rules(),
            audit.list_rules(),
            servers.list_rules(),
            permissions.list_rules(),
            usage_history.list_rules(),
        )
    )


def permission_rules() -> list[str]:
    """The names of the API's own rules (the per-resource ones, each documented with the
    operations it guards), in registration order: what ``GET /v2/permissions`` answers
    for. The base rules (``admin_api``, ``project_member_or_admin`` …) are check strings
    those rules are written in, not permissions of their own."""
    return [rule.name for rule in list_rules() if isinstance(rule, policy.DocumentedRuleDefault)]


def make_enforcer(conf: cfg.ConfigOpts) -> policy.Enforcer:
    # New persona defaults only: Cyborg's deprecated rules (admin_or_owner…) let any
    # project-scoped user act on any ARQ; Exosuit does not accept them
    # (doc/compatibility.md). Scope is always enforced: system tokens get 403.
    policy_opts.set_defaults(conf, enforce_scope=True, enforce_new_defaults=True)
    enforcer = policy.Enforcer(conf)
    enforcer.register_defaults(list_rules())
    enforcer.load_rules()
    return enforcer
