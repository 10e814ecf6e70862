"""The console's walk: every page of its registry, in a real browser, against a real
``exosuit serve`` holding a fleet worth looking at.

One ``exosuit serve`` for the module (noauth: the browser is its admin). Through the API
and the agent API it gets an unhealthy device (a host whose agent reports its FPGA
unhealthy), a drained host, a claim, an accelerator request, a failed job, an image and a
recorded usage history (the simulated GPU's chart), next to the simulated host's own
devices. The walk reads the page registry from the page
itself (``window.exosuitPages``, app.js's PAGES) and visits each route with the
parameters ``WALK`` fills it with: a route the map lacks fails the test, so a page
added later joins the walk. On every page: no script error, its heading drawn (not
"Not found"), no failure box.

With ``EXOSUIT_SCREENSHOTS=FOLDER`` each visit is saved as ``FOLDER/NAME.png`` (a
full-page screenshot): ``make screenshots`` writes doc/dashboard/ this way, which
doc/dashboard.md shows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
from playwright.sync_api import expect

from exosuit.db import models
from exosuit.db.api import Database
from exosuit.drivers.base import HEALTH_UNHEALTHY, Health
from tests.api.dashboard.conftest import LAPTOP, make_failed_job
from tests.helpers.inventory import fpga
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

VERSION = {"OpenStack-API-Version": "accelerator 2.10"}
WAIT = 60.0
SICK_HOST = "walk-sick-host"
DRAINED_HOST = "walk-drained-host"
SICK_REASON = "PCIe AER: fatal errors reported (walk)"


@dataclasses.dataclass
class Fleet:
    """What the walk's server holds, to fill the routes' parameters with."""

    url: str
    host: str  # the simulated host of ``exosuit serve``
    sick_device: str = ""
    claimed_device: str = ""
    claim: str = ""
    arq: str = ""
    failed_job: int = 0
    image: str = ""
    audit_event: int = 0
    charted_device: str = ""


# route template (app.js) → the visits of it: (screenshot name, the hash path it opens).
# A page added to app.js's PAGES must get its line here (test_every_page_is_walked).
WALK: dict[str, list[tuple[str, Callable[[Fleet], str]]]] = {
    "/": [("fleet", lambda f: "/")],
    "/hosts/:hostname": [
        ("host", lambda f: f"/hosts/{f.host}"),
        ("host-drained", lambda f: f"/hosts/{DRAINED_HOST}"),
        ("host-unhealthy-device", lambda f: f"/hosts/{SICK_HOST}"),
    ],
    "/devices/:uuid": [
        ("device-unhealthy", lambda f: f"/devices/{f.sick_device}"),
        ("device-claimed", lambda f: f"/devices/{f.claimed_device}"),
        ("device-usage-chart", lambda f: f"/devices/{f.charted_device}"),
    ],
    "/claims": [("claims", lambda f: "/claims")],
    "/claims/:uuid": [("claim", lambda f: f"/claims/{f.claim}")],
    "/arqs": [("arqs", lambda f: "/arqs")],
    "/arqs/:uuid": [("arq", lambda f: f"/arqs/{f.arq}")],
    "/profiles": [("profiles", lambda f: "/profiles")],
    "/profiles/:name": [("profile", lambda f: "/profiles/walk-fpga")],
    "/images": [("images", lambda f: "/images")],
    "/images/:uuid": [("image", lambda f: f"/images/{f.image}")],
    "/drivers": [("drivers", lambda f: "/drivers")],
    "/audit": [("audit", lambda f: "/audit")],
    "/audit/:id": [("audit-event", lambda f: f"/audit/{f.audit_event}")],
    "/jobs": [
        ("jobs", lambda f: "/jobs"),
        ("jobs-failed", lambda f: "/jobs?state=failed"),
    ],
    "/jobs/:id": [("job-failed", lambda f: f"/jobs/{f.failed_job}")],
}


def _api(fleet_url: str, method: str, path: str, version: str = "2.10", **kwargs):
    headers = {"OpenStack-API-Version": f"accelerator {version}"}
    r = requests.request(method, fleet_url + path, headers=headers, timeout=30, **kwargs)
    assert r.status_code < 300, (method, path, r.status_code, r.text)
    return r.json() if r.content else None


class _Sick:
    """A driver whose one FPGA its health check finds unhealthy (what the agent sends)."""

    name = "static"

    def discover(self):
        return [fpga("0000:0d:00.0", handles=2)]

    def health(self, device):
        return Health(HEALTH_UNHEALTHY, (SICK_REASON,))


def _report(url: str, hostname: str, drivers) -> None:
    from exosuit.agent.snapshot import build_snapshot

    _api(
        url, "PUT", f"/agent/v1/hosts/{hostname}/inventory", json=build_snapshot(hostname, drivers)
    )


class _Healthy(_Sick):
    def health(self, device):
        return Health()


def _past_history(server, hours: int = 5, every_minutes: int = 10) -> None:
    """The hours before the walk, for the charts: the conductor's first recorded bucket of
    each device and model copied into a bucket every ``every_minutes``, its figures varied
    along a wave (a total stays what it is; held + free stays the model's handles)."""
    db = Database(f"sqlite:///{server.data_dir}/exosuit.sqlite")
    usage, allocation = models.usage_samples, models.allocation_samples
    try:
        with db.writer() as conn:
            first = conn.execute(sa.select(sa.func.min(usage.c.at))).scalar_one()
            latest = [
                dict(r._mapping) for r in conn.execute(sa.select(usage).where(usage.c.at == first))
            ]
            models_first = conn.execute(sa.select(sa.func.min(allocation.c.at))).scalar_one()
            held_free = [
                dict(r._mapping)
                for r in conn.execute(sa.select(allocation).where(allocation.c.at == models_first))
            ]
            steps = hours * 60 // every_minutes
            for step in range(1, steps + 1):
                at = first - dt.timedelta(minutes=every_minutes * step)
                wave = 0.5 + 0.45 * math.sin(step / 4)
                for row in latest:
                    figures = {
                        name: value if "total" in name else round(value * wave, 1)
                        for name, value in json.loads(row["figures"]).items()
                    }
                    conn.execute(sa.insert(usage).values(
                        {**row, "at": at, "figures": json.dumps(figures)}
                    ))  # fmt: skip
                for row in held_free:
                    counts = json.loads(row["figures"])
                    handles = counts["held"] + counts["free"]
                    held = round(handles * wave * 0.8)
                    conn.execute(sa.insert(allocation).values({
                        **{k: v for k, v in row.items() if k != "id"},
                        "at": models_first - dt.timedelta(minutes=every_minutes * step),
                        "figures": json.dumps({"held": held, "free": handles - held}),
                    }))  # fmt: skip
    finally:
        db.dispose()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("walk")
    config = base / "exosuit.conf"
    # A usage history recorded every 5 s: the simulated GPU's chart has data soon.
    config.write_text("[dashboard]\nhistory_resolution = 10\n")
    server = ExosuitServer(base / "data", [config]).start()
    try:
        url = server.url
        found = Fleet(url, server.host)
        # An unhealthy device: its host's agent reports it so (it is held back).
        _report(url, SICK_HOST, [_Sick()])
        (sick,) = _api(url, "GET", f"/v2/devices?hostname={SICK_HOST}")["devices"]
        assert sick["health"]["state"] == HEALTH_UNHEALTHY, sick
        found.sick_device = sick["uuid"]
        # A drained host.
        _report(url, DRAINED_HOST, [_Healthy()])
        _api(url, "POST", f"/v2/hosts/{DRAINED_HOST}/drain")
        # A claim of the simulated host's FPGA, and a bound ARQ of its GPU.
        for name, resource in (("walk-fpga", "FPGA"), ("walk-gpu", "PGPU")):
            profile = [{"name": name, "groups": [{f"resources:{resource}": "1"}]}]
            _api(url, "POST", "/v2/device_profiles", json=profile)
        claim = _api(
            url,
            "POST",
            "/v2/claims",
            json={"device_profile_name": "walk-fpga", "consumer": "walk-job"},
        )
        assert claim["state"] == "bound" and claim["hostname"] == server.host, claim
        found.claim = claim["uuid"]
        found.claimed_device = claim["devices"][0]["device_uuid"]
        (arq,) = _api(
            url, "POST", "/v2/accelerator_requests", json={"device_profile_name": "walk-gpu"}
        )["arqs"]
        found.arq = arq["uuid"]
        found.failed_job = make_failed_job(server, "walk_test")["id"]
        # An image in the catalogue (its data uploaded), and the audit trail's newest record.
        data = b"walk image"
        digest = hashlib.sha256(data).hexdigest()
        image = _api(url, "POST", "/v2/images", json={
            "name": "walk-afu", "format": "simulated", "visibility": "shared", "sha256": digest,
        })  # fmt: skip
        _api(url, "PUT", f"/v2/images/{image['uuid']}/file", data=data)
        found.image = image["uuid"]
        (event,) = _api(url, "GET", "/v2/audit_events?limit=1")["audit_events"]
        found.audit_event = event["id"]
        # A chart with data: the simulated GPU's usage, as the conductor recorded it.
        (gpu,) = _api(url, "GET", f"/v2/devices?hostname={server.host}&type=GPU")["devices"]
        found.charted_device = gpu["uuid"]
        deadline = time.monotonic() + WAIT
        while not _api(url, "GET", f"/v2/devices/{gpu['uuid']}/usage_history", "2.11")["figures"]:
            assert time.monotonic() < deadline, "the conductor recorded no usage history"
            time.sleep(0.5)
        _past_history(server)
        yield found
    finally:
        server.kill()


def _shots() -> Path | None:
    folder = os.environ.get("EXOSUIT_SCREENSHOTS")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def walker(browser, fleet):
    """One page (its own browser context) and the script errors seen on it."""
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
    page.goto(f"{fleet.url}/dashboard")
    expect(page.locator("main#page")).to_have_attribute("aria-busy", "false")
    yield page, errors
    context.close()


def test_every_page_is_walked(walker):
    page, _ = walker
    routes = page.evaluate("window.exosuitPages")
    assert routes, "app.js exposes no page registry (window.exosuitPages)"
    missing = [route for route in routes if route not in WALK]
    assert missing == [], f"pages of app.js the walk does not visit: add them to WALK: {missing}"
    gone = [route for route in WALK if route not in routes]
    assert gone == [], f"routes of WALK that app.js no longer has: {gone}"


VISITS = [(route, name, path) for route, visits in WALK.items() for name, path in visits]


@pytest.mark.parametrize(("route", "name", "path"), VISITS, ids=[v[1] for v in VISITS])
def test_the_page_is_drawn_whole(walker, fleet, route, name, path):
    page, errors = walker
    hash_path = path(fleet)
    # A fresh load of each page: a change of the hash alone would leave the page before's
    # heading on screen until the new one is drawn, and the checks below would see it.
    page.goto("about:blank")
    page.goto(f"{fleet.url}/dashboard#{urllib.parse.quote(hash_path, safe='/?=&')}")
    main = page.locator("main#page")
    heading = main.locator("h1")
    expect(heading).to_be_visible()
    expect(heading).not_to_have_text("Not found")
    expect(heading).not_to_have_text("Sign in")
    expect(main).to_have_attribute("aria-busy", "false")
    # Drawn from data: the refresh line says when (a failed load says "Failed").
    expect(page.locator("#refreshed")).to_have_attribute("data-state", "ok")
    expect(main.locator(".failure")).to_have_count(0)
    assert errors == [], "script errors in the page"
    folder = _shots()
    if folder is not None:
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


DOC = Path(__file__).resolve().parents[3] / "doc"


def test_every_visit_has_its_picture_in_the_doc():
    """doc/dashboard.md's "Screenshots" shows each visit's image (``make screenshots``)."""
    text = (DOC / "dashboard.md").read_text()
    section = text[text.index("## Screenshots") :]
    for _, name, _ in VISITS:
        assert f"(dashboard/{name}.png)" in section, f"doc/dashboard.md does not show {name}.png"
        assert (DOC / "dashboard" / f"{name}.png").is_file(), f"run make screenshots: {name}.png"
