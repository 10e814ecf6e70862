"""The request context: who is calling (oslo.context, filled from keystonemiddleware headers)."""

from __future__ import annotations

from oslo_context import context as oslo_context

__all__ = ["RequestContext"]


class RequestContext(oslo_context.RequestContext):
    """oslo.context's context plus the two questions Exosuit asks of it."""

    service_token_roles: frozenset[str] = frozenset({"service"})

    @property
    def is_admin_role(self) -> bool:
        return "admin" in self.roles

    @property
    def has_service_token(self) -> bool:
        """True when the request carries a service token with a service role.

        Cyborg's rule: the service roles of the X-Service-Token intersect
        ``[keystone_authtoken] service_token_roles`` (default ``service``).
        """
        return bool(self.service_token_roles.intersection(self.service_roles or ()))
