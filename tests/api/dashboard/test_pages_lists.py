"""The console's list pages in a real browser, against a real ``exosuit serve`` (noauth).

One ``exosuit serve`` for the module; its data made through the API (a device profile,
claims with their ARQs, an image, a failed job). Each page is compared with what the API
answers at 2.11; the audit filters narrow the list and change the page's address; the
actions (Release, Retry, Why not here?) are clicked, confirmed in their dialog, and their
effect read back through the API; a refusal is shown with the API's message whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid

import pytest
import requests
import sqlalchemy as sa
from playwright.sync_api import Page, expect

from exosuit.db import models
from exosuit.db.api import Database
from tests.api.dashboard.conftest import PHONE, make_failed_job
from tests.helpers.serve_fixture import serving

pytestmark = pytest.mark.slow

VERSION = {"OpenStack-API-Version": "accelerator 2.11"}
PROJECT = "b2" + "0" * 30
MEMBER = {"X-User-Id": "u-member", "X-Project-Id": PROJECT, "X-Roles": "member,reader"}
MANAGER = {"X-User-Id": "u-manager", "X-Project-Id": PROJECT, "X-Roles": "manager,member,reader"}
READER = {"X-User-Id": "u-reader", "X-Project-Id": PROJECT, "X-Roles": "reader"}
PROFILE = "lists-fpga"
WAIT = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("lists")) as started:
        r = api(
            started,
            "POST",
            "/v2/device_profiles",
            json=[{"name": PROFILE, "groups": [{"resources:FPGA": "1"}]}],
        )
        assert r.status_code == 201, r.text
        yield started


def api(server, method: str, path: str, **kwargs) -> requests.Response:
    """A call to the API at 2.11, as an admin unless ``headers`` say otherwise."""
    headers = {**VERSION, **kwargs.pop("headers", {})}
    return requests.request(method, server.url + path, headers=headers, timeout=10, **kwargs)


def api_json(server, path: str, headers: dict[str, str] | None = None):
    r = api(server, "GET", path, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()


def fault(response: requests.Response) -> str:
    """The API's own message of a refusal (Cyborg's envelope)."""
    return json.loads(response.json()["error_message"])["faultstring"]


def offers_by_permission(server) -> bool:
    """Whether the API answers GET /v2/permissions (2.11): then the console draws a
    button only for a caller who passes its rule, else every button (the API decides)."""
    return api(server, "GET", "/v2/permissions").status_code == 200


def pause_refresh(page: Page) -> None:
    """Stop the page's refresh loop as a hidden tab does (app.js), so that what is on
    screen stays while the test changes the API's state under it."""
    page.evaluate(
        """() => {
            Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    expect(page.locator("#refreshed")).to_have_text("Paused while the tab is hidden")


def expect_refusal_or_no_button(
    server,
    page: Page,
    scope,
    label: str,
    refused,
    *,
    rule: str,
    caller: dict[str, str],
    confirmed: bool = True,
) -> None:
    """A ``caller`` the API refuses: not offered ``label`` when the console knows the
    caller's permissions (GET /v2/permissions: ``rule``, the button's, is one of them, the
    caller fails it and an admin passes it); otherwise the click (``confirmed`` in its
    dialog) shows the API's words whole."""
    button = scope.get_by_role("button", name=label)
    if offers_by_permission(server):
        assert api_json(server, "/v2/permissions", headers=caller)["permissions"][rule] is False
        assert api_json(server, "/v2/permissions")["permissions"][rule] is True
        expect(button).to_have_count(0)
        return
    button.click()
    if confirmed:
        confirm(page, label)
    expect(page.locator("#notice")).to_have_text(
        re.compile(re.escape(f"{label} refused (HTTP {refused.status_code}): {fault(refused)}"))
    )


def dashboard(server, route: str) -> str:
    return f"{server.url}/dashboard#{route}"


def card(page: Page, title: str):
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def confirm(page: Page, label: str) -> None:
    """Press the button named ``label`` of the confirmation dialog."""
    page.get_by_role("dialog").get_by_role("button", name=label, exact=True).click()


