"""``exosuit device …`` and ``exosuit deployable …`` against a real ``exosuit serve``:
the JSON of every list is the API's data, columns and formats, filters, paging."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from exosuit.cli.client import CLIENT_MAX_VERSION
from exosuit.cli.deployables import DeployableList
from exosuit.cli.devices import DeviceList, maintenance_text, use_text
from tests.cli.conftest import HOST, pick

pytestmark = pytest.mark.slow


def _derived(devices: list[dict]) -> list[dict]:
    """The API's devices with the columns the list derives: drain (from maintenance) and
    use (from holders)."""
    return [{**d, "drain": maintenance_text(d), "use": use_text(d)} for d in devices]


def test_device_list_json_is_the_api_devices_with_the_list_columns(cli, api):
    devices = _derived(api.list("/v2/devices", "devices", CLIENT_MAX_VERSION))
    assert {d["use"] for d in devices} == {"free"}

    shown = cli.json("device", "list")

    assert shown == pick(devices, DeviceList.columns)
    assert sorted(d["type"] for d in shown) == ["FPGA", "GPU"]
    assert list(shown[0]) == list(DeviceList.columns)  # stable keys, in order
    assert {d["hostname"] for d in shown} == {HOST}


def test_device_list_long_adds_every_other_field(cli, api):
    devices = _derived(api.list("/v2/devices", "devices", CLIENT_MAX_VERSION))

    shown = cli.json("device", "list", "--long")

    columns = DeviceList.columns + DeviceList.long_columns
    assert shown == pick(devices, columns)
    # Nothing of the API left out; drain and use are derived (from maintenance, holders).
    assert set(columns) == set(devices[0]) - {"links"}


def test_device_show_json_is_every_field_but_links(cli, api):
    # What the command line shows: the device at the version it speaks.
    device = api.list("/v2/devices", "devices", CLIENT_MAX_VERSION)[0]

    shown = cli.json("device", "show", device["uuid"])

    assert shown == {k: v for k, v in device.items() if k != "links"}


def test_device_show_tells_where_the_device_sits(cli, api):
    """numa_node, pcie_root and iommu_group (doc/devices.md, "Topology"): the simulated
    FPGA on bus 0c sits below the root port on bus 0b, in IOMMU group 12 (its bus)."""
    fpga = next(d for d in api.list("/v2/devices", "devices") if d["type"] == "FPGA")
    shown = cli.json("device", "show", fpga["uuid"])
    assert (shown["numa_node"], shown["pcie_root"], shown["iommu_group"]) == (
        0,
        "0000:0b:00.0",
        12,
    )
    table = cli.run("device", "show", fpga["uuid"]).stdout
    assert "pcie_root" in table and "0000:0b:00.0" in table and "iommu_group" in table


@pytest.mark.parametrize(
    "args, query",
    [
        (("--type", "FPGA"), {"type": "FPGA"}),
        (("--host", HOST), {"hostname": HOST}),
        (("--host", "elsewhere"), {"hostname": "elsewhere"}),
        (("--status", "enabled"), {"status": "enabled"}),
        (("--vendor", "10de", "--type", "GPU"), {"vendor": "10de", "type": "GPU"}),
    ],
    ids=["type", "host", "other-host", "status", "vendor-and-type"],
)
def test_device_list_filters_are_the_api_filters(cli, api, args, query):
    expected = _derived(api.list("/v2/devices", "devices", CLIENT_MAX_VERSION, **query))

    assert cli.json("device", "list", *args) == pick(expected, DeviceList.columns)


def test_deployable_list_and_show_json(cli, api):
    deployables = api.list("/v2/deployables", "deployables")

    assert cli.json("deployable", "list") == pick(deployables, DeployableList.columns)
    long = cli.json("deployable", "list", "--long")
    assert long == pick(deployables, DeployableList.columns + DeployableList.long_columns)
    fpga = next(d for d in deployables if d["name"] == f"{HOST}_FakeDevice")
    shown = cli.json("deployable", "show", fpga["uuid"])
    assert shown == {k: v for k, v in fpga.items() if k != "links"}
    assert shown["num_accelerators"] == 16


def test_column_option_and_value_format(cli, api):
    devices = api.list("/v2/devices", "devices")

    out = cli.run("device", "list", "-f", "value", "-c", "uuid", "-c", "type").stdout

    assert out.splitlines() == [f"{d['uuid']} {d['type']}" for d in devices]
    assert cli.json("device", "list", "-c", "hostname") == [{"hostname": HOST}] * len(devices)
    # A column of --long needs no --long.
    assert cli.json("device", "list", "-c", "uuid", "-c", "pci_address") == pick(
        devices, ("uuid", "pci_address")
    )
    fpga = next(d for d in devices if d["type"] == "FPGA")
    value = cli.run("device", "show", fpga["uuid"], "-f", "value", "-c", "pci_address").stdout
    assert value == f"{fpga['pci_address']}\n"
    # An absent value is empty, not "None".
    reason = cli.run("device", "show", fpga["uuid"], "-f", "value", "-c", "presence_reason")
    assert reason.stdout == "\n"


def _text(value) -> str:
    """A value as csv shows it: nested ones as compact JSON, None as nothing."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def test_csv_and_yaml_formats(cli, api):
    devices = _derived(api.list("/v2/devices", "devices", CLIENT_MAX_VERSION))

    rows = list(csv.DictReader(io.StringIO(cli.run("device", "list", "-f", "csv").stdout)))
    assert rows == [{k: _text(v) for k, v in d.items()} for d in pick(devices, DeviceList.columns)]
    assert yaml.safe_load(cli.run("device", "list", "-f", "yaml").stdout) == pick(
        devices, DeviceList.columns
    )


