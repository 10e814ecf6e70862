"""The console's charts (charts.js) in a real browser, against a real ``exosuit serve``.

One ``exosuit serve`` records nothing by itself (``[dashboard] history_resolution = 0``):
the tests put a known history in its database and check that the device page draws it
(a path whose points are the API's, on the chart's scale), that a device without history
and a fleet without allocation history show their empty states, and that the fleet page
draws the allocation once there is one, without a reload. A second one records its own
history (every 10 s): the GPU its simulated driver reports gets a chart of the usage its
agent reported. Nothing the page draws may be refused by its Content-Security-Policy.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
from playwright.sync_api import Page, expect

from exosuit.db import models
from exosuit.db.api import Database
from tests.api.dashboard.conftest import screenshot
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

V = {"OpenStack-API-Version": "accelerator 2.11"}
WAIT = 60.0
POINT = re.compile(r"[ML](-?[\d.]+) (-?[\d.]+)")


def start(base: Path, resolution: int) -> ExosuitServer:
    config = base / "exosuit.conf"
    config.write_text(f"[dashboard]\nhistory_resolution = {resolution}\n")
    return ExosuitServer(base / "data", [config]).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = start(tmp_path_factory.mktemp("charts"), 0)
    try:
        yield started
    finally:
        started.kill()


def api_json(server, path: str):
    r = requests.get(server.url + path, headers=V, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def device(server, device_type: str) -> dict:
    devices = api_json(server, f"/v2/devices?hostname={server.host}")["devices"]
    return next(d for d in devices if d["type"] == device_type)


def write(server, rows: list[dict], table) -> None:
    """Rows into serve's database, as the conductor's usage_history job writes them."""
    db = Database(f"sqlite:///{server.data_dir}/exosuit.sqlite")
    try:
        db.write(lambda conn: conn.execute(sa.insert(table), rows))
    finally:
        db.dispose()


def card(page: Page, title: str):
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def refusals(page: Page) -> list[str]:
    """What the page's Content-Security-Policy refused, as the console says it."""
    found: list[str] = []
    page.on(
        "console",
        lambda m: found.append(m.text) if "Content Security Policy" in m.text else None,
    )
    return found


def drawn(chart) -> list[tuple[float, float]]:
    """The points of a chart's path."""
    return [(float(x), float(y)) for x, y in POINT.findall(chart.get_attribute("d"))]


def plot_box(svg) -> tuple[float, float, float, float]:
    rect = svg.locator("rect.plot")
    return tuple(float(rect.get_attribute(a)) for a in ("x", "y", "width", "height"))


def test_a_devices_usage_is_drawn_as_its_history_says(server, open_page):
    gpu = device(server, "GPU")
    now = models.utcnow().replace(microsecond=0)
    values = [5, 20, 35, 50, 65, 80, 95, 70, 45, 20, 10, 60]
    rows = [
        {
            "device_uuid": gpu["uuid"],
            "tier": 0,
            "at": now - dt.timedelta(minutes=5 * (len(values) - 1 - i)),
            "samples": 1,
            "figures": json.dumps(
                {
                    "utilization_percent": v,
                    "memory_used_bytes": v * 2**28,
                    "memory_total_bytes": 32 * 2**30,
                }
            ),
        }
        for i, v in enumerate(values)
    ]
    write(server, rows, models.usage_samples)
    history = api_json(server, f"/v2/devices/{gpu['uuid']}/usage_history")
    assert [p["value"] for p in history["figures"]["utilization_percent"]] == values

    page = open_page(f"{server.url}/dashboard#/devices/{gpu['uuid']}")
    refused = refusals(page)
    section = card(page, "Usage over the last 6 hours")
    line = section.locator('path.series[data-name="utilisation"]')
    expect(line).to_have_count(1)
    svg = line.locator("xpath=..")
    left, top, width, height = plot_box(svg)
    points = drawn(line)
    assert len(points) == len(values)
    for (x, y), value in zip(points, values, strict=True):
        assert y == pytest.approx(top + (1 - value / 100) * height, abs=0.11)
        assert left <= x <= left + width
    xs = [x for x, _ in points]
    steps = [b - a for a, b in zip(xs, xs[1:], strict=False)]
    assert all(s == pytest.approx(steps[0], abs=0.2) for s in steps)  # every 5 minutes
    expect(svg.locator("text").filter(has_text="100 %")).to_have_count(1)
    # Memory: used (an area) and total, in GiB.
    memory = section.locator("figure").filter(has_text="Memory")
    expect(memory.locator('path.series[data-name="used"]')).to_have_count(1)
    expect(memory.locator('path.series[data-name="total"]')).to_have_count(1)
    expect(memory.locator("svg text").filter(has_text="GiB").first).to_be_visible()
    expect(section).to_contain_text("total 32 GiB now")
    expect(section).to_contain_text("From the database.")
    screenshot(page, "charts-device.png")
    assert refused == []


