"""Placement stopped for a while: everything else keeps working; the sync catches up."""

from __future__ import annotations

import pytest

from tests.placement.conftest import fpga, gpu, inventory

pytestmark = pytest.mark.slow  # starts (and stops) server processes


def test_placement_outage(stack, placement, placement_api, hostname):
    stack.report(hostname, [fpga("0000:0c:00.0")])
    stack.run_jobs()
    before = stack.calls()

    placement.stop()
    try:
        # The API and the agents do not wait for Placement.
        stack.report(hostname, [fpga("0000:0c:00.0"), gpu("0000:3b:00.0")])
        devices = stack.api.get("/v2/devices?hostname=" + hostname).json["devices"]
        assert len(devices) == 2
        fpga_device = stack.device_uuid(hostname, "0000:0c:00.0")
        assert stack.api.post(f"/v2/devices/{fpga_device}/disable").status_code == 200
        assert stack.api.get("/healthz").status_code == 200

        # The sync waits and runs again later, with longer delays; it is not a failure.
        first = stack.run_jobs()
        assert [(o.state, o.retry_in) for o in first] == [("pending", 1.0)]
        again = stack.run_jobs(due=True)
        assert [(o.state, o.retry_in) for o in again] == [("pending", 2.0)]
        assert stack.counter("exosuit_placement_syncs", job="sync", result="retry") == 2
        metrics = stack.api.get("/metrics").text
        assert "exosuit_placement_hosts_pending 1.0" in metrics
        # Drift repair meanwhile: the pending sync becomes a verifying one, still one job.
        from exosuit.db import jobs

        stack.db.write(lambda conn: jobs.enqueue(conn, "placement_reconcile", {}))
        stack.run_jobs(due=True)
        pending = stack.pending()
        assert len(pending) == 1 and '"verify": true' in pending[0]["payload"]
        assert "unavailable" in pending[0]["last_error"]
    finally:
        placement.start()

    assert [o.state for o in stack.run_jobs(due=True)] == ["succeeded"]
    rps = stack.deployables(hostname)
    tree = placement_api.tree(hostname)
    assert set(tree["children"]) == set(rps.values())
    assert tree["children"][rps["fpga_0000:0c:00.0"]]["inventories"] == {
        "FPGA": inventory(4, reserved=4)
    }
    assert tree["children"][rps["gpu_0000:3b:00.0"]]["inventories"] == {"PGPU": inventory(1)}
    assert "exosuit_placement_hosts_pending 0.0" in stack.api.get("/metrics").text
    assert stack.calls() > before
