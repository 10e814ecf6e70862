"""The console's device-centred pages in a real browser, against a real ``exosuit serve``.

One ``exosuit serve`` for the module (its simulated host has a programmable FPGA and a
GPU), and two hosts reported through the agent API as their agents would: ``pages-sick``
with an FPGA its agent reports unhealthy and a healthy one (both ``inactive``, as new
devices start), and ``pages-drained``, drained. A claim holds the simulated GPU. The
tests compare the fleet, host and device pages with what the API returns at 2.11, check
that the fleet's filters narrow the device table and change the address, click every
action of these pages as an admin (noauth, no identity headers) and check its effect
through the API, and check that a refused action shows the API's error whole.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
import requests
from playwright.sync_api import Page, expect

from exosuit import schemas
from tests.api.dashboard.conftest import screenshot
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.serve_fixture import serving

pytestmark = pytest.mark.slow

VERSION = {"OpenStack-API-Version": "accelerator 2.11"}
PROJECT = "p2" + "0" * 30
MANAGER = {"X-User-Id": "u-manager", "X-Project-Id": PROJECT, "X-Roles": "manager,member,reader"}
WAIT = 60.0
SICK = "pages-sick"
DRAINED = "pages-drained"
UNHEALTHY_PCI = "0000:21:00.0"
HEALTHY_PCI = "0000:22:00.0"
REASON = "NVIDIA XID 79 (fallen off the bus)"
CONSUMER = "pages-consumer"


def api(server, method: str, path: str, **kwargs) -> requests.Response:
    """A call to the API as an admin at microversion 2.11."""
    headers = {**VERSION, **kwargs.pop("headers", {})}
    return requests.request(method, server.url + path, headers=headers, timeout=10, **kwargs)


def api_json(server, path: str):
    r = api(server, "GET", path)
    assert r.status_code == 200, r.text
    return r.json()


def eventually(check, what: str):
    """``check()``'s first true answer within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.2)


def dashboard(server, route: str = "/") -> str:
    return f"{server.url}/dashboard#{route}"


def card(page: Page, title: str):
    """The section of the page whose heading is ``title``."""
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def confirm(page: Page, label: str) -> None:
    """Press the button named ``label`` in the confirmation dialog."""
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=label, exact=True).click()
    expect(dialog).to_have_count(0)


def report(server, hostname: str, devices, health: dict[str, dict] | None = None) -> None:
    """A host's inventory, sent through the agent API; ``health``: PCI address → the
    health its agent reports for that device."""
    body = snapshot(hostname, devices)
    for device in body["devices"]:
        if device["pci_address"] in (health or {}):
            device["health"] = health[device["pci_address"]]
    body["hash"] = schemas.snapshot_hash(
        body["devices"], body["driver_errors"], body.get("drivers")
    )
    r = api(server, "PUT", f"/agent/v1/hosts/{hostname}/inventory", json=body)
    assert r.status_code == 200, r.text


def device_at(server, hostname: str, pci: str) -> dict:
    devices = api_json(server, f"/v2/devices?hostname={hostname}")["devices"]
    return next(d for d in devices if d["pci_address"] == pci)


def simulated(server, device_type: str) -> dict:
    devices = api_json(server, f"/v2/devices?hostname={server.host}")["devices"]
    return next(d for d in devices if d["type"] == device_type)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("pages")) as started:
        yield started


@pytest.fixture(scope="module")
def world(server) -> dict:
    """The unhealthy device, the drained host and the claim holding the GPU."""
    report(
        server,
        SICK,
        [fpga(UNHEALTHY_PCI, handles=2), fpga(HEALTHY_PCI, handles=2)],
        health={UNHEALTHY_PCI: {"state": "unhealthy", "reason": REASON}},
    )
    report(server, DRAINED, [fpga("0000:31:00.0", handles=2)])
    r = api(server, "POST", f"/v2/hosts/{DRAINED}/drain")
    assert r.status_code == 200, r.text
    gpu = simulated(server, "GPU")
    (handle,) = api_json(server, f"/v2/attach_handles?device_uuid={gpu['uuid']}")["attach_handles"]
    r = api(
        server,
        "POST",
        "/v2/claims",
        json={"attach_handles": [handle["uuid"]], "consumer": CONSUMER},
    )
    assert r.status_code in (201, 202), r.text
    claim = r.json()
    sick = device_at(server, SICK, UNHEALTHY_PCI)
    assert sick["health"]["state"] == "unhealthy" and sick["health"]["offered"] is False, sick
    return {"claim": claim, "gpu": gpu, "handle": handle, "sick": sick}