def row_of(page: Page, uuid_: str):
    """The table row holding ``uuid_`` (shown short, whole as a tooltip)."""
    return page.locator("tbody tr").filter(has=page.locator(f'[title="{uuid_}"]'))


def expect_device_state(locator, device: dict) -> None:
    """``deviceState``'s badges: health, drain and activation as the API says."""
    health = device["health"]
    held = [] if health["offered"] else [f"held back by {health['held_by']}"]
    if health["state"] != "ok":
        words = [health["state"], *held]
    else:
        words = held or ["healthy"]
    drain = device["maintenance"] or (
        "in service" if device["status"] == "enabled" else device["status"]
    )
    badges = locator.locator(".device-state .badge")
    expect(badges.nth(0)).to_have_text(" · ".join(words))
    expect(badges.nth(1)).to_have_text(drain)
    expect(badges.nth(2)).to_have_text(device["activation"])


@pytest.fixture
def claim(server):
    """A bound claim of PROJECT's member (released afterwards, idempotent)."""
    consumer = f"lists-{uuid.uuid4().hex[:6]}"
    r = api(
        server,
        "POST",
        "/v2/claims",
        json={"device_profile_name": PROFILE, "consumer": consumer},
        headers=MEMBER,
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["state"] == "bound" and made["devices"], made
    yield made
    r = api(server, "DELETE", f"/v2/claims/{made['uuid']}")
    assert r.status_code == 204, r.text


@pytest.fixture(scope="module")
def failed_job(server) -> dict:
    return make_failed_job(server, "lists_test", {"why": "a test"})


# -- claims ----------------------------------------------------------------------------


def test_claims_page_lists_filters_and_shows_a_claim_with_its_devices(server, claim, open_page):
    page = open_page(dashboard(server, "/claims"))
    row = row_of(page, claim["uuid"])
    expect(row).to_contain_text("bound")
    expect(row).to_contain_text(claim["consumer"])
    expect(row).to_contain_text(PROFILE)
    expect(row).to_contain_text(claim["hostname"])

    # The state filter is the API's: no released claim is this one.
    page.locator("nav.filters").get_by_role("link", name="released", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/claims\?state=released$"))
    expect(page.locator("main h1")).to_have_text("Claims: released")
    expect(row_of(page, claim["uuid"])).to_have_count(0)
    # The consumer filter, through the form: its field in the address.
    page.locator("nav.filters").get_by_role("link", name="all", exact=True).click()
    expect(page.locator("main h1")).to_have_text("Claims")  # drawn anew: its own form
    page.get_by_label("Consumer").fill(claim["consumer"])
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(rf"#/claims\?consumer={claim['consumer']}$"))
    expect(page.locator("tbody tr")).to_have_count(1)

    row_of(page, claim["uuid"]).get_by_role("link").first.click()
    expect(page.locator("main h1")).to_have_text(f"Claim {claim['uuid'].split('-')[0]}")
    facts = card(page, "Claim")
    for value in (claim["uuid"], claim["consumer"], claim["hostname"], PROJECT):
        expect(facts).to_contain_text(value)
    devices = card(page, "Devices").locator("tbody tr")
    expect(devices).to_have_count(len(claim["devices"]))
    for held in claim["devices"]:
        device = api_json(server, f"/v2/devices/{held['device_uuid']}")
        row = devices.filter(has=page.locator(f'[title="{held["attach_handle_uuid"]}"]'))
        expect(row).to_contain_text(f"{device['type']} {device['model']}")
        expect_device_state(row, device)


def test_a_reader_is_refused_release_with_the_apis_words(server, claim, open_page):
    refused = api(server, "DELETE", f"/v2/claims/{claim['uuid']}", headers=READER)
    assert refused.status_code == 403, refused.text
    page = open_page(dashboard(server, f"/claims/{claim['uuid']}"), headers=READER)
    expect(card(page, "Claim")).to_contain_text(claim["consumer"])

    expect_refusal_or_no_button(
        server,
        page,
        card(page, "Claim"),
        "Release",
        refused,
        rule="exosuit:claim:delete",
        caller=READER,
    )

    assert api_json(server, f"/v2/claims/{claim['uuid']}")["state"] == "bound"


def test_an_admin_releases_a_claim_after_confirming(server, claim, open_page):
    page = open_page(dashboard(server, f"/claims/{claim['uuid']}"))
    facts = card(page, "Claim")

    facts.get_by_role("button", name="Release").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(claim["uuid"])
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert api_json(server, f"/v2/claims/{claim['uuid']}")["state"] == "bound"

    facts.get_by_role("button", name="Release").click()
    confirm(page, "Release")

    expect(page.locator("#notice")).to_contain_text(f"Claim {claim['uuid']} is released")
    expect(facts).to_contain_text("released")
    expect(facts.get_by_role("button", name="Release")).to_have_count(0)
    assert api_json(server, f"/v2/claims/{claim['uuid']}")["state"] == "released"


def test_a_claimed_device_held_back_and_draining_shows_it_on_the_claim(server, claim, open_page):
    """deviceState's badges follow the device: an operator's hold and a drain."""
    device_uuid = claim["devices"][0]["device_uuid"]
    base = f"/v2/devices/{device_uuid}"
    page = open_page(dashboard(server, f"/claims/{claim['uuid']}"))
    row = card(page, "Devices").locator("tbody tr").first
    expect(row.locator(".device-state .badge").nth(1)).to_have_text("in service")
    try:
        r = api(server, "POST", f"{base}/health", json={"hold": True, "reason": "lists test"})
        assert r.status_code == 200, r.text
        r = api(server, "POST", f"{base}/drain")
        assert r.status_code in (200, 202), r.text
        device = api_json(server, base)
        assert device["maintenance"] == "draining" and device["health"]["offered"] is False

        expect_device_state(row, device)  # without a reload: the next refresh
        badges = row.locator(".device-state .badge")
        # The agent still reports it ok: the operator's hold is what keeps it back.
        assert device["health"]["state"] == "ok", device["health"]
        expect(badges.nth(0)).to_have_text("held back by operator")
        expect(badges.nth(0)).to_have_attribute("title", device["health"]["reason"])
        expect(badges.nth(1)).to_have_text("draining")
    finally:
        r = api(server, "POST", f"{base}/undrain")
        assert r.status_code in (200, 202), r.text
        r = api(server, "POST", f"{base}/health", json={"clear": True})
        assert r.status_code == 200, r.text
    expect(row.locator(".device-state .badge").nth(1)).to_have_text("in service")


# -- ARQs --------------------------------------------------------------------------------


def test_arqs_page_shows_the_claims_arq_with_its_device_and_claim(server, claim, open_page):
    held = claim["devices"][0]
    arq = api_json(server, f"/v2/accelerator_requests/{held['arq_uuid']}")
    assert arq["claim_uuid"] == claim["uuid"]
    device = api_json(server, f"/v2/devices/{held['device_uuid']}")
    page = open_page(dashboard(server, "/arqs"))

    row = row_of(page, arq["uuid"])
    expect(row).to_contain_text(arq["state"])
    expect(row).to_contain_text(f"{device['type']} {device['model']}")
    expect_device_state(row, device)
    expect(row.locator(f'[title="{claim["uuid"]}"]')).to_be_visible()

    row.get_by_role("link").first.click()
    expect(page.locator("main h1")).to_have_text(f"ARQ {arq['uuid'].split('-')[0]}")
    facts = card(page, "Accelerator request")
    for value in (arq["uuid"], arq["hostname"], arq["device_rp_uuid"], arq["attach_handle_uuid"]):
        expect(facts).to_contain_text(value)
    expect_device_state(facts, device)
    facts.locator(f'a:has([title="{claim["uuid"]}"])').click()
    expect(page).to_have_url(re.compile(rf"#/claims/{claim['uuid']}$"))


# -- images ------------------------------------------------------------------------------


def test_images_pages_show_checksums_members_and_what_runs_it(server, open_page):
    """An image shared with a project and loaded on the simulated FPGA (programmed through
    the API; the agent of ``exosuit serve`` loads it)."""
    data = b"lists simulated bitstream\n" * 40
    digest = hashlib.sha256(data).hexdigest()
    r = api(
        server,
        "POST",
        "/v2/images",
        json={"name": "lists-afu", "format": "simulated", "visibility": "shared", "sha256": digest},
    )
    assert r.status_code == 201, r.text
    made = r.json()
    r = api(server, "PUT", f"/v2/images/{made['uuid']}/file", data=data)
    assert r.status_code == 204, r.text
    r = api(server, "PUT", f"/v2/images/{made['uuid']}/members/{PROJECT}")
    assert r.status_code == 200, r.text
    fpga = next(
        d for d in api_json(server, "/v2/deployables")["deployables"] if d["driver_name"] == "fake"
    )
    program = [{"path": "/program", "op": "replace", "value": [{"image_uuid": made["uuid"]}]}]
    r = api(server, "PATCH", f"/v2/deployables/{fpga['uuid']}/program", json=program)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 2 * WAIT
    while api_json(server, f"/v2/deployables/{fpga['uuid']}")["bitstream_id"] != made["uuid"]:
        assert time.monotonic() < deadline, "the simulated FPGA never loaded the image"
        time.sleep(0.2)
    image = api_json(server, f"/v2/images/{made['uuid']}")
    [handle, *_] = api_json(server, f"/v2/attach_handles?deployable_uuid={fpga['uuid']}")[
        "attach_handles"
    ]
    device = api_json(server, f"/v2/devices/{handle['device_uuid']}")
    page = open_page(dashboard(server, "/images"))

    row = page.locator("tbody tr").filter(has=page.get_by_role("link", name="lists-afu"))
    expect(row).to_contain_text("active")
    expect(row).to_contain_text("shared")
    expect(row.locator(f'[title="{digest}"]')).to_be_visible()
    page.locator("nav.filters").get_by_role("link", name="queued", exact=True).click()
    expect(page.get_by_role("link", name="lists-afu")).to_have_count(0)
    page.locator("nav.filters").get_by_role("link", name="active", exact=True).click()
    page.get_by_role("link", name="lists-afu").click()

    expect(page.locator("main h1")).to_have_text("Image lists-afu")
    facts = card(page, "Image")
    expect(facts).to_contain_text(digest)
    expect(facts).to_contain_text(f"{image['size'] / 1024:.1f} KiB")
    expect(card(page, "Shared with").locator("tbody tr")).to_have_text([re.compile(PROJECT)])
    running = card(page, "Running on").locator("tbody tr")
    expect(running).to_have_count(1)
    expect(running).to_contain_text(fpga["name"])
    expect(running).to_contain_text(f"{device['type']} {device['model']}")
    expect(running.get_by_role("link", name=server.host, exact=True)).to_be_visible()
    expect_device_state(running, device)


# -- drivers and services ----------------------------------------------------------------


def test_drivers_page_shows_each_hosts_drivers_and_services(server, open_page):
    drivers = api_json(server, f"/v2/drivers?hostname={server.host}")["drivers"]
    services = api_json(server, f"/v2/services?hostname={server.host}")["services"]
    assert drivers, "the simulated host reports its drivers"
    page = open_page(dashboard(server, "/drivers"))

    host = page.locator("section.card").filter(
        has=page.get_by_role("heading", name=server.host, exact=True)
    )
    tables = host.locator("table")
    expect(tables.nth(0).locator("tbody tr")).to_have_count(len(drivers))
    for driver in drivers:
        expect(tables.nth(0)).to_contain_text(driver["name"])
    if services:
        expect(tables.nth(1).locator("tbody tr")).to_have_count(len(services))
        service = services[0]
        device = api_json(server, f"/v2/devices/{service['device_uuid']}")
        row = tables.nth(1).locator("tbody tr").filter(has_text=service["name"]).first
        expect_device_state(row, device)
    else:
        expect(host).to_contain_text("No services.")
    page.get_by_label("Host").fill(server.host)
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(rf"#/drivers\?hostname={server.host}$"))
    expect(page.locator("main h1")).to_have_text(f"Drivers and services of {server.host}")


