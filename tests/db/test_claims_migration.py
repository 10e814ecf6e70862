"""Migration 0007 (claims) on SQLite, PostgreSQL and MariaDB: an ARQ of before keeps its
profile and its handle; a downgrade releases every claim (its handles freed, its ARQs
deleted, ARQs of other holders kept) and 0007 applies again."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from exosuit.db import claims as claims_db
from exosuit.db import migration, models
from exosuit.db.api import Database
from tests.conftest import require
from tests.helpers.inventory import fpga, snapshot

HOST = "migration-host"


@pytest.fixture
def empty_url(database, db_servers, tmp_path) -> str:
    """A new database with nothing in it, on the backend of ``database``."""
    backend = database.dialect
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/fresh/exosuit.sqlite"
    server = db_servers["postgresql" if backend == "postgresql" else "mariadb"]
    require(server.engine is not None, server.error or "")
    return server.create()


def test_0007_up_and_down(empty_url):
    from exosuit.db import arqs, device_profiles, inventory

    db = Database(empty_url)
    try:
        migration.upgrade(db)
        db.write(inventory.apply_snapshot, HOST, snapshot(HOST, [fpga("0000:5e:00.0", handles=3)]))
        db.write(device_profiles.create, name="p", groups=[{"resources:FPGA": "1"}])
        (arq,) = db.write(arqs.create, profile_name="p", project_id="p", handles_per_unit={})
        rp = db.read(lambda c: c.execute(sa.select(models.deployables.c.rp_uuid)).scalar())
        binding = arqs.Binding(arq["uuid"], HOST, rp, "1" * 8 + "-1111-4111-8111-" + "1" * 12)
        db.write(arqs.bind, [binding], arqs.Scope(None), skip_locked=db.supports_skip_locked)
        by_profile = claims_db.ClaimRequest(project_id="p", profile_name="p")
        db.write(claims_db.create, by_profile, skip_locked=db.supports_skip_locked)
        handles = db.read(
            lambda c: list(
                c.execute(
                    sa.select(models.attach_handles.c.uuid).where(
                        models.attach_handles.c.in_use.is_(False)
                    )
                ).scalars()
            )
        )
        named = claims_db.ClaimRequest(project_id="p", handles=tuple(handles))
        db.write(claims_db.create, named, skip_locked=db.supports_skip_locked)

        def held(conn) -> int:
            ah = models.attach_handles
            return int(
                conn.execute(sa.select(sa.func.count()).where(ah.c.in_use.is_(True))).scalar()
            )

        assert db.read(held) == 3
        with db.engine.begin() as conn:
            command.downgrade(migration._config(conn), "0006")
        assert migration.current_revision(db) == "0006"
        assert "claims" not in sa.inspect(db.engine).get_table_names()
        columns = {c["name"]: c for c in sa.inspect(db.engine).get_columns("accelerator_requests")}
        assert "claim_id" not in columns and columns["device_profile_id"]["nullable"] is False
        with db.engine.connect() as conn:
            ah = models.attach_handles
            assert (
                conn.execute(sa.select(sa.func.count()).where(ah.c.in_use.is_(True))).scalar() == 1
            )
            old = sa.MetaData()
            old.reflect(conn)
            arq_table = old.tables["accelerator_requests"]
            left = conn.execute(sa.select(arq_table.c.uuid, arq_table.c.state)).all()
        assert [tuple(r) for r in left] == [(arq["uuid"], "Bound")]  # Nova's ARQ stays
        migration.upgrade(db)
        assert migration.current_revision(db) == migration.head_revision()
        assert db.read(held) == 1
    finally:
        db.dispose()
