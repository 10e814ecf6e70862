"""What Placement should hold, computed from deployable rows (pure functions), and the
database counters behind /metrics (every backend)."""

from __future__ import annotations

import threading

import pytest

from exosuit import metrics
from exosuit.db import metrics as metrics_db
from exosuit.placement import providers
from exosuit.placement.providers import DeployableRow, Provider


def _row(**overrides) -> DeployableRow:
    values = dict(
        rp_uuid="11111111-1111-1111-1111-111111111111",
        name="h1_0000:0c:00.0",
        num_accelerators=4,
        device_type="FPGA",
        device_status="enabled",
        device_presence="present",
        attributes=(("rc", "FPGA", "agent"), ("trait0", "CUSTOM_FAKE", "agent")),
        handles=4,
        handles_present=4,
    )
    values.update(overrides)
    return DeployableRow(**values)


@pytest.mark.parametrize(
    ("value", "device_type", "expected"),
    [
        ("FPGA", "FPGA", "FPGA"),
        ("PGPU", "GPU", "PGPU"),
        ("CUSTOM_QAT", "QAT", "CUSTOM_QAT"),
        ("qat-vf", "QAT", "CUSTOM_QAT_VF"),
        ("custom_nic", "NIC", "CUSTOM_NIC"),
        (None, "AICHIP", "CUSTOM_AICHIP"),
    ],
    ids=["standard", "standard-gpu", "custom", "made-custom", "lower-custom", "no-rc"],
)
def test_resource_class(value, device_type, expected):
    assert providers.resource_class(value, device_type) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("OWNER_CYBORG", "OWNER_CYBORG"),
        ("CUSTOM_FPGA_INTEL", "CUSTOM_FPGA_INTEL"),
        ("HW_GPU_API_VULKAN", "HW_GPU_API_VULKAN"),
        ("physnet-1", "CUSTOM_PHYSNET_1"),
        ("CUSTOM_a.b", "CUSTOM_A_B"),
    ],
)
def test_trait_name(value, expected):
    assert providers.trait_name(value) == expected


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, None),
        ({"device_status": "maintaining"}, "device disabled (status maintaining)"),
        ({"device_presence": "missing"}, "device missing"),
        ({"device_presence": "lost"}, "device lost"),
        ({"attributes": (("health", "critical", "agent"),)}, "unhealthy (health critical)"),
        ({"attributes": (("health", "OK", "agent"),)}, None),
        ({"attributes": (("health", "critical", "agent"), ("health", "ok", "api"))}, None),
        ({"handles": 2, "handles_present": 0}, "gone from the host's report while in use"),
        ({"handles": 0, "handles_present": 0}, "no attach handle left"),
        ({"handles": 0, "handles_present": 0, "num_accelerators": 0}, None),
    ],
    ids=[
        "enabled",
        "disabled",
        "missing",
        "lost",
        "unhealthy",
        "healthy",
        "operator-says-ok",
        "gone-while-held",
        "no-handles",
        "nothing-offered",
    ],
)
def test_reserve_reason(overrides, reason):
    assert providers.reserve_reason(_row(**overrides)) == reason


def test_desired_providers():
    rows = [
        _row(),
        _row(
            rp_uuid="2" * 8 + "-2222-2222-2222-222222222222",
            name="gpu0",
            num_accelerators=1,
            device_status="maintaining",
            attributes=(
                ("rc", "PGPU", "agent"),
                ("trait0", "OWNER_CYBORG", "agent"),
                ("trait1", "CUSTOM_NVIDIA_20B0", "agent"),
                ("trait2", "CUSTOM_ADDED", "api"),
            ),
        ),
    ]
    found = providers.desired_providers("h1", "c" * 8 + "-cccc-cccc-cccc-cccccccccccc", rows)
    first, second = found.values()
    assert first.name == "h1_0000:0c:00.0"  # already prefixed by its host
    assert first.inventories() == {
        "FPGA": {
            "total": 4,
            "reserved": 0,
            "min_unit": 1,
            "max_unit": 4,
            "step_size": 1,
            "allocation_ratio": 1.0,
        }
    }
    assert first.traits == {"CUSTOM_FAKE", "OWNER_CYBORG"}
    assert second.name == "h1_gpu0"
    assert second.inventories()["PGPU"]["reserved"] == 1
    assert second.traits == {"OWNER_CYBORG", "CUSTOM_NVIDIA_20B0", "CUSTOM_ADDED"}


def test_same_deployable_name_twice_on_a_host_gives_unique_provider_names():
    rows = [_row(name="fpga"), _row(rp_uuid="33333333-3333-3333-3333-333333333333", name="fpga")]
    names = {p.name for p in providers.desired_providers("h1", "c", rows).values()}
    assert names == {"h1_fpga_11111111", "h1_fpga_33333333"}


def test_no_inventory_without_accelerators():
    provider = providers.desired_providers("h1", "c", [_row(num_accelerators=0)])
    assert next(iter(provider.values())).inventories() == {}


def test_plan():
    a = Provider("a", "h_a", "c", "FPGA", 4, 0, frozenset({"OWNER_CYBORG"}))
    b = Provider("b", "h_b", "c", "PGPU", 1, 0, frozenset({"OWNER_CYBORG"}))
    c = Provider("c2", "h_c", "c", "PGPU", 1, 0, frozenset({"OWNER_CYBORG"}))
    assert providers.plan({"a": a, "b": b}, {"a": a, "b": b}) == []
    changed = a.fully_reserved()
    renamed = Provider("b", "h_b2", "c", "PGPU", 1, 0, frozenset({"OWNER_CYBORG", "CUSTOM_X"}))
    steps = providers.plan({"a": changed, "b": renamed}, {"a": a, "b": b, "c2": c})
    assert [(s.kind, s.uuid) for s in steps] == [
        ("inventory", "a"),
        ("provider", "b"),
        ("traits", "b"),
        ("delete", "c2"),
    ]
    assert [(s.kind, s.uuid) for s in providers.plan({"a": a}, {})] == [("create", "a")]


def test_counters_add_up_on_every_backend(database):
    things = metrics.Counter("exosuit_test_things", "Things.", ("kind",))
    key = things.key(kind="x")

    def add(n: int) -> None:
        for _ in range(n):
            database.write(metrics_db.increment, {key: 2, things.key(kind="y"): 1})

    threads = [threading.Thread(target=add, args=(5,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counters = database.read(metrics_db.read_counters)
    assert counters[key] == 40
    assert counters[things.key(kind="y")] == 20
    text = metrics.render(database, [things])[0].decode()
    assert "# HELP exosuit_test_things_total Things." in text
    assert 'exosuit_test_things_total{kind="x"} 40.0' in text
    # A counter nobody declared here (a newer module's) is still exposed.
    assert 'exosuit_test_things_total{kind="y"} 20.0' in metrics.render(database, [])[0].decode()
    body, content_type = metrics.render(database, [things], "application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert body.decode().endswith("# EOF\n")