# -- audit -----------------------------------------------------------------------------


def test_audit_filters_narrow_the_list_and_change_the_address(server, claim, open_page):
    page = open_page(dashboard(server, "/audit"))
    expect(page.locator("main h1")).to_have_text("Audit trail")
    expect(page.locator("tbody tr").first).to_be_visible()

    page.get_by_label("Object type").fill("claim")
    page.get_by_label("Action").fill("create")
    page.get_by_role("button", name="Filter").click()

    expect(page).to_have_url(re.compile(r"#/audit\?object_type=claim&action=create$"))
    wanted = api_json(server, "/v2/audit_events?object_type=claim&action=create&limit=200")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(len(wanted["audit_events"]))
    expect(row_of(page, claim["uuid"])).to_have_count(1)
    expect(rows.locator("td:nth-child(4)")).to_have_text(["create"] * len(wanted["audit_events"]))

    # The actor: the member who made the claim.
    page.get_by_label("Actor").fill("user:u-member")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"actor=user%3Au-member"))
    expect(row_of(page, claim["uuid"])).to_have_count(1)

    # Time: the last hour's (the claim was made a moment ago), the other filters kept.
    page.get_by_role("button", name="Last hour").click()
    expect(page).to_have_url(
        re.compile(r"#/audit\?object_type=claim&actor=user%3Au-member&action=create&since=")
    )
    since = page.evaluate("new URLSearchParams(location.hash.split('?')[1]).get('since')")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", since), since
    expect(page.get_by_label("Since")).to_have_value(since)
    expect(row_of(page, claim["uuid"])).to_have_count(1)

    # Nothing was recorded in 2999; a time that is none is the API's 400, shown whole.
    page.goto(dashboard(server, "/audit?object_type=claim&since=2999-01-01T00:00:00Z"))
    expect(page.get_by_text("No audit records match.")).to_be_visible()
    expect(page.get_by_label("Since")).to_have_value("2999-01-01T00:00:00Z")
    bad = api(server, "GET", "/v2/audit_events?since=yesterday")
    assert bad.status_code == 400, bad.text
    page.get_by_label("Since").fill("yesterday")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(".failure")).to_contain_text("HTTP 400")
    expect(page.locator(".failure")).to_contain_text(fault(bad))

    # A record's own page.
    event = wanted["audit_events"][0]
    page.goto(dashboard(server, f"/audit/{event['id']}"))
    expect(card(page, "Record")).to_contain_text(event["actor"])
    expect(card(page, "After")).to_contain_text(json.dumps(event["after"], indent=2)[:40])


