"""exosuit.db.images on SQLite, PostgreSQL and MariaDB: who sees which image, paging,
the one-time activation, members, and an image a program uses."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import images as db
from exosuit.db import models
from exosuit.db.pagination import Page

P1, P2, P3 = "p1" + "0" * 30, "p2" + "0" * 30, "p3" + "0" * 30
ADMIN = db.Viewer("admin-project", is_admin=True)
SHA = "ab" * 32


def _create(database, name: str, owner: str = P1, **kw) -> dict:
    return database.write(db.create, name=name, format="gbs", owner=owner, **kw)


def _names(rows) -> list[str]:
    return [r["name"] for r in rows]


def test_create_is_queued_and_get_finds_it(database):
    image = _create(database, "a", sha256=SHA.upper(), vendor="0x8086", function_id="f1")
    assert image["status"] == db.QUEUED and image["size"] is None
    assert image["sha256"] == SHA  # stored in lower case
    assert image["visibility"] == "private" and image["owner"] == P1
    found = database.read(db.get, image["uuid"].upper(), viewer=db.Viewer(P1))
    assert found["uuid"] == image["uuid"] and found["vendor"] == "0x8086"


def test_unknown_visibility_is_invalid(database):
    with pytest.raises(exceptions.Invalid, match="visibility must be one of"):
        _create(database, "a", visibility="everyone")


def test_visibility_rules(database):
    private = _create(database, "private")
    public = _create(database, "public", visibility="public")
    shared = _create(database, "shared", visibility="shared")
    unshared = _create(database, "unshared", visibility="shared")
    database.write(db.add_member, shared["uuid"], P2, viewer=db.Viewer(P1))

    def seen(viewer: db.Viewer) -> set[str]:
        rows = database.read(db.list_images, viewer=viewer, page=Page(limit=50))
        return set(_names(rows))

    assert seen(db.Viewer(P1)) == {"private", "public", "shared", "unshared"}
    assert seen(db.Viewer(P2)) == {"public", "shared"}
    assert seen(db.Viewer(P3)) == {"public"}
    assert seen(db.Viewer(None)) == {"public"}
    assert seen(ADMIN) == {"private", "public", "shared", "unshared"}
    for image, viewer in ((private, P2), (unshared, P2), (shared, P3)):
        with pytest.raises(exceptions.ImageNotFound):
            database.read(db.get, image["uuid"], viewer=db.Viewer(viewer))
    assert database.read(db.get, public["uuid"], viewer=db.Viewer(P3))["name"] == "public"
    assert database.read(db.get_any, private["uuid"])["name"] == "private"


def test_filters_are_exact_on_every_database(database):
    _create(database, "FPGA", vendor="0x8086", function_id="F1")
    _create(database, "fpga", vendor="0x10ee", function_id="f1")
    viewer = db.Viewer(P1)
    assert _names(database.read(db.list_images, viewer=viewer, filters={"name": "fpga"})) == [
        "fpga"
    ]
    rows = database.read(db.list_images, viewer=viewer, filters={"function_id": "F1"})
    assert _names(rows) == ["FPGA"]
    with pytest.raises(exceptions.Invalid, match="cannot be filtered by owner"):
        database.read(db.list_images, viewer=viewer, filters={"owner": P1})


def test_pages_follow_the_marker(database):
    for name in ("c", "a", "d", "b"):
        _create(database, name)
    viewer, seen, marker = db.Viewer(P1), [], None
    while True:
        page = Page(limit=2, sort_key="name", sort_dir="asc", marker=marker)
        rows = database.read(db.list_images, viewer=viewer, page=page)
        seen += _names(rows[:2])
        if len(rows) <= 2:
            break
        marker = rows[1]["uuid"]
    assert seen == ["a", "b", "c", "d"]
    newest = database.read(db.list_images, viewer=viewer, page=Page(limit=1))
    assert _names(newest) == ["b", "d"]  # newest first, one more than the limit


def test_activate_once(database):
    image = _create(database, "a")
    active = database.write(db.activate, image["uuid"], size=10, sha256=SHA)
    assert (active["status"], active["size"], active["sha256"]) == (db.ACTIVE, 10, SHA)
    with pytest.raises(exceptions.ImageHasData):
        database.write(db.activate, image["uuid"], size=10, sha256=SHA)
    with pytest.raises(exceptions.ImageNotFound):
        database.write(db.activate, str(uuid.uuid4()), size=10, sha256=SHA)


def test_activate_refuses_another_hash_than_the_one_given(database):
    image = _create(database, "a", sha256=SHA)
    with pytest.raises(exceptions.Invalid, match=f"must have SHA-256 {SHA}"):
        database.write(db.activate, image["uuid"], size=10, sha256="cd" * 32)
    assert database.read(db.get_any, image["uuid"])["status"] == db.QUEUED


def test_concurrent_activations_have_one_winner(database):
    image = _create(database, "a")
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def activate(n: int) -> None:
        barrier.wait(timeout=60)
        try:
            database.write(db.activate, image["uuid"], size=n, sha256=f"{n:064x}")
            outcomes.append("won")
        except exceptions.ImageHasData:
            outcomes.append("has data")

    threads = [threading.Thread(target=activate, args=(n,)) for n in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(outcomes) == ["has data"] * 5 + ["won"]


def test_find_by_function_sees_only_active_visible_images(database):
    queued = _create(database, "queued", function_id="f1")
    mine = _create(database, "mine", function_id="f1")
    theirs = _create(database, "theirs", owner=P2, function_id="f1")
    for image in (mine, theirs):
        database.write(db.activate, image["uuid"], size=1, sha256=SHA)
    assert queued["status"] == db.QUEUED
    found = database.read(db.find_by_function, "f1", viewer=db.Viewer(P1))
    assert _names(found) == ["mine"]
    assert _names(database.read(db.find_by_function, "f1", viewer=ADMIN)) == ["mine", "theirs"]
    assert database.read(db.find_by_function, "F1", viewer=ADMIN) == []


def _program(database, image_uuid: str, state: str, column: str = "image_uuid") -> str:
    program = str(uuid.uuid4())
    values = {
        "uuid": program,
        "hostname": "host1",
        "image_uuid": str(uuid.uuid4()),
        "image_source": "exosuit",
        "state": state,
        "created_at": models.utcnow(),
        column: image_uuid,
    }
    database.write(lambda conn: conn.execute(sa.insert(models.programs).values(**values)))
    return program


def test_delete_refuses_an_image_a_program_uses(database):
    image = _create(database, "a", visibility="shared")
    database.write(db.add_member, image["uuid"], P2, viewer=db.Viewer(P1))
    _program(database, image["uuid"], "done")
    _program(database, image["uuid"], "failed")
    running = _program(database, image["uuid"], "fetching")
    with pytest.raises(exceptions.ImageInUse, match=running):
        database.write(db.delete, image["uuid"], viewer=db.Viewer(P1))
    database.write(
        lambda conn: conn.execute(
            sa.update(models.programs).where(models.programs.c.uuid == running).values(state="done")
        )
    )
    restoring = _program(database, image["uuid"], "programming", column="previous_image_uuid")
    assert database.read(db.program_using, image["uuid"]) == restoring
    gone = sa.delete(models.programs).where(models.programs.c.uuid == restoring)
    database.write(lambda conn: conn.execute(gone))
    deleted = database.write(db.delete, image["uuid"], viewer=db.Viewer(P1))
    assert deleted["uuid"] == image["uuid"]
    with pytest.raises(exceptions.ImageNotFound):
        database.read(db.get_any, image["uuid"])
    count = database.read(
        lambda conn: conn.execute(sa.select(sa.func.count()).select_from(models.image_members))
    ).scalar()
    assert count == 0


def test_members(database):
    image = _create(database, "a", visibility="shared")
    owner = db.Viewer(P1)
    first = database.write(db.add_member, image["uuid"], P2, viewer=owner)
    again = database.write(db.add_member, image["uuid"], P2, viewer=owner)
    assert first == again and first["project_id"] == P2 and first["image_uuid"] == image["uuid"]
    database.write(db.add_member, image["uuid"], P3, viewer=owner)
    members = database.read(db.list_members, image["uuid"], viewer=owner)
    assert [m["project_id"] for m in members] == [P2, P3]
    database.write(db.remove_member, image["uuid"], P2, viewer=owner)
    with pytest.raises(exceptions.NotFound, match=f"Project {P2} is not a member"):
        database.write(db.remove_member, image["uuid"], P2, viewer=owner)
    private = _create(database, "b")
    with pytest.raises(exceptions.Invalid, match="only a shared image has members"):
        database.write(db.add_member, private["uuid"], P2, viewer=owner)