def rows_of(page: Page):
    return card(page, "Devices").locator("tbody tr")


# -- what the pages show ------------------------------------------------------------


def test_fleet_shows_health_drain_activation_and_holders(server, world, open_page):
    """Every device of the API's list is a row whose badges say what the API says; only a
    device that a workload could take says "free"."""
    devices = api_json(server, "/v2/devices")["devices"]
    page = open_page(dashboard(server))
    rows = rows_of(page)
    expect(rows).to_have_count(len(devices))

    sick = rows.filter(has_text=UNHEALTHY_PCI)
    expect(sick).to_have_class("row-bad")
    expect(sick).to_contain_text("unhealthy · held back")
    expect(sick).to_contain_text("inactive")
    expect(sick).to_contain_text("not offered")
    drained = rows.filter(has=page.get_by_role("link", name=DRAINED, exact=True))
    expect(drained).to_contain_text("drained")
    expect(drained).to_contain_text("maintaining")
    expect(drained).to_have_class("row-warn")
    held = rows.filter(has_text=world["gpu"]["pci_address"]).filter(has_text=server.host)
    expect(held).to_contain_text("held 1")
    expect(held).to_have_class("row-warn")
    for device in devices:
        free = (
            not device["holders"]
            and device["status"] == "enabled"
            and device["activation"] == "ready"
            and device["health"]["offered"]
            and device["health"]["state"] != "unhealthy"
            and device["presence"] == "present"
        )
        row = rows.filter(has=page.locator(f'a[href="#/devices/{device["uuid"]}"]'))
        cell = row.locator("td").nth(5)  # Free/held
        if free:
            expect(cell).to_have_text("free")
        else:
            expect(cell).not_to_have_text("free")
    expect(card(page, "Hosts").locator("tbody tr").filter(has_text=DRAINED)).to_contain_text(
        "drained"
    )
    screenshot(page, "fleet-devices.png")


def test_fleet_filters_narrow_the_table_and_change_the_address(server, world, open_page):
    devices = api_json(server, "/v2/devices")["devices"]
    page = open_page(dashboard(server))
    rows = rows_of(page)
    expect(rows).to_have_count(len(devices))
    filters = card(page, "Devices").get_by_role("search")

    filters.get_by_label("Health", exact=True).select_option("unhealthy")
    expect(page).to_have_url(re.compile(r"#/\?health=unhealthy$"))
    unhealthy = [d for d in devices if d["health"]["state"] == "unhealthy"]
    expect(rows).to_have_count(len(unhealthy))
    expect(rows).to_contain_text([UNHEALTHY_PCI])

    card(page, "Devices").get_by_role("search").get_by_label("Host", exact=True).select_option(SICK)
    expect(page).to_have_url(re.compile(rf"#/\?host={SICK}&health=unhealthy$"))
    expect(rows).to_have_count(1)

    # The address alone gives the view: the API's own filter (hostname) and the page's.
    page.goto(dashboard(server, f"/?host={SICK}"))
    expect(rows).to_have_count(2)
    search = card(page, "Devices").get_by_role("search").get_by_label("Search")
    search.fill(HEALTHY_PCI)
    search.press("Enter")
    expect(page).to_have_url(re.compile(rf"q={re.escape(HEALTHY_PCI).replace(':', '%3A')}"))
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(HEALTHY_PCI)

    for route, wanted in (
        ("/?held=held", [d for d in devices if d["holders"]]),
        ("/?drain=drained", [d for d in devices if d["maintenance"] == "drained"]),
        (
            "/?activation=inactive&type=FPGA",
            [d for d in devices if d["activation"] == "inactive" and d["type"] == "FPGA"],
        ),
    ):
        page.goto(dashboard(server, route))
        expect(page.locator("#devices-count")).to_contain_text(f"{len(wanted)} of ")
        expect(rows).to_have_count(len(wanted))
        for device in wanted:
            expect(
                rows.filter(has=page.locator(f'a[href="#/devices/{device["uuid"]}"]'))
            ).to_have_count(1)
    page.get_by_role("link", name="Clear filters").click()
    expect(page).to_have_url(re.compile(r"#/$"))
    expect(rows).to_have_count(len(devices))