def test_nested_values_are_structured_in_json_and_compact_json_in_value(cli, api):
    deployable = api.list("/v2/deployables", "deployables")[0]
    attributes = deployable["attributes_list"]  # Cyborg sends it as a JSON string
    device = api.list("/v2/devices", "devices")[0]

    shown = cli.json("deployable", "show", deployable["uuid"])
    assert shown["attributes_list"] == attributes
    links = cli.run("device", "list", "--long", "-f", "value", "-c", "std_board_info").stdout
    assert device["std_board_info"] in links.splitlines()


def test_table_is_the_default_and_fits_the_width_given(cli, api):
    default = cli.run("device", "list").stdout.splitlines()
    assert default[0].startswith("+") and default[1].startswith("| uuid ")
    assert max(len(line) for line in default) <= 80  # short ids: 80 columns, not wrapped
    # --long: whole UUIDs; these columns are wider than 80 together.
    columns = ("--long", "-c", "uuid", "-c", "hostname", "-c", "model", "-c", "pci_address")
    wide = cli.run("device", "list", *columns).stdout.splitlines()
    assert max(len(line) for line in wide) > 80

    narrow = cli.run("device", "list", *columns, "--max-width", "80").stdout.splitlines()

    assert max(len(line) for line in narrow) <= 80
    # Wrapped, not cut: every UUID is still there, over several lines.
    first_column = "".join(line.split("|")[1].strip() for line in narrow if line[0] == "|")
    assert all(d["uuid"] in first_column for d in api.list("/v2/devices", "devices"))


def test_lists_span_pages_and_limit_stops_early(cli, api):
    # [api] max_limit is 3 (conftest): 4 devices would take two pages; deployables and
    # devices are 2 each here, so profiles make the long list.
    for n in range(7):
        api.post(
            "/v2/device_profiles", [{"name": f"page-{n}", "groups": [{"resources:FPGA": "1"}]}]
        )
    profiles = api.list("/v2/device_profiles", "device_profiles")
    assert len(profiles) >= 7

    debug = cli.run("--debug", "profile", "list", "-f", "json")
    assert [p["uuid"] for p in json.loads(debug.stdout)] == [p["uuid"] for p in profiles]
    # One request per page, each following the API's `next` link (2.4 markers).
    pages = [line for line in debug.stderr.splitlines() if "GET http" in line]
    assert len(pages) == 1 + -(-len(profiles) // 3)  # the version document, then the pages
    assert sum("marker=" in line for line in pages) == len(pages) - 2

    two = cli.json("profile", "list", "--limit", "2")
    assert [p["uuid"] for p in two] == [p["uuid"] for p in profiles[:2]]
    five = cli.json("profile", "list", "--limit", "5")
    assert [p["uuid"] for p in five] == [p["uuid"] for p in profiles[:5]]


def test_sort_is_done_by_the_api(cli, api):
    for name in ("sort-b", "sort-a", "sort-c"):
        api.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:FPGA": "1"}]}])
    names = [p["name"] for p in api.list("/v2/device_profiles", "device_profiles")]

    ascending = cli.json("profile", "list", "--sort", "name", "-c", "name")
    descending = cli.json("profile", "list", "--sort", "name:desc", "-c", "name")

    assert [p["name"] for p in ascending] == sorted(names)
    assert [p["name"] for p in descending] == sorted(names, reverse=True)
    bad = cli.run("profile", "list", "--sort", "colour", check=False)
    assert bad.returncode == 1
    assert "sort_key 'colour' is not one of" in bad.stderr
    assert "(HTTP 400, exosuit.query.sort_key)" in bad.stderr
