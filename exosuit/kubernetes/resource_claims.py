"""The devices a ResourceClaim was allocated, read from the Kubernetes API.

The kubelet names a claim (namespace, name, uid); the scheduler wrote what it chose in
``status.allocation.devices.results[]`` (request, driver, pool, device). Only the
results of our driver count; the uid must still be the claim's (a claim deleted and
created again under the same name is another claim).
"""

from __future__ import annotations

from dataclasses import dataclass

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from exosuit.kubernetes.slices import DRIVER

__all__ = ["Allocated", "ClaimUnavailable", "allocated_devices"]


@dataclass(frozen=True)
class Allocated:
    """One device the scheduler allocated to the claim from our driver's pools."""

    request: str
    pool: str
    device: str
    admin_access: bool = False


class ClaimUnavailable(Exception):
    """The claim cannot be read, is not the one named, or is not allocated."""


def allocated_devices(
    api: client.ResourceV1Api, namespace: str, name: str, uid: str
) -> list[Allocated]:
    """Our driver's devices of the ResourceClaim ``namespace/name`` whose uid is ``uid``
    (none when the allocation holds only other drivers' devices)."""
    what = f"ResourceClaim {namespace}/{name}"
    try:
        claim = api.read_namespaced_resource_claim(name, namespace)
    except ApiException as error:
        if error.status == 404:
            raise ClaimUnavailable(f"{what} not found") from error
        raise ClaimUnavailable(f"reading {what}: {error.status} {error.reason}") from error
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
        raise ClaimUnavailable(f"reading {what}: {error}") from error
    found_uid = claim.metadata.uid if claim.metadata else None
    if found_uid != uid:
        raise ClaimUnavailable(
            f"{what} has uid {found_uid}, not {uid}: it was deleted (and made again)"
        )
    allocation = claim.status.allocation if claim.status else None
    if allocation is None or allocation.devices is None:
        raise ClaimUnavailable(f"{what} is not allocated")
    return [
        Allocated(r.request, r.pool, r.device, bool(r.admin_access))
        for r in allocation.devices.results or ()
        if r.driver == DRIVER
    ]