# -- jobs --------------------------------------------------------------------------------


def test_jobs_page_names_periodic_jobs_and_filters_by_kind(server, failed_job, open_page):
    periodic = {j["id"]: j for j in api_json(server, "/v2/jobs?limit=200")["jobs"] if j["id"] < 0}
    assert periodic, "exosuit serve's conductor has periodic jobs (claim_expiry …)"
    page = open_page(dashboard(server, "/jobs"))
    expect(page.get_by_role("link", name=str(failed_job["id"]), exact=True)).to_be_visible()
    # Each row's first cell links to the job's page; a periodic job is named so, never
    # by its negative id (rows may be added meanwhile: each is checked, not the count).
    cells = page.eval_on_selector_all(
        "tbody tr td:nth-child(1) a",
        "links => links.map(a => [a.getAttribute('href'), a.textContent])",
    )
    named = {int(href.rsplit("/", 1)[1]): text for href, text in cells}
    for job_id, text in named.items():
        assert text == ("periodic" if job_id < 0 else str(job_id)), (job_id, text)
    assert set(periodic) <= set(named), (periodic, named)

    page.get_by_label("Kind").fill("lists_test")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"#/jobs\?kind=lists_test$"))
    expect(page.locator("tbody tr")).to_have_count(1)
    page.get_by_role("link", name=str(failed_job["id"]), exact=True).click()

    expect(page).to_have_url(re.compile(rf"#/jobs/{failed_job['id']}$"))
    expect(page.locator("main h1")).to_have_text(f"Job {failed_job['id']}: lists_test")
    expect(card(page, "Last error").locator("pre")).to_have_text(failed_job["last_error"])
    expect(card(page, "Payload")).to_contain_text('"why": "a test"')


