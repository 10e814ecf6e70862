"""The unpaged deployable list (one joined query) equals the paged one (two queries)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from exosuit.db import deployables, inventory, models
from exosuit.db.pagination import Page
from tests.helpers.inventory import fpga, snapshot


def test_unpaged_and_paged_lists_agree(database):
    devices = [fpga(f"0000:{0x20 + i:02x}:00.0", handles=2) for i in range(4)]
    database.write(inventory.apply_snapshot, "h1", snapshot("h1", devices))
    ids = database.read(
        lambda conn: [
            r.id
            for r in conn.execute(
                sa.select(models.deployables.c.id).order_by(models.deployables.c.id)
            )
        ]
    )
    assert len(ids) == 4
    attr = models.attributes

    def _reshape(conn):
        # One deployable without attributes, one with several (in insertion order).
        conn.execute(sa.delete(attr).where(attr.c.deployable_id == ids[0]))
        for n in range(3):
            conn.execute(
                sa.insert(attr).values(
                    uuid=str(uuid.uuid4()),
                    deployable_id=ids[1],
                    key=f"extra{n}",
                    value=f"v{n}",
                    source="api",
                    created_at=models.utcnow(),
                )
            )

    database.write(_reshape)
    unpaged = database.read(deployables.list_deployables)
    paged = database.read(deployables.list_deployables, page=Page(limit=1000))
    assert unpaged == paged
    by_id = {d["id"]: d for d in unpaged}
    assert by_id[ids[0]]["attributes"] == []
    assert [next(iter(a)) for a in by_id[ids[1]]["attributes"]][-3:] == [
        "extra0",
        "extra1",
        "extra2",
    ]
    assert all(d["attributes"] for d in unpaged if d["id"] != ids[0])
