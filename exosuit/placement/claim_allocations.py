"""Standalone claims in Placement (doc/standalone.md): the allocation each claim makes, and
the job that deletes it once the claim is released.

When the API is configured with Placement (``[placement]`` has an auth plugin; ``exosuit
serve --placement-url``), a claim is allocated there too, so that Nova's scheduler and
claims never hand out the same device: the API binds in the database first (the handles
held), then PUTs the allocation (consumer: the claim's uuid; ``consumer_generation``
null: a new consumer; the claim's project and user), one unit of the deployable's
resource class per device, on its resource provider. Placement refusing it for
capacity (Nova's allocations took the provider meanwhile) is ``Refused``, naming the
providers: the API gives the handles back and tries other candidates. Placement not
answering is ``PlacementUnavailable``: the API gives everything back and answers 503.

A released claim's allocation is deleted by a ``placement_claim_release`` job (queued by
exosuit/db/claims.py in the release's transaction), retried with backoff while
Placement is away; an allocation already gone is success.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from keystoneauth1 import adapter as ksa_adapter

from exosuit import exceptions
from exosuit.db import claims as claims_db
from exosuit.jobs import JobContext, JobKind, RetryLater
from exosuit.placement import client as placement_client

__all__ = ["ALLOCATION_MICROVERSION", "JOB_KINDS", "Allocator", "Refused", "allocator"]

LOG = logging.getLogger(__name__)

# 1.28: consumer_generation (null: the consumer must be new); project and user required.
ALLOCATION_MICROVERSION = "1.28"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Refused(Exception):  # noqa: N818 - an answer the caller acts on, not a fault
    """Placement refused the allocation (capacity, a provider or inventory it lacks):
    ``rps`` are the providers it named (all of the allocation's if it named none)."""

    def __init__(self, detail: str, rps: frozenset[str]) -> None:
        super().__init__(detail)
        self.detail = detail
        self.rps = rps


class Allocator:
    """The claims' allocations in one Placement (one per API process, shared by its
    threads: a keystoneauth adapter is)."""

    def __init__(self, adapter: ksa_adapter.Adapter) -> None:
        self.adapter = adapter
        self.names = placement_client.NameCache()

    def client(self) -> placement_client.PlacementClient:
        return placement_client.PlacementClient(self.adapter, names=self.names)

    def allocate(
        self, claim: Mapping[str, Any], resources: Mapping[str, Mapping[str, int]]
    ) -> None:
        """PUT the claim's allocation (``resources``: provider → class → units). Raises
        Refused, or PlacementUnavailable (the outcome is unknown)."""
        if not resources:
            return
        body = {
            "allocations": {rp: {"resources": dict(rcs)} for rp, rcs in resources.items()},
            "project_id": claim["project_id"] or "exosuit",
            "user_id": claim["user_id"] or claim["project_id"] or "exosuit",
            "consumer_generation": None,
        }
        try:
            self.client().request(
                "PUT",
                f"/allocations/{claim['uuid']}",
                body,
                expected=(204,),
                microversion=ALLOCATION_MICROVERSION,
            )
        except exceptions.PlacementUnavailable:
            raise
        except exceptions.PlacementError as error:
            detail = str(error.kwargs.get("detail") or error.message)
            named = frozenset(_UUID.findall(detail.lower())) & set(resources)
            raise Refused(detail, named or frozenset(resources)) from error


# By id of the configuration (ConfigOpts is not hashable), forgotten with it.
_ALLOCATORS: dict[int, Allocator | None] = {}
_LOCK = threading.Lock()


def allocator(conf: Any) -> Allocator | None:
    """The claims' Placement of ``conf`` (made once per configuration), or None when
    ``[placement]`` configures none (claims are then in the database only)."""
    key = id(conf)
    with _LOCK:
        if key not in _ALLOCATORS:
            adapter = placement_client.make_adapter(conf)
            _ALLOCATORS[key] = None if adapter is None else Allocator(adapter)
            weakref.finalize(conf, _ALLOCATORS.pop, key, None)
        return _ALLOCATORS[key]


def _release(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Delete a released claim's allocation (idempotent). Without Placement configured
    in this conductor, nothing to do."""
    service = ctx.services.get("placement")
    if service is None:
        LOG.info("claim %s released: no Placement configured here", payload["consumer"])
        return
    try:
        service.client().request(
            "DELETE", f"/allocations/{payload['consumer']}", expected=(204, 404)
        )
    except exceptions.PlacementUnavailable as error:
        # NOTE: waited out like a sync's (not an attempt): an outage longer than the
        # attempts' backoff must not leave the allocation behind for good.
        raise RetryLater(
            f"release of claim {payload['consumer']}: {error}", ctx.conf.placement.retry_interval
        ) from error


JOB_KINDS = (JobKind(claims_db.RELEASE_ALLOCATION, _release),)