def test_host_page_shows_drivers_services_drain_and_generations(server, world, open_page):
    host = api_json(server, f"/v2/hosts/{server.host}")
    drivers = [
        d
        for d in api_json(server, f"/v2/drivers?hostname={server.host}")["drivers"]
        if d["hostname"] == server.host
    ]
    services = api_json(server, f"/v2/services?hostname={server.host}")["services"]
    assert drivers and services
    page = open_page(dashboard(server, f"/hosts/{server.host}"))

    report_card = card(page, "Report")
    observed = host["observed_generation"]
    expect(report_card).to_contain_text(
        f"desired {host['desired_generation']} · observed "
        f"{'none yet' if observed is None else observed}"
    )
    expect(report_card).to_contain_text("not drained")
    expect(card(page, "Drivers").locator("tbody tr")).to_have_count(len(drivers))
    for driver in drivers:
        expect(card(page, "Drivers")).to_contain_text(driver["name"])
    expect(card(page, "Services").locator("tbody tr")).to_have_count(len(services))
    # The GPU's handle is held by the claim: its consumer is shown, not an instance.
    held = card(page, "Attach handles").locator("tbody tr").filter(has_text="claim")
    expect(held).to_have_count(1)
    expect(held).to_contain_text(f"consumer {CONSUMER}")
    expect(held.locator(f'[title="{world["claim"]["uuid"]}"]')).to_have_count(1)
    expect(rows_of(page).filter(has_text=world["gpu"]["pci_address"])).to_contain_text("held 1")
    deployable = card(page, "Deployables").locator("tbody tr")
    expect(deployable.filter(has_text=world["handle"]["deployable_name"])).to_contain_text("held 1")
    screenshot(page, "host.png")

    drained = api_json(server, f"/v2/hosts/{DRAINED}")
    page.goto(dashboard(server, f"/hosts/{DRAINED}"))
    expect(card(page, "Report")).to_contain_text(drained["maintenance"])
    expect(rows_of(page)).to_contain_text(["drained"])


def test_device_page_shows_health_history_partitions_and_holder(server, world, open_page):
    sick = world["sick"]
    page = open_page(dashboard(server, f"/devices/{sick['uuid']}"))
    health = card(page, "Health")
    expect(health).to_contain_text("unhealthy")
    expect(health).to_contain_text(REASON)
    expect(health).to_contain_text("held back")
    events = api_json(server, f"/v2/audit_events?object_type=device&object_uuid={sick['uuid']}")[
        "audit_events"
    ]
    holds = [e for e in events if e["action"] == "health.hold"]
    assert holds, events
    expect(health.locator("tbody tr").filter(has_text="health.hold")).to_have_count(len(holds))
    facts = card(page, "Device")
    expect(facts).to_contain_text("inactive")
    expect(facts).to_contain_text("not offered")
    # Its attach handles are free of holders, and say they are not offered.
    handles = card(page, "Attach handles").locator("tbody tr")
    expect(handles).to_have_count(2)
    expect(handles.locator("td").nth(4)).to_have_text("not offered")
    expect(handles.locator("td").nth(11)).to_have_text("not offered")
    screenshot(page, "device-unhealthy.png")

    gpu = world["gpu"]
    page.goto(dashboard(server, f"/devices/{gpu['uuid']}"))
    expect(card(page, "Device")).to_contain_text(f"claim {world['claim']['uuid']}")
    row = card(page, "Attach handles").locator("tbody tr")
    expect(row).to_contain_text(f"consumer {CONSUMER}")
    slices = api_json(server, f"/v2/devices/{gpu['uuid']}/partitions")["slices"]
    expect(card(page, "Partitions").locator("tbody tr")).to_have_count(len(slices))


# -- the actions, as an admin ------------------------------------------------------------