def test_no_history_shows_the_empty_states_and_the_fleet_page_follows(server, open_page):
    fpga = device(server, "FPGA")
    page = open_page(f"{server.url}/dashboard#/devices/{fpga['uuid']}")
    refused = refusals(page)
    expect(card(page, "Usage over the last 6 hours")).to_contain_text("No usage reported yet.")
    expect(card(page, "Usage over the last 6 hours").locator("svg")).to_have_count(0)

    page.goto(f"{server.url}/dashboard#/")
    allocation = card(page, "Allocation over the last 24 hours")
    expect(allocation).to_contain_text("No allocation recorded yet.")
    now = models.utcnow().replace(microsecond=0)
    rows = [
        {
            "tier": 0,
            "at": now - dt.timedelta(minutes=5 * (3 - i)),
            "type": "GPU",
            "vendor": "10de",
            "model": "Chart T4",
            "samples": 1,
            "figures": json.dumps({"held": held, "free": 4 - held}),
        }
        for i, held in enumerate((0, 1, 3, 4))
    ]
    write(server, rows, models.allocation_samples)
    # The page's refresh draws it, without a reload.
    chart = allocation.locator("figure").filter(has_text="GPU 10de Chart T4")
    held = chart.locator('path.series[data-name="held"]')
    expect(held).to_have_count(1)
    _, top, _, height = plot_box(chart.locator("svg"))
    ys = [y for _, y in drawn(held)]
    scale = 4  # counts: the multiple of 4 at or above the largest value
    assert ys == pytest.approx([top + (1 - h / scale) * height for h in (0, 1, 3, 4)], abs=0.11)
    expect(chart).to_contain_text("held 4 now")
    expect(chart).to_contain_text("free 0 now")
    screenshot(page, "charts-fleet.png")
    assert refused == []


def test_a_recording_serve_charts_what_its_agent_reported(tmp_path, open_page):
    recording = start(tmp_path, 10)
    try:
        gpu = device(recording, "GPU")
        usage = api_json(recording, f"/v2/devices/{gpu['uuid']}")["usage"]
        deadline = time.monotonic() + WAIT
        while not api_json(recording, f"/v2/devices/{gpu['uuid']}/usage_history")["figures"]:
            assert time.monotonic() < deadline, "the conductor recorded no history"
            time.sleep(0.5)
        page = open_page(f"{recording.url}/dashboard#/devices/{gpu['uuid']}")
        line = page.locator('path.series[data-name="utilisation"]')
        expect(line).to_have_count(1)
        _, top, _, height = plot_box(line.locator("xpath=.."))
        points = drawn(line)
        recorded = api_json(recording, f"/v2/devices/{gpu['uuid']}/usage_history")
        assert 1 <= len(points) <= len(recorded["figures"]["utilization_percent"])
        expected = top + (1 - usage["utilization_percent"] / 100) * height
        assert all(y == pytest.approx(expected, abs=0.11) for _, y in points)
    finally:
        recording.kill()
