"""The plugin's side of Exosuit's API: the node's inventory and its claims.

A keystoneauth1 session (no auth, or Keystone: ``exosuit-kubelet-plugin`` builds it as
the ``exosuit`` command line does) and the API's root URL. Each call names its
microversion: the inventory at 2.7 (devices' activation, services and usage), its
devices at 2.10 where the API has it (their labels, published as attributes), else 2.9
(their health: one held back is not published), claims at 2.8. Errors are
``ExosuitError`` with the API's status, code and message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from keystoneauth1 import exceptions as ksa_exceptions

from exosuit.kubernetes.slices import Inventory

__all__ = [
    "CLAIMS_VERSION",
    "HEALTH_VERSION",
    "INVENTORY_VERSION",
    "LABELS_VERSION",
    "ExosuitApi",
    "ExosuitError",
    "consumer_of",
]

SERVICE_TYPE = "accelerator"
INVENTORY_VERSION = "2.7"
# Devices with their health (offered or held back); an older API answers 406.
HEALTH_VERSION = "2.9"
# Devices with their labels and topology (pcie_root) too (published as attributes,
# exosuit/kubernetes/slices.py).
LABELS_VERSION = "2.10"
CLAIMS_VERSION = "2.8"
TIMEOUT = 30.0
LIVE_STATES = ("pending", "bound", "failed")  # claims not released
KUBERNETES_CONSUMER = "k8s:"


def consumer_of(namespace: str, name: str, uid: str) -> str:
    """The consumer of the Exosuit claim that holds a ResourceClaim's devices."""
    return f"{KUBERNETES_CONSUMER}{namespace}/{name}/{uid}"


class ExosuitError(Exception):
    """The API answered an error (``status`` > 0), or nothing answered (``status`` 0)."""

    def __init__(self, message: str, status: int = 0, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def _fault(response: Any) -> tuple[str, str | None]:
    """Message and code of Cyborg's error envelope, else the body's text."""
    try:
        body = response.json()
        fault = body["error_message"]
        if isinstance(fault, str):
            fault = json.loads(fault)
        return str(fault.get("faultstring") or response.reason), fault.get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{response.reason}: {response.text[:200]}", None


class ExosuitApi:
    """Exosuit's API at ``url`` (with or without ``/v2``) through ``session``."""

    def __init__(self, session: Any, url: str, timeout: float = TIMEOUT) -> None:
        self.session = session
        root = url.rstrip("/")
        self.url = root[: -len("/v2")] if root.endswith("/v2") else root
        self.timeout = timeout

    def _request(
        self,
        method: str,
        path: str,
        version: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        url = path if path.startswith(("http://", "https://")) else self.url + path
        kwargs: dict[str, Any] = {"params": params} if params else {}
        if body is not None:
            kwargs["json"] = body
        try:
            response = self.session.request(
                url,
                method,
                raise_exc=False,
                microversion=version,
                microversion_service_type=SERVICE_TYPE,
                headers={"Accept": "application/json"},
                timeout=self.timeout,
                **kwargs,
            )
        except ksa_exceptions.ClientException as error:
            raise ExosuitError(f"{method} {url}: {error}") from error
        if response.status_code >= 400:
            message, code = _fault(response)
            raise ExosuitError(
                f"{method} {path}: {message} (HTTP {response.status_code})",
                response.status_code,
                code,
            )
        return response.json() if response.content else None

    def _list(
        self, path: str, key: str, version: str, params: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list, following its ``next`` links."""
        body = self._request("GET", path, version, params=params)
        while True:
            yield from body.get(key) or ()
            following = body.get("next")
            if not following:
                return
            body = self._request("GET", following, version)

    # -- inventory ---------------------------------------------------------------------

    def inventory(self, hostname: str, node: str) -> Inventory:
        """The devices and attach handles of ``hostname``, and which of its handles
        claims of Kubernetes consumers hold, as the ResourceSlices of ``node`` need."""
        devices = self._devices(hostname)
        handles = list(
            self._list(
                "/v2/attach_handles", "attach_handles", INVENTORY_VERSION, {"hostname": hostname}
            )
        )
        try:
            claims = self.claims(hostname=hostname)
        except ExosuitError as error:
            if error.status not in (404, 406):
                raise
            claims = []  # an API older than 2.8 has no claims: nothing held for containers
        held = {
            device["attach_handle_uuid"]
            for claim in claims
            if str(claim.get("consumer") or "").startswith(KUBERNETES_CONSUMER)
            and claim.get("state") in ("pending", "bound")
            for device in claim.get("devices") or ()
            if device.get("attach_handle_uuid")
        }
        return Inventory(node, devices, handles, frozenset(held))

    def _devices(self, hostname: str) -> list[dict[str, Any]]:
        """The host's devices at the newest microversion the API has of LABELS_VERSION
        (labels, topology), HEALTH_VERSION (health) and INVENTORY_VERSION: an older API answers
        406 to a newer one."""
        versions = (LABELS_VERSION, HEALTH_VERSION, INVENTORY_VERSION)
        for version in versions[:-1]:
            try:
                return list(self._list("/v2/devices", "devices", version, {"hostname": hostname}))
            except ExosuitError as error:
                if error.status != 406:
                    raise
        return list(self._list("/v2/devices", "devices", versions[-1], {"hostname": hostname}))

    # -- claims ------------------------------------------------------------------------

    def claims(self, **filters: str) -> list[dict[str, Any]]:
        """Claims that are not released, matching ``filters`` (hostname, consumer)."""
        return [
            claim
            for claim in self._list("/v2/claims", "claims", CLAIMS_VERSION, dict(filters))
            if claim.get("state") in LIVE_STATES
        ]

    def create_claim(
        self, attach_handles: list[str], hostname: str, consumer: str
    ) -> dict[str, Any]:
        """``POST /v2/claims`` for exactly these handles, for containers."""
        body = {
            "attach_handles": attach_handles,
            "hostname": hostname,
            "consumer": consumer,
            "container": True,
        }
        claim: dict[str, Any] = self._request("POST", "/v2/claims", CLAIMS_VERSION, body=body)
        return claim

    def get_claim(self, uuid: str) -> dict[str, Any]:
        claim: dict[str, Any] = self._request("GET", f"/v2/claims/{uuid}", CLAIMS_VERSION)
        return claim

    def release_claim(self, uuid: str) -> None:
        """``DELETE /v2/claims/{uuid}``; a claim Exosuit does not know is released."""
        try:
            self._request("DELETE", f"/v2/claims/{uuid}", CLAIMS_VERSION)
        except ExosuitError as error:
            if error.status != 404:
                raise