def test_an_admin_drains_undrains_disables_and_enables_a_device(server, world, open_page):
    device = device_at(server, SICK, HEALTHY_PCI)
    page = open_page(dashboard(server, f"/devices/{device['uuid']}"))
    facts = card(page, "Device")

    facts.get_by_role("button", name="Drain").click()
    confirm(page, "Drain")
    expect(page.locator("#notice")).to_contain_text("is drained")
    assert device_at(server, SICK, HEALTHY_PCI)["maintenance"] == "drained"
    facts.get_by_role("button", name="Undrain").click()
    confirm(page, "Undrain")
    expect(page.locator("#notice")).to_contain_text("is undrained")
    assert device_at(server, SICK, HEALTHY_PCI)["maintenance"] is None

    # Cancel sends nothing.
    facts.get_by_role("button", name="Disable").click()
    confirm(page, "Cancel")
    assert device_at(server, SICK, HEALTHY_PCI)["status"] == "enabled"
    facts.get_by_role("button", name="Disable").click()
    confirm(page, "Disable")
    expect(page.locator("#notice")).to_contain_text("is disabled")
    assert device_at(server, SICK, HEALTHY_PCI)["status"] == "maintaining"
    facts.get_by_role("button", name="Enable").click()
    confirm(page, "Enable")
    expect(page.locator("#notice")).to_contain_text("is enabled")
    assert device_at(server, SICK, HEALTHY_PCI)["status"] == "enabled"


def test_an_admin_undrains_and_drains_a_host(server, world, open_page):
    page = open_page(dashboard(server, f"/hosts/{DRAINED}"))
    report_card = card(page, "Report")

    report_card.get_by_role("button", name="Undrain host").click()
    confirm(page, "Undrain host")
    expect(page.locator("#notice")).to_contain_text(f"Host {DRAINED} is undrained")
    assert api_json(server, f"/v2/hosts/{DRAINED}")["drained_at"] is None
    expect(report_card).to_contain_text("not drained")

    report_card.get_by_role("button", name="Drain host").click()
    confirm(page, "Drain host")
    expect(page.locator("#notice")).to_contain_text(f"Host {DRAINED} is drained")
    assert api_json(server, f"/v2/hosts/{DRAINED}")["maintenance"] == "drained"


def test_an_admin_marks_a_device_ready(server, world, open_page):
    device = device_at(server, SICK, HEALTHY_PCI)
    assert device["activation"] == "inactive"
    page = open_page(dashboard(server, f"/devices/{device['uuid']}"))

    card(page, "Device").get_by_role("button", name="Mark ready").click()
    confirm(page, "Mark ready")
    expect(page.locator("#notice")).to_contain_text(f"Device {device['uuid']}: changed")
    assert device_at(server, SICK, HEALTHY_PCI)["activation"] in ("activating", "ready")
    expect(card(page, "Device").get_by_role("button", name="Mark inactive")).to_be_visible()


def test_an_admin_clears_a_devices_health(server, world, open_page):
    sick = world["sick"]
    page = open_page(dashboard(server, f"/devices/{sick['uuid']}"))

    card(page, "Health").get_by_role("button", name="Clear health").click()
    confirm(page, "Clear health")
    expect(page.locator("#notice")).to_contain_text("is offered again")
    health = device_at(server, SICK, UNHEALTHY_PCI)["health"]
    assert (health["offered"], health["held_by"]) == (True, None)
    expect(card(page, "Health").locator("tbody tr").filter(has_text="health.clear")).to_have_count(
        1
    )
    expect(card(page, "Health").get_by_role("button", name="Clear health")).to_have_count(0)


