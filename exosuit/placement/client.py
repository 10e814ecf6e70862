"""The Placement REST calls Exosuit makes, over a keystoneauth session.

``PlacementClient`` takes its keystoneauth ``Adapter`` (or ``Session``) as a
parameter: in a cloud it is built from ``[placement]`` (any keystoneauth auth
plugin, the catalog or ``endpoint_override``) by ``make_adapter``; tests hand it
one pointed at a real Placement on loopback. Every request names its
microversion, and keystoneauth's and Placement's errors are translated here, at
one boundary, into ``exosuit.exceptions.PlacementError`` and its subclasses.

A client object belongs to one job: it counts the requests it makes
(``calls``), which the sync reports as metrics. The names Placement is known to
have (custom resource classes and traits) are cached in a ``NameCache`` shared
by the clients of one process.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

import requests
from keystoneauth1 import adapter as ksa_adapter
from keystoneauth1 import exceptions as ksa_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from exosuit import exceptions
from exosuit.schemas import JSONObject

__all__ = [
    "MICROVERSION",
    "NameCache",
    "PlacementClient",
    "make_adapter",
    "use_placement_url",
]

LOG = logging.getLogger(__name__)

# One microversion for every call: 1.14 in_tree, 1.18 required traits on provider
# lists, 1.20 POST /resource_providers returns the provider (with its generation),
# 1.26 reserved may equal total (a disabled device is reserved whole).
MICROVERSION = "1.26"

# Placement's error codes (api-ref errors.inc) the sync branches on.
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
INVENTORY_IN_USE = "placement.inventory.inuse"


class NameCache:
    """Custom resource classes and traits that Placement is known to have."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def missing(self, names: Iterable[str]) -> list[str]:
        with self._lock:
            return sorted(n for n in set(names) if n not in self._names)

    def add(self, name: str) -> None:
        with self._lock:
            self._names.add(name)

    def forget(self, names: Iterable[str]) -> None:
        with self._lock:
            self._names.difference_update(names)


