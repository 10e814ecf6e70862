"""The programs table and the deployable's running program (exosuit/db/programs.py), on
every backend: starting (refusals, idempotency), the agent's reports (monotonic,
idempotent), what ending does to the deployable, the device and the host's desired
state, bind-time programs and their ARQ, and the Placement reservation."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import arqs, device_profiles, devices, jobs, models, programs
from exosuit.db import placement as placement_db
from exosuit.db.programs import Loaded, Report
from exosuit.placement import providers
from tests.helpers.programs import (
    FUNCTION,
    HOST,
    INTERFACE,
    PCI,
    deployable,
    image,
    programmable_fpga,
    report,
)


@pytest.fixture
def db(database):
    report(database, [programmable_fpga()])
    return database


def start(db, img, uuid_=None):
    return db.write(programs.start, uuid_ or deployable(db)["uuid"], img, project_id="p")


def sync_jobs(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count())
            .select_from(models.jobs)
            .where(models.jobs.c.kind == placement_db.SYNC, models.jobs.c.state == jobs.PENDING)
        ).scalar()


def finish_syncs(db) -> None:
    """Mark the queued Placement syncs done (as a conductor would), to count new ones."""
    with db.engine.begin() as conn:
        conn.execute(sa.update(models.jobs).values(state=jobs.SUCCEEDED))


def test_start_queues_a_pending_program_as_the_hosts_desired_state(db):
    img = image()
    before = db.read(programs.generation, HOST)
    finish_syncs(db)
    started = start(db, img)
    assert started.created
    program = started.program
    dep = deployable(db)
    assert program["state"] == "pending" and program["image_uuid"] == img.uuid
    assert (program["deployable_uuid"], program["device_uuid"]) == (dep["uuid"], dep["device_uuid"])
    assert program["previous_image_uuid"] is None and program["arq_uuid"] is None
    assert dep["program_uuid"] == program["uuid"]
    assert db.read(programs.generation, HOST) == before + 1
    assert sync_jobs(db) == 1  # its reservation reaches Placement
    state = db.read(programs.desired_state, HOST)
    assert state == {
        "generation": before + 1,
        "programs": [
            {
                "uuid": program["uuid"],
                "deployable": f"{HOST}_{PCI}",
                "driver": "simulated",
                "controlpath_id": {
                    "cpid_type": "PCI",
                    "cpid_info": {"domain": "0000", "bus": "5e", "device": "00", "function": "0"},
                },
                "image": {
                    "uuid": img.uuid,
                    "format": "simulated",
                    "size": img.size,
                    "sha256": img.sha256,
                    "function_id": FUNCTION,
                    "interface_id": INTERFACE,
                    "href": f"/agent/v1/images/{img.uuid}/data",
                },
                "previous_image": None,
            }
        ],
    }


def test_two_identical_requests_are_one_program_another_image_is_busy(db):
    img = image()
    first = start(db, img).program
    again = start(db, img)
    assert not again.created and again.program["uuid"] == first["uuid"]
    with pytest.raises(exceptions.ProgramBusy, match=first["uuid"]):
        start(db, image())


def test_the_image_already_loaded_changes_nothing(db):
    img = image()
    program = start(db, img).program
    db.write(programs.record_report, HOST, program["uuid"], Report("done"))
    generation = db.read(programs.generation, HOST)
    again = start(db, img)
    assert not again.created
    assert (again.program["state"], again.program["reason"]) == ("done", "already loaded")
    assert again.program["uuid"] != program["uuid"]
    assert deployable(db)["program_uuid"] is None
    assert db.read(programs.generation, HOST) == generation
    assert (
        db.read(programs.latest_of_deployable, deployable(db)["uuid"])["uuid"]
        == again.program["uuid"]
    )


def test_refusals(database):
    report(database, [programmable_fpga(formats=None), programmable_fpga("0000:5f:00.0")])
    dep, dev = models.deployables, models.devices
    with database.engine.connect() as conn:
        rows = conn.execute(
            sa.select(dep.c.uuid, dev.c.uuid.label("device"), dev.c.pci_address)
            .join(dev, dep.c.device_id == dev.c.id)
            .order_by(dev.c.pci_address)
        ).all()
    cannot, can = rows
    with pytest.raises(exceptions.ProgramUnsupported, match="cannot program"):
        start(database, image(), cannot.uuid)
    with pytest.raises(exceptions.ProgramUnsupported, match="format gbs"):
        start(database, image(fmt="gbs"), can.uuid)
    with pytest.raises(exceptions.DeployableNotFound):
        start(database, image(), str(uuid.uuid4()))
    with database.engine.begin() as conn:
        conn.execute(sa.update(dev).where(dev.c.uuid == can.device).values(status="maintaining"))
    with pytest.raises(exceptions.ProgramUnavailable, match="disabled"):
        start(database, image(), can.uuid)
    with database.engine.begin() as conn:
        conn.execute(
            sa.update(dev).where(dev.c.uuid == can.device).values(status="enabled", presence="lost")
        )
    with pytest.raises(exceptions.ProgramUnavailable, match="lost"):
        start(database, image(), can.uuid)
    with database.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.programs)).scalar() == 0


def bind_one(db, group: dict, need: arqs.ProgramNeed | None = None, instance=None):
    """Create an ARQ from a one-group profile and bind it to the host's deployable."""
    name = f"profile-{uuid.uuid4().hex[:8]}"
    db.write(device_profiles.create, name=name, groups=[group])
    (arq,) = db.write(arqs.create, profile_name=name, project_id="p", handles_per_unit={})
    binding = arqs.Binding(
        uuid=arq["uuid"],
        hostname=HOST,
        device_rp_uuid=deployable(db)["rp_uuid"],
        instance_uuid=instance or str(uuid.uuid4()),
    )
    programs_ = {arq["uuid"]: need} if need is not None else None
    (result,) = db.write(
        arqs.bind,
        [binding],
        arqs.Scope(None),
        skip_locked=db.supports_skip_locked,
        programs=programs_,
    )
    return result