def _image(server, name: str) -> dict:
    r = api(
        server,
        "POST",
        "/v2/images",
        json={
            "name": name,
            "format": "simulated",
            "function_id": str(uuid.uuid4()),
        },
    )
    assert r.status_code == 201, r.text
    image = r.json()
    r = api(
        server,
        "PUT",
        f"/v2/images/{image['uuid']}/file",
        data=b"a simulated bitstream\n",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 204, r.text
    return image


def test_an_admin_programs_the_fpga_with_an_image(server, world, open_page):
    image = _image(server, "pages-afu")
    fpga_device = simulated(server, "FPGA")
    (deployable,) = {
        h["deployable_uuid"]
        for h in api_json(server, f"/v2/attach_handles?device_uuid={fpga_device['uuid']}")[
            "attach_handles"
        ]
    }
    page = open_page(dashboard(server, f"/devices/{fpga_device['uuid']}"))
    programming = card(page, "Programming")

    programming.get_by_role("button", name="Program…").click()
    page.get_by_role("dialog").get_by_label("Image").select_option(image["uuid"])
    confirm(page, "Program…")
    expect(page.locator("#notice")).to_contain_text(f"of image {image['uuid']}")
    program = eventually(
        lambda: (
            (p := api_json(server, f"/v2/deployables/{deployable}/program"))["state"]
            in ("done", "failed")
            and p
        ),
        "the program ended",
    )
    assert (program["image_uuid"], program["state"]) == (image["uuid"], "done"), program
    expect(programming).to_contain_text("program.end")
    expect(programming).to_contain_text(f"{image['name']} ({image['uuid']})")
    screenshot(page, "device-programmed.png")


def test_an_admin_sets_a_partition_layout(server, world, open_page):
    fpga_device = simulated(server, "FPGA")
    page = open_page(dashboard(server, f"/devices/{fpga_device['uuid']}"))
    partitions = card(page, "Partitions")

    partitions.get_by_role("button", name="Set partition layout…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Kind").select_option("vfs")
    dialog.get_by_label("Count").fill("8")
    confirm(page, "Set partition layout…")
    expect(page.locator("#notice")).to_contain_text('partition layout {"vfs":8}')
    eventually(
        lambda: (
            (p := api_json(server, f"/v2/devices/{fpga_device['uuid']}/partitions"))["state"]
            == "applied"
            and len(p["slices"]) == 8
        ),
        "the agent applied 8 functions",
    )
    expect(partitions).to_contain_text("applied")
    expect(partitions.locator("tbody tr")).to_have_count(8)


# -- a refused action shows the API's error whole ----------------------------------------


def _refusal(server, method: str, path: str, body=None) -> str:
    """The API's own message refusing a manager ``method path``."""
    r = api(server, method, path, json=body, headers=MANAGER)
    assert r.status_code == 403, r.text
    return json.loads(r.json()["error_message"])["faultstring"]


def test_a_refused_action_shows_the_apis_error_whole(server, world, open_page):
    """A manager reads the pages but may change nothing: every button is drawn (the page
    is told /v2/permissions does not exist, as on an older API), each click is refused,
    the notice holds the API's message whole, and nothing changed."""
    device = device_at(server, SICK, HEALTHY_PCI)
    fpga_device = simulated(server, "FPGA")
    page = open_page(dashboard(server, "/"), headers=MANAGER)
    page.route("**/v2/permissions", lambda route: route.fulfill(status=404, body=""))
    page.reload()  # the page reads its permissions once: again, through the route
    notice = page.locator("#notice span")

    def refused(route: str, section: str, label: str, message: str, fill=None) -> None:
        page.goto(dashboard(server, route))
        card(page, section).get_by_role("button", name=label).click()
        if fill:
            fill(page.get_by_role("dialog"))
        confirm(page, label)
        expect(notice).to_have_text(f"{label} refused (HTTP 403): {message}")

    uuid_ = device["uuid"]
    refused(
        f"/devices/{uuid_}",
        "Device",
        "Drain",
        _refusal(server, "POST", f"/v2/devices/{uuid_}/drain"),
    )
    refused(
        f"/devices/{uuid_}",
        "Device",
        "Disable",
        _refusal(server, "POST", f"/v2/devices/{uuid_}/disable"),
    )
    state = device_at(server, SICK, HEALTHY_PCI)["activation"]
    label = "Mark ready" if state == "inactive" else "Mark inactive"
    refused(
        f"/devices/{uuid_}",
        "Device",
        label,
        _refusal(
            server,
            "POST",
            "/v2/device_activations",
            {"state": "ready" if state == "inactive" else "inactive", "uuids": [uuid_]},
        ),
    )
    refused(
        f"/hosts/{SICK}",
        "Report",
        "Drain host",
        _refusal(server, "POST", f"/v2/hosts/{SICK}/drain"),
    )
    refused(
        f"/devices/{fpga_device['uuid']}",
        "Partitions",
        "Set partition layout…",
        _refusal(server, "PUT", f"/v2/devices/{fpga_device['uuid']}/partitions", {"vfs": 4}),
        fill=lambda dialog: dialog.get_by_label("Count").fill("4"),
    )

    after = device_at(server, SICK, HEALTHY_PCI)
    assert (after["status"], after["maintenance"], after["activation"]) == (
        device["status"],
        device["maintenance"],
        device["activation"],
    )
    assert api_json(server, f"/v2/hosts/{SICK}")["drained_at"] is None