def test_a_manager_is_refused_retry_with_the_apis_words(server, failed_job, open_page):
    refused = api(server, "POST", f"/v2/jobs/{failed_job['id']}/retry", headers=MANAGER)
    assert refused.status_code == 403, refused.text
    before = api_json(server, f"/v2/jobs/{failed_job['id']}")
    assert before["state"] == "failed", before
    page = open_page(dashboard(server, f"/jobs/{failed_job['id']}"), headers=MANAGER)
    expect(card(page, "Job")).to_contain_text("failed")

    expect_refusal_or_no_button(
        server, page, card(page, "Job"), "Retry", refused, rule="exosuit:job:retry", caller=MANAGER
    )

    job = api_json(server, f"/v2/jobs/{failed_job['id']}")
    assert (job["state"], job["updated_at"]) == ("failed", before["updated_at"])


def test_retrying_a_job_no_longer_failed_shows_the_apis_409_whole(server, open_page):
    """An admin's Retry of a job that succeeded since the page was drawn (its row
    changed in serve's database under the paused page): the API's 409, word for word."""
    job = make_failed_job(server, "lists_test_409")
    page = open_page(dashboard(server, f"/jobs/{job['id']}"))
    retry = card(page, "Job").get_by_role("button", name="Retry")
    expect(retry).to_be_visible()
    pause_refresh(page)
    db = Database(f"sqlite:///{server.data_dir}/exosuit.sqlite")
    try:
        db.write(
            lambda conn: conn.execute(
                sa.update(models.jobs)
                .where(models.jobs.c.id == job["id"])
                .values(state="succeeded")
            )
        )
    finally:
        db.dispose()
    refused = api(server, "POST", f"/v2/jobs/{job['id']}/retry")
    assert refused.status_code == 409, refused.text

    retry.click()
    confirm(page, "Retry")

    expect(page.locator("#notice")).to_have_text(
        re.compile(re.escape(f"Retry refused (HTTP 409): {fault(refused)}"))
    )
    assert api_json(server, f"/v2/jobs/{job['id']}")["state"] == "succeeded"


