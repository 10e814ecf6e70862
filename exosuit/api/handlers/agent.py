"""/agent/v1: agents put their host's inventory snapshot and get its desired state."""

from __future__ import annotations

import random

from exosuit import schemas
from exosuit.api import wsgi
from exosuit.api.policies import agent as policies
from exosuit.db import inventory as db


def put_inventory(req: wsgi.Request):
    """200 ``{"hostname", "hash", "changed", "desired_state"}``.

    The snapshot is complete (every device of the host); its difference from
    the database is applied in one transaction. When its hash equals the last
    one applied, nothing is written (and the body is not even validated). A
    body with only ``schema_version`` and ``hash`` asks whether the API has
    that snapshot: 200 if so, 412 if not (send it whole). A snapshot that
    breaks the schema (or whose hash does not match its content) gets a 400
    and nothing is written. While ``[api] inventory_concurrency`` snapshots are
    being applied by this process, another changed one waits up to ``[api]
    inventory_wait`` seconds for its turn, then gets 429 + Retry-After.
    """
    req.app.authorize(req, policies.REPORT)
    hostname = req.arg("hostname")
    body = wsgi.extract_json(req)
    if (not isinstance(body, dict) or not isinstance(body.get("hash"), str)
            or body.get("schema_version") != 1):
        wsgi.validate(body, schemas.inventory_schema())  # names what is wrong
    if body.get("hostname", hostname) != hostname:
        raise wsgi.ApiError(
            400,
            f"The snapshot is for host {body['hostname']!r} but was sent for "
            f"{hostname!r}: a host has one name everywhere.",
            "exosuit.inventory.hostname",
        )
    known = req.app.db.read(db.host_hash, hostname) == body["hash"]
    if known:
        changed = False
    elif "devices" not in body:
        raise wsgi.ApiError(412, f"The API does not have snapshot {body['hash']} of host "
                            f"{hostname}: send the whole snapshot.", "exosuit.inventory.unknown")
    else:
        # Wait for a slot before the costly part (validation, hashing, the write), and
        # only so long: a boot storm queues here briefly instead of piling up on the
        # database, and what cannot be served soon is told when to come back.
        if not req.app.inventory_slots.acquire(timeout=req.app.conf.api.inventory_wait):
            raise wsgi.ApiError(
                429, "The API is applying other hosts' inventories; retry later.",
                "exosuit.inventory.busy",
                headers=[("Retry-After", str(random.randint(1, 3)))],
            )
        try:
            wsgi.validate(body, schemas.inventory_schema())
            expected = schemas.snapshot_hash(body["devices"], body.get("driver_errors", []))
            if expected != body["hash"]:
                raise wsgi.ApiError(400, f"The snapshot's hash {body['hash']} does not match "
                                    f"its content ({expected}).", "exosuit.inventory.hash")
            changed = req.app.db.write(db.apply_snapshot, hostname, body).changed
        finally:
            req.app.inventory_slots.release()
    return wsgi.json_response(200, {
        "hostname": hostname,
        "hash": body["hash"],
        "changed": changed,
        "desired_state": {},
    })
