"""Importing again after Exosuit has moved on: an applied import that fails partway
writes nothing, and an ARQ Exosuit deleted since is not brought back.

The story: the import is applied and the hosts' Exosuit agents report. Then the
operator cuts compute-a's NIC down to one VF and back to two (Exosuit deletes the
free VF's deployable and creates it anew under the same name, with a new uuid) and
pulls the free QAT that compute-b's out-of-tree driver had keyed by its bare address
(Exosuit deletes it). Cyborg's database still has all of it. Running the import again
with ``--merge`` writes that QAT (a new device for the target) and then meets the
VF's deployable: a new uuid for the target under a name its device already has, which
the target's unique constraint refuses. The whole import is rolled back.
"""

from __future__ import annotations

import pytest

from exosuit.api.deploy import loadapp
from tests.conftest import ApiClient, make_test_conf
from tests.helpers.cyborg_import import (
    NOVA,
    by_uuid,
    everything,
    fake_fpga,
    npu,
    qat,
    report,
    run,
    sriov_nic,
    table_lines,
    url_of,
)

pytestmark = pytest.mark.slow


def test_a_failure_partway_writes_nothing(capsys, tmp_path, cyborg_source, database):
    filled = cyborg_source.filled
    url = url_of(database)
    assert run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply")[0] == 0
    api = ApiClient(loadapp(make_test_conf(), database))
    [vf1] = [u for u, d in filled["deployables"].items() if d["name"] == "compute-a_0000:3b:02.1"]
    [legacy] = [
        c["device"] for c in filled["controlpath_ids"].values() if c["cpid_info"] == "0000:af:00.0"
    ]
    report(api, "compute-a", [fake_fpga("compute-a"), sriov_nic("compute-a", ("0000:3b:02.0",))])
    report(api, "compute-a", [fake_fpga("compute-a"), sriov_nic("compute-a")])
    report(api, "compute-b", [fake_fpga("compute-b"), qat("compute-b"), npu("compute-b")])
    deployables = {d["name"]: u for u, d in by_uuid(database, "deployables").items()}
    assert deployables["compute-a_0000:3b:02.1"] != vf1
    assert legacy not in by_uuid(database, "devices")

    # The dry run cannot see the conflict: it would write the QAT and the VF again.
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--merge")
    assert code == 0, err
    lines = table_lines(out)
    assert lines["devices"][1] == "1" and lines["deployables"][1] == "2"
    before = everything(database)
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply", "--merge")
    assert code == 1
    assert "nothing written" in err
    assert f"the target refused deployables {vf1}" in err
    assert "rolled back" in err
    assert "Traceback" not in err
    # Not a row more or less, not a value changed: not the QAT device written before
    # the refusal, not its control-path id, not a host row or a job.
    assert everything(database) == before


def test_an_arq_deleted_in_exosuit_is_not_brought_back(capsys, tmp_path, cyborg_source, database):
    """Nova deleted a server through Exosuit after the import; Cyborg's database still
    has its Bound ARQ. Importing again skips that ARQ: taking back its handle, free in
    Exosuit now, could give one device to two servers."""
    filled = cyborg_source.filled
    url = url_of(database)
    assert run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply")[0] == 0
    nova = ApiClient(loadapp(make_test_conf(), database)).as_(NOVA)
    gone = filled["arqs"]["bound"]
    handle = filled["arq_handles"][gone]
    r = nova.delete(f"/v2/accelerator_requests?instance={filled['instances']['bound']}")
    assert r.status_code == 204, r.text
    assert not by_uuid(database, "attach_handles")[handle]["in_use"]
    code, out, err = run(capsys, tmp_path, url, "--from", cyborg_source.url, "--apply", "--merge")
    assert code == 0, err
    assert (
        f"cannot map extended_accelerator_requests {gone}: it holds attach handle {handle}, "
        "which is free in Exosuit" in out
    )
    assert table_lines(out)["extended_accelerator_requests"] == ["11", "0", "10", "1"]
    assert gone not in by_uuid(database, "accelerator_requests")
    assert not by_uuid(database, "attach_handles")[handle]["in_use"]