class PlacementClient:
    """Placement's REST API: providers, inventories, traits, resource classes."""

    def __init__(self, adapter: ksa_adapter.Adapter, *, names: NameCache | None = None) -> None:
        self.adapter = adapter
        self.names = names if names is not None else NameCache()
        self.calls: collections.Counter[str] = collections.Counter()

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # -- the one boundary ------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        expected: tuple[int, ...] = (200,),
        microversion: str = MICROVERSION,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty).

        Raises PlacementUnavailable (unreachable, timeout, 5xx, 401/403),
        PlacementConflict (409), PlacementNotFound (404) or PlacementError.
        """
        self.calls[method] += 1
        kwargs: dict[str, Any] = {
            "raise_exc": False,
            "microversion": microversion,
            "microversion_service_type": "placement",
        }
        if body is not None:
            kwargs["json"] = body
        try:
            response = self.adapter.request(url, method, **kwargs)
        except ksa_exc.ClientException as error:
            # Connection refused or reset, timeout, no endpoint in the catalog, the
            # identity service refusing our credentials …
            raise exceptions.PlacementUnavailable(
                method=method, url=url, status=None, detail=f"{type(error).__name__}: {error}"
            ) from error
        status: int = response.status_code
        if status in expected:
            if status == 204 or not response.content:
                return None
            return response.json()
        detail, code = _error_detail(response)
        if status == 406:
            detail = (
                f"this Placement does not speak microversion {microversion} "
                f"(Rocky or later is needed): {detail}"
            )
        kind = exceptions.PlacementError
        if status in (401, 403) or status >= 500:
            kind = exceptions.PlacementUnavailable
        elif status == 409:
            kind = exceptions.PlacementConflict
        elif status == 404:
            kind = exceptions.PlacementNotFound
        raise kind(method=method, url=url, status=status, detail=detail, placement_code=code)

    # -- resource providers ----------------------------------------------------------
    def get_provider(self, uuid: str) -> JSONObject | None:
        try:
            provider: JSONObject = self.request("GET", f"/resource_providers/{uuid}")
        except exceptions.PlacementNotFound:
            return None
        return provider

    def find_provider(self, name: str) -> JSONObject | None:
        found = self.request("GET", "/resource_providers" + _query({"name": name}))
        providers: list[JSONObject] = found["resource_providers"]
        return providers[0] if providers else None

    def list_tree(self, root_uuid: str, *, required: str | None = None) -> list[JSONObject]:
        """The providers of ``root_uuid``'s tree (with ``required`` trait); [] when
        there is no such provider."""
        query = {"in_tree": root_uuid}
        if required:
            query["required"] = required
        found = self.request("GET", "/resource_providers" + _query(query))
        providers: list[JSONObject] = found["resource_providers"]
        return providers

    def create_provider(self, uuid: str, name: str, parent_uuid: str | None) -> JSONObject:
        body = {"uuid": uuid, "name": name}
        if parent_uuid:
            body["parent_provider_uuid"] = parent_uuid
        provider: JSONObject = self.request("POST", "/resource_providers", body)
        return provider

    def update_provider(self, uuid: str, name: str, parent_uuid: str | None) -> JSONObject:
        provider: JSONObject = self.request(
            "PUT",
            f"/resource_providers/{uuid}",
            {"name": name, "parent_provider_uuid": parent_uuid},
        )
        return provider

    def delete_provider(self, uuid: str) -> None:
        self.request("DELETE", f"/resource_providers/{uuid}", expected=(204,))

    # -- inventories and traits ------------------------------------------------------
    def get_inventories(self, uuid: str) -> tuple[int, dict[str, JSONObject]]:
        found = self.request("GET", f"/resource_providers/{uuid}/inventories")
        return found["resource_provider_generation"], found["inventories"]

    def set_inventories(
        self, uuid: str, generation: int, inventories: dict[str, JSONObject]
    ) -> int:
        found = self.request(
            "PUT",
            f"/resource_providers/{uuid}/inventories",
            {"resource_provider_generation": generation, "inventories": inventories},
        )
        generation_now: int = found["resource_provider_generation"]
        return generation_now

    def get_traits(self, uuid: str) -> tuple[int, list[str]]:
        found = self.request("GET", f"/resource_providers/{uuid}/traits")
        return found["resource_provider_generation"], found["traits"]

    def set_traits(self, uuid: str, generation: int, traits: Iterable[str]) -> int:
        found = self.request(
            "PUT",
            f"/resource_providers/{uuid}/traits",
            {"resource_provider_generation": generation, "traits": sorted(traits)},
        )
        generation_now: int = found["resource_provider_generation"]
        return generation_now

    # -- custom names ----------------------------------------------------------------
    def ensure_resource_class(self, name: str) -> None:
        """Create custom resource class ``name`` unless Placement is known to have it."""
        if self.names.missing([name]):
            self.request("PUT", f"/resource_classes/{name}", expected=(201, 204))
            self.names.add(name)

    def ensure_traits(self, names: Iterable[str]) -> None:
        """Create the custom traits among ``names`` that Placement is not known to have."""
        for name in self.names.missing(n for n in names if n.startswith("CUSTOM_")):
            self.request("PUT", f"/traits/{name}", expected=(201, 204))
            self.names.add(name)


def _query(query: dict[str, str]) -> str:
    return "?" + urlencode(query)


def _error_detail(response: requests.Response) -> tuple[str, str | None]:
    """Placement's API-WG error body: (detail, code); the raw text otherwise."""
    try:
        errors = response.json().get("errors") or []
    except ValueError:
        errors = []
    if errors:
        first = errors[0]
        detail = " ".join(str(first.get("detail", "")).split()) or first.get("title", "")
        return detail, first.get("code")
    return (response.text or "").strip()[:500], None


def make_adapter(conf: cfg.ConfigOpts) -> ksa_adapter.Adapter | None:
    """A keystoneauth Adapter for Placement from ``[placement]``, or None when no
    auth plugin is configured there (then nothing is synced to Placement)."""
    group = "placement"
    if not conf.placement.auth_type:
        return None
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    return ks_loading.load_adapter_from_conf_options(conf, group, session=session, auth=auth)


def use_placement_url(conf: cfg.ConfigOpts, url: str) -> None:
    """Point ``conf`` at the Placement at ``url`` (``exosuit serve --placement-url``).

    Without an auth plugin in ``[placement]``, keystoneauth's ``admin_token`` plugin
    with token ``admin`` is used: what a Placement running with ``[api]
    auth_strategy = noauth2`` takes as an admin. Without an explicit
    ``manage_compute_providers``, standalone mode is chosen (Exosuit creates the
    compute node providers).
    """
    conf.set_override("endpoint_override", url, group="placement")
    if not conf.placement.auth_type:
        conf.set_override("auth_type", "admin_token", group="placement")
        conf.register_opts(
            ks_loading.get_auth_plugin_conf_options("admin_token"), group="placement"
        )
        conf.set_override("endpoint", url, group="placement")
        conf.set_override("token", "admin", group="placement")
    if _from_default(conf, "manage_compute_providers"):
        conf.set_override("manage_compute_providers", True, group="placement")


def _from_default(conf: cfg.ConfigOpts, option: str) -> bool:
    try:
        found = conf.get_location(option, "placement")
    except (AttributeError, cfg.NoSuchOptError):
        return True
    if found is None:  # oslo.config knows no location for it: never set
        return True
    return bool(found.location == cfg.Locations.opt_default)
