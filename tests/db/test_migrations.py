"""Schema migrations: ``exosuit-manage db upgrade|version`` on SQLite, PostgreSQL and
MariaDB, and the migrated schema compared with the SQLAlchemy models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from exosuit.db import migration, models
from exosuit.db.api import Database
from tests.conftest import BACKENDS, require

MANAGE = Path(sys.executable).with_name("exosuit-manage")
HEAD = migration.head_revision()


@pytest.fixture(params=BACKENDS)
def empty_url(request, db_servers, tmp_path) -> str:
    """A new database with nothing in it, on each backend in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fresh/exosuit.sqlite"
    server = db_servers[request.param]
    require(server.engine is not None, server.error or "")
    return server.create()


def manage(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the console script with a config file whose [database] points at ``url``."""
    require(MANAGE.exists(), f"console script {MANAGE} is not installed")
    config = tmp_path / "exosuit.conf"
    config.write_text(f"[database]\nconnection = {url}\n")
    return subprocess.run(
        [str(MANAGE), "db", *args, "--config-file", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def schema(engine: sa.Engine) -> dict:
    """Tables with their columns, indexes, unique and foreign keys, as reflected."""
    inspector = sa.inspect(engine)
    out = {}
    for table in sorted(inspector.get_table_names()):
        out[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
            ],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            "unique": sorted(
                tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
            ),
            "foreign_keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"])
                for f in inspector.get_foreign_keys(table)
            ),
        }
    return out


@pytest.mark.slow  # runs the exosuit-manage console script
def test_upgrade_creates_the_schema_and_again_is_a_no_op(empty_url, tmp_path):
    version = manage(empty_url, tmp_path, "version")
    assert version.returncode == 1, version
    assert "none (empty database)" in version.stdout
    assert f"head: {HEAD}" in version.stdout

    first = manage(empty_url, tmp_path, "upgrade")
    assert first.returncode == 0, first.stderr
    assert f"empty -> {HEAD}" in first.stdout
    assert "Running upgrade" in first.stderr

    engine = sa.create_engine(empty_url)
    try:
        assert set(sa.inspect(engine).get_table_names()) == (
            set(models.Base.metadata.tables) | {"alembic_version"}
        )
        with engine.begin() as conn:
            conn.execute(
                sa.insert(models.device_profiles).values(
                    uuid="00000000-0000-0000-0000-000000000001",
                    name="kept",
                    profile_json="{}",
                    created_at=models.utcnow(),
                )
            )
        before = schema(engine)

        again = manage(empty_url, tmp_path, "upgrade")
        assert again.returncode == 0, again.stderr
        assert f"{HEAD} -> {HEAD}" in again.stdout
        assert "Running upgrade" not in again.stderr
        engine.dispose()
        assert schema(engine) == before
        with engine.connect() as conn:
            names = conn.execute(sa.select(models.device_profiles.c.name)).scalars().all()
        assert names == ["kept"]
    finally:
        engine.dispose()

    version = manage(empty_url, tmp_path, "version")
    assert version.returncode == 0, version
    assert f"current: {HEAD}" in version.stdout


def test_migrated_schema_matches_the_models(empty_url):
    db = Database(empty_url)
    try:
        migration.upgrade(db)
        with db.engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            assert compare_metadata(context, models.Base.metadata) == []

            # The comparison does see a difference when there is one.
            drifted = sa.MetaData()
            for table in models.Base.metadata.sorted_tables:
                table.to_metadata(drifted)
            drifted.tables["attach_handles"].append_column(sa.Column("extra", sa.Integer))
            drifted.tables["devices"].c.vendor.type = sa.String(100)
            diffs = compare_metadata(context, drifted)
        kinds = sorted(d[0] if isinstance(d, tuple) else d[0][0] for d in diffs)
        assert kinds == ["add_column", "modify_type"], diffs
    finally:
        db.dispose()


def test_upgrade_from_the_first_revision_keeps_the_rows(empty_url):
    """0002 adds attach_handles.presence: existing handles become present."""
    db = Database(empty_url)
    try:
        migration.upgrade(db, "0001")
        assert migration.current_revision(db) == "0001"
        old = sa.MetaData()
        old.reflect(db.engine)
        now = models.utcnow()
        with db.engine.begin() as conn:
            device = conn.execute(
                sa.insert(old.tables["devices"]).values(
                    uuid="d" * 8,
                    type="FPGA",
                    vendor="v",
                    model="m",
                    hostname="h",
                    identity="i",
                    status="enabled",
                    presence="present",
                    created_at=now,
                )
            ).inserted_primary_key[0]
            deployable = conn.execute(
                sa.insert(old.tables["deployables"]).values(
                    uuid="p" * 8, name="n", num_accelerators=1, device_id=device, created_at=now
                )
            ).inserted_primary_key[0]
            conn.execute(
                sa.insert(old.tables["attach_handles"]),
                [
                    {
                        "uuid": f"h{i}",
                        "deployable_id": deployable,
                        "in_use": i == 0,
                        "attach_type": "PCI",
                        "attach_info": "{}",
                        "created_at": now,
                    }
                    for i in range(2)
                ],
            )

        migration.upgrade(db)
        assert migration.current_revision(db) == HEAD
        ah = models.attach_handles
        with db.engine.connect() as conn:
            handles = conn.execute(
                sa.select(ah.c.uuid, ah.c.in_use, ah.c.presence).order_by(ah.c.uuid)
            ).all()
        assert [tuple(h) for h in handles] == [("h0", True, "present"), ("h1", False, "present")]
    finally:
        db.dispose()


def test_0006_marks_existing_devices_ready_and_downgrades(empty_url):
    """0006 adds devices.activation: devices known before were offered, so they are ready;
    its downgrade drops what it added and 0006 applies again."""
    from alembic import command

    db = Database(empty_url)
    try:
        migration.upgrade(db, "0005")
        old = sa.MetaData()
        old.reflect(db.engine)
        with db.engine.begin() as conn:
            conn.execute(
                sa.insert(old.tables["devices"]).values(
                    uuid="d" * 8,
                    type="GPU",
                    vendor="v",
                    model="m",
                    hostname="h",
                    identity="i",
                    status="enabled",
                    presence="present",
                    created_at=models.utcnow(),
                )
            )
        migration.upgrade(db)
        with db.engine.connect() as conn:
            row = conn.execute(
                sa.select(models.devices.c.activation, models.devices.c.activation_reason)
            ).one()
        assert tuple(row) == ("ready", None)

        with db.engine.begin() as conn:
            command.downgrade(migration._config(conn), "0005")
        assert migration.current_revision(db) == "0005"
        tables = set(sa.inspect(db.engine).get_table_names())
        assert not tables & {"device_services", "host_drivers", "discoveries", "discovery_hosts"}
        columns = {c["name"] for c in sa.inspect(db.engine).get_columns("devices")}
        assert "activation" not in columns
        migration.upgrade(db)
        assert migration.current_revision(db) == HEAD
    finally:
        db.dispose()