def test_a_held_attach_handle_refuses_the_program(db):
    result = bind_one(db, {"resources:FPGA": "1"})
    assert result.arq["state"] == "Bound"
    with pytest.raises(exceptions.ProgramInUse, match=result.arq["uuid"]):
        start(db, image())
    assert deployable(db)["program_uuid"] is None


def test_reports_move_forward_only_and_done_loads_the_image(db):
    img = image()
    uuid_ = start(db, img).program["uuid"]
    finish_syncs(db)
    for state in ("fetching", "programming"):
        program, ended = db.write(programs.record_report, HOST, uuid_, Report(state))
        assert (program["state"], ended) == (state, False)
    # A late retry of an earlier report changes nothing.
    program, _ = db.write(programs.record_report, HOST, uuid_, Report("fetching"))
    assert program["state"] == "programming"
    with pytest.raises(exceptions.ProgramNotFound):
        db.write(programs.record_report, "other-host", uuid_, Report("verifying"))
    generation = db.read(programs.generation, HOST)
    loaded = Loaded(function_id=FUNCTION.upper(), interface_id=INTERFACE)
    program, ended = db.write(programs.record_report, HOST, uuid_, Report("done", loaded=loaded))
    assert ended and program["state"] == "done" and program["finished_at"] is not None
    dep = deployable(db)
    assert (dep["bitstream_id"], dep["program_uuid"]) == (img.uuid, None)
    assert db.read(programs.generation, HOST) == generation + 1
    assert db.read(programs.desired_state, HOST)["programs"] == []
    assert sync_jobs(db) == 1  # the reservation is released
    # The same report again: unchanged. A contradicting one: the program ended.
    assert db.write(programs.record_report, HOST, uuid_, Report("done"))[1] is False
    with pytest.raises(exceptions.ProgramEnded, match="done"):
        db.write(programs.record_report, HOST, uuid_, Report("failed", reason="late"))


def test_the_next_program_names_the_image_to_restore(db):
    first = image()
    uuid_ = start(db, first).program["uuid"]
    db.write(programs.record_report, HOST, uuid_, Report("done"))
    second = start(db, image()).program
    assert second["previous_image_uuid"] == first.uuid
    [desired] = db.read(programs.desired_state, HOST)["programs"]
    assert desired["previous_image"] == {
        "uuid": first.uuid,
        "sha256": first.sha256,
        "href": f"/agent/v1/images/{first.uuid}/data",
    }


@pytest.mark.parametrize("restored", [True, None])
def test_a_failure_that_restored_or_had_nothing_to_restore_leaves_the_device(db, restored):
    uuid_ = start(db, image()).program["uuid"]
    program, ended = db.write(
        programs.record_report,
        HOST,
        uuid_,
        Report("failed", reason="fpgaconf exited 1", restored=restored),
    )
    assert ended and (program["state"], program["restored"]) == ("failed", restored)
    assert program["reason"] == "fpgaconf exited 1"
    dep = deployable(db)
    assert (dep["program_uuid"], dep["bitstream_id"], dep["status"]) == (None, None, "enabled")