def test_an_admin_retries_a_job_from_its_page(server, failed_job, open_page):
    page = open_page(dashboard(server, f"/jobs/{failed_job['id']}"))

    card(page, "Job").get_by_role("button", name="Retry").click()
    expect(page.get_by_role("dialog")).to_contain_text("attempts are reset")
    confirm(page, "Retry")

    expect(page.locator("#notice")).to_contain_text(f"Job {failed_job['id']} (lists_test)")
    deadline = time.monotonic() + WAIT
    while (
        api_json(server, f"/v2/jobs/{failed_job['id']}")["updated_at"] == failed_job["updated_at"]
    ):
        assert time.monotonic() < deadline, "the retried job was not run again"
        time.sleep(0.1)


# -- profiles: Why not here? -------------------------------------------------------------


def test_why_not_here_shows_the_dry_runs_verdicts_per_host_and_device(server, claim, open_page):
    page = open_page(dashboard(server, "/profiles"))
    page.get_by_role("link", name=PROFILE, exact=True).click()
    expect(page.locator("main h1")).to_have_text(f"Profile {PROFILE}")
    expect(card(page, "Groups")).to_contain_text("resources:FPGA=1")

    card(page, "Profile").get_by_role("button", name="Why not here?").click()

    expected = api(
        server, "POST", "/v2/claims", json={"device_profile_name": PROFILE, "dry_run": True}
    ).json()
    why = card(page, "Why not here?")
    expect(why).to_be_visible()
    if expected["hostname"]:
        expect(page.locator("#notice")).to_contain_text(f"on {expected['hostname']}")
    hosts = why.locator("table").first.locator("tbody tr")
    expect(hosts).to_have_count(len(expected["hosts"]))
    for host in expected["hosts"]:
        row = hosts.filter(has=page.get_by_role("link", name=host["hostname"], exact=True))
        expect(row.locator("td").nth(1)).to_have_text(host["verdict"])
        expect(row.locator("td").nth(2)).to_have_text(host["reason"])
        for verdict in host["devices"]:
            device_row = why.locator("tbody tr").filter(has_text=verdict["deployable_name"])
            expect(device_row.first).to_contain_text(verdict["verdict"])
            expect(device_row.first).to_contain_text(verdict["reason"])
    # The claim of this test holds a handle: nothing was held by the dry run.
    claims = api_json(server, "/v2/claims?state=bound")["claims"]
    assert [c["uuid"] for c in claims] == [claim["uuid"]]


