"""Remember oslo.policy's "allowed" answers: the same question gets the same answer.

NOTE: ``Enforcer.authorize`` costs a few hundred microseconds a call (it looks
for the policy file on disk and walks the check tree, inspecting every check's
signature), more than the rest of a small request. Its answer depends only on
the rule, the target and the caller's credentials, so an allowed question is
remembered here and a repeat costs a dictionary lookup. Denials are never
remembered: they always go through the enforcer (and raise what it raises).
Rules that use a check whose answer could change by itself (``http:`` and
custom checks) are never remembered either. The policy file is re-read at most
once every ``recheck`` seconds, so an edit takes effect within that time; the
remembered answers are dropped whenever the rules changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from oslo_policy import _checks, policy

from exosuit.context import RequestContext

__all__ = ["DecisionCache"]

LOG = logging.getLogger(__name__)

# Checks whose answer is a function of (target, credentials, rules) only.
_PURE_CHECKS = frozenset(
    {
        "AndCheck",
        "OrCheck",
        "NotCheck",
        "RuleCheck",
        "RoleCheck",
        "GenericCheck",
        "TrueCheck",
        "FalseCheck",
    }
)


# A target or credentials as a hashable key: (name, value) pairs, lists made tuples.
_Frozen = tuple[tuple[str, Any], ...]


def _freeze(values: Mapping[str, Any]) -> _Frozen:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items()))


class DecisionCache:
    """``authorize`` as ``Enforcer.authorize(..., do_raise=True)``, with a memory."""

    def __init__(
        self, enforcer: policy.Enforcer, *, recheck: float = 1.0, max_entries: int = 4096
    ) -> None:
        self.enforcer = enforcer
        self.recheck = recheck
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._fingerprint: int | None = None
        self._allowed: set[tuple[str, _Frozen, _Frozen]] = set()
        self._pure: dict[str, bool] = {}

    def authorize(self, rule: str, target: dict[str, Any], context: RequestContext) -> None:
        if time.monotonic() >= self._next_check:
            self._refresh()
        key = (rule, _freeze(target), _freeze(context.to_policy_values()))
        if key in self._allowed:
            return
        self.enforcer.authorize(rule, target, context, do_raise=True)
        if self._is_pure(rule):
            if len(self._allowed) >= self.max_entries:
                self._allowed.clear()
            self._allowed.add(key)

    def allowed(self, rule: str, target: dict[str, Any], context: RequestContext) -> bool:
        """Whether ``authorize`` would let the caller through (a denial, or a rule whose
        scope the caller's token lacks, is False)."""
        try:
            self.authorize(rule, target, context)
        except (policy.PolicyNotAuthorized, policy.InvalidScope):
            return False
        return True

    def _refresh(self) -> None:
        with self._lock:
            if time.monotonic() < self._next_check:
                return
            try:
                self.enforcer.load_rules()
            except Exception as error:
                # NOTE: an operator's edit that breaks the file must not turn requests
                # into 500s: the rules in force stay, and the log says so loudly, again
                # at every check until the file is mended.
                LOG.error(
                    "the policy file is invalid (%s: %s); the rules loaded before stay in "
                    "force until it is fixed",
                    type(error).__name__,
                    error,
                )
                self._next_check = time.monotonic() + self.recheck
                return
            rules = self.enforcer.rules
            fingerprint = hash(frozenset((name, str(check)) for name, check in rules.items()))
            if fingerprint != self._fingerprint:
                self._allowed = set()
                self._pure = {}
                self._fingerprint = fingerprint
            self._next_check = time.monotonic() + self.recheck

    def _is_pure(self, rule: str) -> bool:
        pure = self._pure.get(rule)
        if pure is None:
            pure = self._pure[rule] = self._walk(self.enforcer.rules.get(rule), set())
        return pure

    def _walk(self, check: _checks.BaseCheck | None, seen: set[str]) -> bool:
        if check is None:
            return False  # left to the enforcer (its default rule, if any)
        if type(check).__name__ not in _PURE_CHECKS:
            return False
        if isinstance(check, policy.RuleCheck):  # its name passed the test above
            if check.match in seen:
                return True
            seen.add(check.match)
            return self._walk(self.enforcer.rules.get(check.match), seen)
        if hasattr(check, "rules"):
            return all(self._walk(c, seen) for c in check.rules)
        if hasattr(check, "rule"):
            return self._walk(check.rule, seen)
        return True