def test_a_failure_that_could_not_restore_disables_the_device(db):
    uuid_ = start(db, image()).program["uuid"]
    db.write(
        programs.record_report,
        HOST,
        uuid_,
        Report("failed", reason="xbmgmt: flash error", restored=False),
    )
    dep = deployable(db)
    assert (dep["program_uuid"], dep["bitstream_id"], dep["status"]) == (None, None, "maintaining")
    assert uuid_ in dep["status_reason"] and "xbmgmt: flash error" in dep["status_reason"]
    # Disabled: no program until an operator enables it again (which clears the reason).
    with pytest.raises(exceptions.ProgramUnavailable):
        start(db, image())
    device = db.write(devices.set_status, dep["device_uuid"], "enabled")
    assert device["status_reason"] is None


def test_loaded_ids_that_contradict_the_image_are_a_failure(db):
    uuid_ = start(db, image()).program["uuid"]
    program, ended = db.write(
        programs.record_report,
        HOST,
        uuid_,
        Report("done", loaded=Loaded(function_id="something-else")),
    )
    assert ended and program["state"] == "failed" and program["restored"] is False
    assert "something-else" in program["reason"]
    assert deployable(db)["status"] == "maintaining"


def test_a_deployable_being_programmed_is_reserved_in_placement(db):
    def reasons():
        return [providers.reserve_reason(r) for r in db.read(placement_db.deployable_rows, HOST)]

    assert reasons() == [None]
    uuid_ = start(db, image()).program["uuid"]
    assert reasons() == [f"being programmed (program {uuid_})"]
    [row] = db.read(placement_db.deployable_rows, HOST)
    [provider] = providers.desired_providers(HOST, str(uuid.uuid4()), [row]).values()
    assert provider.reserved == provider.total == 4
    db.write(programs.record_report, HOST, uuid_, Report("done"))
    assert reasons() == [None]


def test_expired_programs_fail_and_a_touched_device_is_disabled(db):
    uuid_ = start(db, image()).program["uuid"]
    assert db.read(programs.expired, program_timeout=600, bind_timeout=60) == []
    assert db.read(programs.expired, program_timeout=-1, bind_timeout=60) == [uuid_]
    db.write(programs.record_report, HOST, uuid_, Report("programming"))
    assert db.write(programs.fail, uuid_, "timed out") is True
    assert db.write(programs.fail, uuid_, "timed out") is False
    program = db.read(programs.get, uuid_)
    assert (program["state"], program["reason"], program["restored"]) == (
        "failed",
        "timed out",
        False,
    )
    assert deployable(db)["status"] == "maintaining"


def test_an_expired_pending_program_leaves_the_device_alone(db):
    uuid_ = start(db, image()).program["uuid"]
    assert db.write(arqs.time_out_program, uuid_, "timed out") is True
    dep = deployable(db)
    assert (dep["status"], dep["program_uuid"]) == ("enabled", None)
    assert db.read(programs.get, uuid_)["restored"] is None


# -- bind-time programs ---------------------------------------------------------------------


def test_a_bind_queues_a_program_holding_its_handle_and_ends_with_it(db):
    img = image()
    group = {"resources:FPGA": "1", "accel:bitstream_id": img.uuid}
    result = bind_one(db, group, arqs.ProgramNeed(bitstream_id=img.uuid, image=img))
    assert result.error is None and result.arq["state"] == "BindStarted"
    arq_uuid = result.arq["uuid"]
    program = db.read(programs.latest_of_deployable, deployable(db)["uuid"])
    assert (program["arq_uuid"], program["state"], program["project_id"]) == (
        arq_uuid,
        "pending",
        "p",
    )
    # Reports about the ARQ itself go through its program.
    with pytest.raises(exceptions.ARQBadState, match=program["uuid"]):
        db.write(arqs.finish_host_work, HOST, arq_uuid, error=None)
    # Nobody else binds the device meanwhile.
    other = bind_one(db, {"resources:FPGA": "1"})
    assert "being programmed" in other.error
    shown = db.write(arqs.report_program, HOST, program["uuid"], Report("done"))
    assert shown["state"] == "done"
    arq = db.read(arqs.get, arq_uuid, arqs.Scope(None))
    assert arq["state"] == "Bound" and arq["attach_handle_uuid"] is not None
    assert deployable(db)["bitstream_id"] == img.uuid
    with db.engine.connect() as conn:
        payloads = [
            json.loads(p)
            for p in conn.execute(
                sa.select(models.jobs.c.payload).where(models.jobs.c.kind == "nova_notify")
            ).scalars()
        ]
    statuses = [a for p in payloads for a in p["arqs"] if a["uuid"] == arq_uuid]
    assert statuses == [{"uuid": arq_uuid, "status": "completed"}]


