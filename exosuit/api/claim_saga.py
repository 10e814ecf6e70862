"""The claim saga: a standalone claim made in the database, then allocated in Placement.

``make`` binds the claim's devices in one transaction (exosuit/db/claims.py ``create``;
the images a profile group asks for are looked up first, outside it, when one does),
then, with Placement configured, PUTs its allocation (exosuit/placement/claim_allocations.py). Each
step that fails is undone: a refusal (Nova's allocations took the capacity meanwhile)
gives the handles back and tries again without the providers refused, at most
``MAX_PLACEMENT_REFUSALS`` times; Placement not answering gives everything back (503).
The handler (exosuit/api/handlers/claims.py ``create_claim``) only wires it.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from exosuit import exceptions
from exosuit.api import programs, wsgi
from exosuit.db import arqs as arqs_db
from exosuit.db import claims as db
from exosuit.placement import claim_allocations as placement

__all__ = ["MAX_PLACEMENT_REFUSALS", "dry_run", "make"]

# Placement refusals (its capacity taken by Nova meanwhile) one POST works around at most.
MAX_PLACEMENT_REFUSALS = 8


def _options(req: wsgi.Request) -> dict[str, Any]:
    """What the configuration says of every claim: units per group, ARQs at most, and
    how old a host's last report may be for its devices to be chosen."""
    conf = req.app.conf
    return {
        "handles_per_unit": {
            k: int(v) for k, v in conf.accelerator_requests.attach_handles_per_unit.items()
        },
        "max_arqs": conf.api.max_arqs_per_request,
        "stale_after": float(conf.api.stale_report_after),
    }


def dry_run(req: wsgi.Request, request: db.ClaimRequest) -> db.DryRun:
    """What the claim would take now and why not the rest, writing nothing (not even an
    audit record): a read transaction."""
    found: db.DryRun = req.app.db.read(db.dry_run, request, **_options(req))
    return found


def _bind(req: wsgi.Request, request: db.ClaimRequest, **options: Any) -> db.Created:
    """Make the claim in the database; the images a profile group asks for are looked up
    only when one does (outside the transaction: Glance is an HTTP call)."""
    options.update(skip_locked=req.app.db.supports_skip_locked, **_options(req))
    created: db.Created
    try:
        created = req.app.db.write(db.create, request, **options)
        return created
    except arqs_db.ProgramsToResolve:
        assert request.profile_name is not None
        groups = req.app.db.read(db.program_groups, request.profile_name)
        # NOTE: the same resolution as a bind's (exosuit/api/programs.py), by group here.
        needs = {i: programs.group_need(req, request.project_id, g) for i, g in groups.items()}
        created = req.app.db.write(db.create, request, programs=needs, **options)
        return created


def make(req: wsgi.Request, request: db.ClaimRequest) -> db.Created:
    """The claim, made in the database and then, with Placement configured, allocated
    there: a refusal gives the handles back and tries other providers; Placement not
    answering gives everything back (503)."""
    allocator = placement.allocator(req.app.conf)
    uuid = str(uuidlib.uuid4())
    refused: list[str] = []
    exclude: set[str] = set()
    while True:
        try:
            created = _bind(
                req, request, uuid=uuid, exclude=exclude, placement=allocator is not None
            )
        except exceptions.ClaimUnsatisfiable as error:
            if not refused:
                raise
            raise exceptions.ClaimUnsatisfiable(
                reason=f"Placement refused {'; '.join(refused)}; then {error.kwargs['reason']}"
            ) from None
        if allocator is None or not created.created:
            return created
        try:
            allocator.allocate(created.claim, req.app.db.read(db.allocation, created.claim))
            return created
        except placement.Refused as refusal:
            req.app.db.write(db.abandon, uuid, allocation_unknown=False)
            refused.append(f"{', '.join(sorted(refusal.rps))} ({refusal.detail})")
            exclude |= refusal.rps
        except exceptions.PlacementUnavailable as error:
            req.app.db.write(db.abandon, uuid, allocation_unknown=True)
            raise wsgi.ApiError(
                503,
                f"The claim could not be allocated in Placement (nothing is held): {error}",
                error.code,
                headers=[("Retry-After", "2")],
            ) from None
        if len(refused) >= MAX_PLACEMENT_REFUSALS:
            raise exceptions.ClaimUnsatisfiable(reason=f"Placement refused {'; '.join(refused)}")
