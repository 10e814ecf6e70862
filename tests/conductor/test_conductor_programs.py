"""The conductor's ``program_timeout`` sweep (exosuit/conductor/programs.py), on every
backend: programs their host did not finish in time fail, and free their deployable;
one the agent may have been loading leaves its device disabled; a bind waiting for
one fails with it."""

from __future__ import annotations

import time
import uuid

import pytest

from exosuit.conductor import kinds
from exosuit.conductor import programs as sweep_job
from exosuit.db import arqs, device_profiles, programs
from exosuit.db.programs import Report
from exosuit.jobs import JobContext
from tests.conftest import make_test_conf
from tests.helpers.programs import HOST, deployable, image, programmable_fpga, report

DEADLINE = 60.0


def wait_until_expired(db, conf) -> None:
    """Until the running programs are older than the (one-second) timeouts."""
    deadline = time.monotonic() + DEADLINE
    while not db.read(
        programs.expired, program_timeout=conf.program_timeout, bind_timeout=conf.bind_timeout
    ):
        assert time.monotonic() < deadline, "no program expired"
        time.sleep(0.1)


def test_the_sweep_is_a_periodic_kind_of_every_conductor():
    conf = make_test_conf()
    registry = kinds.load(conf)
    assert registry.handlers[programs.SWEEP] is sweep_job.sweep
    interval = registry.periodic[programs.SWEEP]
    assert interval(conf) == 30
    assert interval(make_test_conf(**{"conductor.program_sweep_interval": 0})) == 0  # off


def test_an_operator_program_its_host_never_started_fails_and_frees_the_device(database):
    report(database, [programmable_fpga()])
    conf = make_test_conf(program_timeout=1)
    uuid_ = database.write(programs.start, deployable(database)["uuid"], image()).program["uuid"]
    generation = database.read(programs.generation, HOST)
    # Not yet: a sweep with a timeout no busy machine outlives leaves it running.
    sweep_job.sweep(JobContext(make_test_conf(program_timeout=3600), database), {})
    assert database.read(programs.get, uuid_)["state"] == "pending"
    wait_until_expired(database, conf)
    sweep_job.sweep(JobContext(conf, database), {})
    program = database.read(programs.get, uuid_)
    assert program["state"] == "failed" and "program_timeout (1 s)" in program["reason"]
    assert program["restored"] is None
    dep = deployable(database)
    assert (dep["program_uuid"], dep["status"]) == (None, "enabled")
    assert database.read(programs.generation, HOST) == generation + 1
    sweep_job.sweep(JobContext(conf, database), {})  # idempotent
    assert database.read(programs.get, uuid_)["state"] == "failed"


def test_a_bind_program_stuck_while_loading_fails_its_bind_and_disables_the_device(database):
    report(database, [programmable_fpga()])
    conf = make_test_conf(program_timeout=1, bind_timeout=1)
    database.write(device_profiles.create, name="p", groups=[{"resources:FPGA": "1"}])
    (arq,) = database.write(arqs.create, profile_name="p", project_id="p", handles_per_unit={})
    binding = arqs.Binding(arq["uuid"], HOST, deployable(database)["rp_uuid"], str(uuid.uuid4()))
    database.write(
        arqs.bind,
        [binding],
        arqs.Scope(None),
        skip_locked=database.supports_skip_locked,
        programs={arq["uuid"]: arqs.ProgramNeed(image=image())},
    )
    program = database.read(programs.running_for_arq, arq["uuid"])
    database.write(arqs.report_program, HOST, program, Report("programming"))
    wait_until_expired(database, conf)
    sweep_job.sweep(JobContext(conf, database), {})
    assert database.read(programs.get, program)["state"] == "failed"
    assert database.read(arqs.get, arq["uuid"], arqs.Scope(None))["state"] == "BindFailed"
    dep = deployable(database)
    assert dep["status"] == "maintaining" and program in dep["status_reason"]
    assert dep["bitstream_id"] is None


@pytest.mark.parametrize("state", ["done", "failed"])
def test_ended_programs_are_left_alone(database, state):
    report(database, [programmable_fpga()])
    conf = make_test_conf(program_timeout=1)
    uuid_ = database.write(programs.start, deployable(database)["uuid"], image()).program["uuid"]
    database.write(programs.record_report, HOST, uuid_, Report(state, restored=True))
    time.sleep(1.1)
    assert database.read(programs.expired, program_timeout=1, bind_timeout=1) == []
    sweep_job.sweep(JobContext(conf, database), {})
    assert database.read(programs.get, uuid_)["state"] == state