def test_a_failed_bind_program_fails_the_bind_and_frees_the_handle(db):
    img = image()
    group = {"resources:FPGA": "1", "accel:bitstream_id": img.uuid}
    arq_uuid = bind_one(db, group, arqs.ProgramNeed(bitstream_id=img.uuid, image=img)).arq["uuid"]
    program = db.read(programs.latest_of_deployable, deployable(db)["uuid"])
    db.write(
        arqs.report_program,
        HOST,
        program["uuid"],
        Report("failed", reason="bad bitstream", restored=True),
    )
    arq = db.read(arqs.get, arq_uuid, arqs.Scope(None))
    assert arq["state"] == "BindFailed" and "bad bitstream" in arq["reason"]
    with db.engine.connect() as conn:
        held = models.attach_handles.c.in_use.is_(True)
        assert not conn.execute(sa.select(models.attach_handles.c.id).where(held)).first()
    assert bind_one(db, {"resources:FPGA": "1"}).arq["state"] == "Bound"


def test_a_bind_that_finds_its_image_loaded_is_bound_at_once(db):
    img = image()
    uuid_ = start(db, img).program["uuid"]
    db.write(programs.record_report, HOST, uuid_, Report("done"))
    by_image = bind_one(
        db, {"resources:FPGA": "1", "accel:function_id": FUNCTION}, arqs.ProgramNeed(image=img)
    )
    assert by_image.arq["state"] == "Bound"
    # Named by bitstream id: no image needs resolving when the device has it.
    by_id = bind_one(
        db,
        {"resources:FPGA": "1", "accel:bitstream_id": img.uuid},
        arqs.ProgramNeed(bitstream_id=img.uuid, error="not visible"),
    )
    assert by_id.arq["state"] == "Bound"


def test_a_bind_refused_a_program_fails_with_the_reason(db):
    failed = bind_one(
        db, {"resources:FPGA": "1"}, arqs.ProgramNeed(error="image x could not be found")
    )
    assert failed.arq["state"] == "BindFailed" and failed.error == "image x could not be found"
    wrong = bind_one(db, {"resources:FPGA": "1"}, arqs.ProgramNeed(image=image(fmt="xclbin")))
    assert "format xclbin" in wrong.error
    held = bind_one(db, {"resources:FPGA": "1"})
    assert held.arq["state"] == "Bound"
    in_use = bind_one(db, {"resources:FPGA": "1"}, arqs.ProgramNeed(image=image()))
    assert "in use" in in_use.error and held.arq["uuid"] in in_use.error
    with db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.programs)).scalar() == 0
    # Only the holder keeps a handle.
    with db.engine.connect() as conn:
        assert (
            conn.execute(
                sa.select(sa.func.count())
                .select_from(models.attach_handles)
                .where(models.attach_handles.c.in_use.is_(True))
            ).scalar()
            == 1
        )


def test_a_bind_timeout_fails_its_program(db):
    img = image()
    instance = str(uuid.uuid4())
    arq_uuid = bind_one(
        db, {"resources:FPGA": "1"}, arqs.ProgramNeed(image=img), instance=instance
    ).arq["uuid"]
    program = db.read(programs.latest_of_deployable, deployable(db)["uuid"])
    states = db.write(arqs.time_out_binds, instance, [arq_uuid], reason="too slow")
    assert states == {arq_uuid: "BindFailed"}
    program = db.read(programs.get, program["uuid"])
    assert program["state"] == "failed" and "too slow" in program["reason"]
    assert deployable(db)["program_uuid"] is None
    # The agent finishing too late is told the program ended.
    with pytest.raises(exceptions.ProgramEnded):
        db.write(arqs.report_program, HOST, program["uuid"], Report("done"))


def test_an_unbound_bind_leaves_its_program_running_until_the_host_reports(db):
    """The agent may be loading the device: it stays reserved until the program ends."""
    img = image()
    arq_uuid = bind_one(db, {"resources:FPGA": "1"}, arqs.ProgramNeed(image=img)).arq["uuid"]
    db.write(arqs.unbind, [arq_uuid], arqs.Scope(None))
    program = db.read(programs.latest_of_deployable, deployable(db)["uuid"])
    assert program["state"] == "pending" and deployable(db)["program_uuid"] == program["uuid"]
    db.write(arqs.report_program, HOST, program["uuid"], Report("done"))
    assert deployable(db)["bitstream_id"] == img.uuid
    assert db.read(arqs.get, arq_uuid, arqs.Scope(None))["state"] == "Unbound"
