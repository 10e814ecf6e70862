"""exosuit/db/candidates.py's pure part: the assignment of units to deployables, the
constraints across groups, and the one-sentence summary of a refusal."""

from __future__ import annotations

from exosuit.db import candidates as c
from exosuit.schemas import profile_groups

GPU = profile_groups.parse({"resources:PGPU": "1"})
NIC = profile_groups.parse({"resources:CUSTOM_NIC": "1"})


def _candidate(n: int, rc: str = "PGPU", *, free: int = 1, numa: int | None = 1, **kw):
    return c.Candidate(
        hostname=kw.pop("hostname", "h1"),
        deployable_id=n,
        deployable_uuid=f"dep-{n}",
        name=f"dep{n}",
        rp_uuid=f"rp-{n}",
        bitstream_id=None,
        device_id=kw.pop("device_id", n),
        device_uuid=f"dev-{n}",
        device_type="GPU",
        numa_node=numa,
        pcie_root=kw.pop("pcie_root", None),
        labels={},
        rc=rc,
        traits=frozenset(),
        free=free,
        **kw,
    )


def test_the_assignment_is_a_matching_not_a_greedy_pick():
    """Group 0 may take A or B, group 1 only A: a greedy first pick (A for group 0) would
    leave group 1 nothing; the matching gives group 0 B."""
    a, b = _candidate(1), _candidate(2)
    found = c.assign([(0, 1), (1, 1)], {0: [a, b], 1: [a]}, distinct=False)
    assert found == ((0, b), (1, a))


def test_distinct_devices_counts_devices_not_handles():
    """One device with two deployables (two MIG slices) is one device."""
    one, other = _candidate(1, device_id=7, free=2), _candidate(2, device_id=7, free=2)
    assert c.assign([(0, 2)], {0: [one, other]}, distinct=False) is not None
    assert c.assign([(0, 2)], {0: [one, other]}, distinct=True) is None


def test_an_unknown_numa_node_never_satisfies_same_numa_node():
    groups = {0: profile_groups.parse({"resources:PGPU": "1", "accel:same_numa_node": "true"})}
    found = {"h1": [_candidate(1, numa=None)]}
    evaluation = c.evaluate(groups, [(0, 1)], found, c.Constraints.of(groups.values()))
    assert evaluation.plan == {}
    device = [v for v in evaluation.verdicts if v.device_uuid][0]
    assert (device.code, device.message) == (c.TOPOLOGY, "NUMA node unknown (accel:same_numa_node)")


def test_the_summary_names_the_most_common_reasons_first_and_the_holders():
    holders = (c.Holder("arq-1", claim_uuid="claim-1"), c.Holder("arq-2", instance_uuid="vm-2"))
    found = {
        "h1": [
            _candidate(1, blocked=(c.DRAINED, "drained (status maintaining)")),
            _candidate(2, blocked=(c.DRAINED, "drained (status maintaining)")),
            _candidate(3, free=0, holders=holders[:1]),
            _candidate(4, free=0, holders=holders[1:]),
            _candidate(5, numa=0),
            _candidate(6, rc="CUSTOM_NIC"),
        ],
    }
    groups = {0: GPU}
    constraints = c.Constraints(numa_node=1)
    evaluation = c.evaluate(groups, [(0, 1)], found, constraints)
    assert evaluation.chosen is None
    assert evaluation.summary() == (
        "No device on any host can take the claim: 2 drained (status maintaining), 2 held "
        "(by claim claim-1, ARQ arq-2 of instance vm-2), 1 of resource class CUSTOM_NIC, "
        "not PGPU, 1 on NUMA node 0, not 1."
    )


def test_the_first_host_that_serves_is_chosen_the_later_ones_are_spare():
    found = {"a": [_candidate(1, hostname="a")], "b": [_candidate(2, hostname="b")]}
    evaluation = c.evaluate({0: GPU}, [(0, 1)], found, c.Constraints())
    assert evaluation.chosen == "a"
    hosts = [(v.hostname, v.code) for v in evaluation.verdicts if v.device_uuid is None]
    assert hosts == [("a", c.CHOSEN), ("b", c.SPARE)]