def test_a_reader_is_refused_why_not_here_with_the_apis_words(server, open_page):
    refused = api(
        server,
        "POST",
        "/v2/claims",
        json={"device_profile_name": PROFILE, "dry_run": True},
        headers=READER,
    )
    assert refused.status_code == 403, refused.text
    page = open_page(dashboard(server, f"/profiles/{PROFILE}"), headers=READER)
    expect(card(page, "Groups")).to_contain_text("resources:FPGA=1")

    expect_refusal_or_no_button(
        server,
        page,
        card(page, "Profile"),
        "Why not here?",
        refused,
        rule="exosuit:claim:create",
        caller=READER,
        confirmed=False,
    )

    expect(card(page, "Why not here?")).to_have_count(0)


def test_why_not_here_for_a_profile_deleted_meanwhile_shows_the_apis_404_whole(server, open_page):
    name = f"lists-gone-{uuid.uuid4().hex[:6]}"
    r = api(
        server,
        "POST",
        "/v2/device_profiles",
        json=[{"name": name, "groups": [{"resources:GPU": "1"}]}],
    )
    assert r.status_code == 201, r.text
    page = open_page(dashboard(server, f"/profiles/{name}"))
    why = card(page, "Profile").get_by_role("button", name="Why not here?")
    expect(why).to_be_visible()
    pause_refresh(page)
    r = api(server, "DELETE", f"/v2/device_profiles/{name}")
    assert r.status_code == 204, r.text
    refused = api(server, "POST", "/v2/claims", json={"device_profile_name": name, "dry_run": True})
    assert refused.status_code == 404, refused.text

    why.click()

    expect(page.locator("#notice")).to_have_text(
        re.compile(re.escape(f"Why not here? refused (HTTP 404): {fault(refused)}"))
    )


# -- a phone -----------------------------------------------------------------------------


def test_the_list_pages_fit_a_phone_sized_screen(server, claim, failed_job, open_page):
    page = open_page(dashboard(server, "/claims"), viewport=PHONE)
    routes = {
        "/claims": "Claims",
        f"/claims/{claim['uuid']}": f"Claim {claim['uuid'].split('-')[0]}",
        "/arqs": "Accelerator requests",
        f"/arqs/{claim['devices'][0]['arq_uuid']}": f"ARQ {claim['devices'][0]['arq_uuid'][:8]}",
        "/profiles": "Device profiles",
        f"/profiles/{PROFILE}": f"Profile {PROFILE}",
        "/images": "Images",
        "/drivers": "Drivers and services",
        "/audit": "Audit trail",
        "/jobs": "Jobs",
        f"/jobs/{failed_job['id']}": f"Job {failed_job['id']}: lists_test",
    }
    for route, heading in routes.items():
        page.goto(dashboard(server, route))
        expect(page.locator("main h1")).to_have_text(heading)
        expect(page.locator("main .card").first).to_be_visible()
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, document.body.scrollWidth,"
            " document.documentElement.clientWidth]"
        )
        assert max(widths[:2]) <= widths[2], f"{route} is wider than the screen: {widths}"
