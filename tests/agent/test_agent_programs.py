"""The agent's program reconciler against a small WSGI app speaking the agent protocol of
doc/programming.md (desired state, image data with ranges, program reports), with the
real simulated driver loading images into its state folder.

Every agent here runs on a FakeClock: no test waits for real time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re

import pytest
import webob
from keystoneauth1 import session as ks_session

from exosuit.agent.cache import AgentCache
from exosuit.agent.clock import FakeClock
from exosuit.agent.programs import ProgramReconciler
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import DriverContext, pci_cpid
from exosuit.drivers.intel_fpga import IntelFpgaDriver
from exosuit.drivers.simulated import SimulatedDriver
from exosuit.images.store import ContentStore
from tests.drivers.fpga_tools import FlashingRunner, make_gbs, writable_copy
from tests.helpers.live import serve_wsgi

HOST = "prog-host"
DEPLOYABLE = f"{HOST}_FakeDevice"
CPID = {"cpid_type": "PCI", "cpid_info": pci_cpid("0000:0c:00.0")}
FUNCTION_A = "a1a1a1a1-0000-4000-8000-00000000000a"
FUNCTION_B = "b2b2b2b2-0000-4000-8000-00000000000b"


class Image:
    def __init__(self, name: str, data: bytes, function_id: str | None = None) -> None:
        self.uuid = f"{name}-0000-4000-8000-000000000000"[:36]
        self.data = data
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.function_id = function_id

    def desired(self, **extra) -> dict:
        body = {
            "uuid": self.uuid,
            "format": "simulated",
            "size": len(self.data),
            "sha256": self.sha256,
            "function_id": self.function_id,
            "interface_id": None,
            "href": f"/agent/v1/images/{self.uuid}/data",
        }
        body.update(extra)
        return body

    def previous(self) -> dict:
        return {
            "uuid": self.uuid,
            "sha256": self.sha256,
            "href": f"/agent/v1/images/{self.uuid}/data",
        }


class AgentApi:
    """The agent protocol, in memory: desired state (ETag = generation), image data
    (Range → 206), program reports (a state never goes back; 409 once ended), inventory
    (answered with the desired state)."""

    def __init__(self, host: str = HOST) -> None:
        self.host = host
        self.generation = 1
        self.programs: list[dict] = []
        self.images: dict[str, bytes] = {}
        self.reports: list[tuple[str, dict]] = []
        self.inventories: list[dict] = []
        self.requests: list[tuple[str, str, dict]] = []
        self.ended: set[str] = set()
        self.fail_puts = 0  # answer this many program reports with 503
        self.served_data: dict[str, bytes] = {}  # uuid → bytes to serve instead
        self.clock: FakeClock | None = None
        self.inventory_times: list[float] = []

    def desired_state(self) -> dict:
        running = [p for p in self.programs if p["uuid"] not in self.ended]
        return {"generation": self.generation, "programs": running}

    def add(self, program_uuid: str, image: Image, previous: Image | None = None, **kw) -> None:
        self.images[image.uuid] = image.data
        if previous is not None:
            self.images[previous.uuid] = previous.data
        self.programs.append(
            {
                "uuid": program_uuid,
                "deployable": kw.get("deployable", DEPLOYABLE),
                "driver": "fake",
                "controlpath_id": kw.get("controlpath_id", CPID),
                "image": image.desired(**kw.get("image_fields", {})),
                "previous_image": previous.previous() if previous else None,
            }
        )
        self.generation += 1

    def states(self, program_uuid: str) -> list[str]:
        return [body["state"] for uuid, body in self.reports if uuid == program_uuid]

    def final(self, program_uuid: str) -> dict:
        return [body for uuid, body in self.reports if uuid == program_uuid][-1]

    def data_requests(self) -> list[dict]:
        return [h for method, path, h in self.requests if path.endswith("/data")]

    @webob.dec.wsgify
    def __call__(self, req: webob.Request) -> webob.Response:
        self.requests.append((req.method, req.path, dict(req.headers)))
        if req.path == f"/agent/v1/hosts/{self.host}/desired_state":
            if req.headers.get("If-None-Match") == f'"{self.generation}"':
                return webob.Response(status=304)
            return _json(200, self.desired_state(), ETag=f'"{self.generation}"')
        if req.path == f"/agent/v1/hosts/{self.host}/inventory":
            body = json.loads(req.body)
            self.inventories.append(body)
            if self.clock is not None:
                self.inventory_times.append(self.clock.now())
            answer = {"hostname": self.host, "hash": body["hash"], "changed": True}
            return _json(200, {**answer, "desired_state": self.desired_state()})
        match = re.fullmatch(r"/agent/v1/images/([^/]+)/data", req.path)
        if match:
            if match[1] not in self.images:
                return _json(404, {"error": "no such image"})
            data = self.served_data.get(match[1], self.images[match[1]])
            start = 0
            if req.range is not None:
                start = req.range.start
                if start >= len(data):
                    return webob.Response(status=416)
                return webob.Response(
                    status=206,
                    body=data[start:],
                    content_type="application/octet-stream",
                    headerlist=[("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")],
                )
            return webob.Response(body=data, content_type="application/octet-stream")
        match = re.fullmatch(rf"/agent/v1/hosts/{self.host}/programs/([^/]+)", req.path)
        if match and req.method == "PUT":
            uuid = match[1]
            if uuid not in {p["uuid"] for p in self.programs}:
                return _json(404, {"error": "no such program"})
            if uuid in self.ended:
                return _json(409, {"error": "ended"})
            if self.fail_puts > 0:
                self.fail_puts -= 1
                return _json(503, {"error": "busy"})
            body = json.loads(req.body)
            self.reports.append((uuid, body))
            if body["state"] in ("done", "failed"):
                self.ended.add(uuid)
                self.generation += 1
            return _json(200, {"uuid": uuid, **body})
        return _json(404, {"error": f"no route {req.path}"})


def _json(status: int, body: dict, **headers: str) -> webob.Response:
    response = webob.Response(status=status, json_body=body)
    response.headers.update(headers)
    return response


class CountingSimulated(SimulatedDriver):
    """The real simulated driver, counting the loads asked of it."""

    def __init__(self, context: DriverContext) -> None:
        super().__init__(context)
        self.loads: list[str] = []

    def program(self, device, deployable, image):
        self.loads.append(image.uuid)
        super().program(device, deployable, image)


class Host:
    """One agent's pieces on ``tmp_path``: the driver, the cache, the image store."""

    def __init__(self, tmp_path, api, session=None, endpoint="http://api.test", cache_size=10**6):
        self.tmp_path = tmp_path
        self.api = api
        self.clock = FakeClock()
        self.session = session if session is not None else WsgiSession(api)
        self.endpoint = endpoint
        self.cache_size = cache_size
        self.driver = CountingSimulated(
            DriverContext(
                hostname=HOST,
                settings={"devices": {"fake_fpga": "1"}},
                state_dir=str(tmp_path / "state" / "drivers" / "simulated"),
            )
        )
        self.restart()

    def restart(self) -> None:
        """A new agent process: its cache and store read from disk."""
        self.cache = AgentCache(str(self.tmp_path / "state"))
        self.state = self.cache.load()
        self.store = ContentStore(str(self.tmp_path / "state" / "images"), self.cache_size)
        self.reconciler = ProgramReconciler(
            HOST,
            [self.driver],
            self.session,
            self.endpoint,
            self.store,
            self.cache,
            clock=self.clock,
            interval=5.0,
        )

    def step(self) -> bool:
        self.clock.advance(5.0)
        return self.reconciler.step(self.state)

    def loaded(self):
        device = self.driver.discover()[0]
        return self.driver.loaded(device, device.deployables[0]), device


@pytest.fixture
def api():
    return AgentApi()


def test_a_program_goes_through_every_state_to_done(tmp_path, api):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    assert host.step() is True  # a device changed: report the inventory now
    assert api.states("p-1") == ["fetching", "programming", "verifying", "done"]
    assert api.final("p-1")["loaded"] == {"function_id": FUNCTION_A, "interface_id": None}
    loaded, device = host.loaded()
    assert loaded.image_uuid == image.uuid
    assert "CUSTOM_FPGA_FUNCTION_ID_FAKE_A1A1A1A100004000800000000000000A" in (
        device.deployables[0].traits
    )
    assert host.store.path(image.sha256) is not None  # kept in the image cache
    # The end is remembered: the next steps load nothing again and report nothing more.
    assert host.state.programs["p-1"]["acknowledged"] is True
    for _ in range(3):
        assert host.step() is False
    assert host.driver.loads == [image.uuid]
    assert len(api.reports) == 4
    # The API no longer lists it (and said so with a new generation): forgotten.
    assert host.cache.load().programs == {}


def test_the_image_already_loaded_is_done_without_fetching_or_loading(tmp_path, api):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    host.step()
    api.add("p-2", image)
    assert host.step() is False  # nothing changed on the device
    assert api.states("p-2") == ["done"]
    assert api.final("p-2")["reason"] == "already loaded"
    assert host.driver.loads == [image.uuid]
    assert len(api.data_requests()) == 1


def test_data_that_does_not_match_is_refused_and_the_device_untouched(tmp_path, api):
    good = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    bad = Image("bbbbbbbb", b"simulated image B\n", FUNCTION_B)
    api.add("p-1", good)
    host = Host(tmp_path, api)
    host.step()
    api.add("p-2", bad, previous=good)
    api.served_data[bad.uuid] = b"tampered on the way\n"
    assert host.step() is False
    final = api.final("p-2")
    assert final["state"] == "failed"
    assert "was refused" in final["reason"] and "device untouched" in final["reason"]
    assert final["restored"] is None
    assert api.states("p-2") == ["fetching", "failed"]
    assert host.driver.loads == [good.uuid]
    assert host.loaded()[0].image_uuid == good.uuid
    assert host.store.path(bad.sha256) is None
    assert host.store.partial(bad.sha256)[1] == 0  # bad data is never resumed


@pytest.mark.parametrize("failure", ["load", "verify"])
def test_a_failed_load_restores_the_previous_image(tmp_path, api, failure):
    good = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    bad = Image("bbbbbbbb", f"#exosuit-simulated fail={failure}\n".encode(), FUNCTION_B)
    api.add("p-1", good)
    host = Host(tmp_path, api)
    host.step()
    api.add("p-2", bad, previous=good)
    assert host.step() is True  # the device changed (and changed back): report it
    final = api.final("p-2")
    assert final["state"] == "failed"
    assert final["restored"] is True
    expected = "loading failed" if failure == "load" else "verification failed"
    assert final["reason"].startswith(expected), final["reason"]
    assert host.driver.loads == [good.uuid, bad.uuid, good.uuid]
    loaded, device = host.loaded()
    assert loaded.image_uuid == good.uuid
    assert device.deployables[0].traits[-1].endswith("A1A1A1A100004000800000000000000A")


def test_a_failed_load_without_a_previous_image_restores_nothing(tmp_path, api):
    bad = Image("bbbbbbbb", b"#exosuit-simulated fail=load\n", FUNCTION_B)
    api.add("p-1", bad)
    host = Host(tmp_path, api)
    host.step()
    assert api.final("p-1")["restored"] is None
    assert host.loaded()[0] is None


def test_a_previous_image_that_cannot_be_had_leaves_a_failure_unrestored(tmp_path, api):
    good = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    bad = Image("bbbbbbbb", b"#exosuit-simulated fail=load\n", FUNCTION_B)
    api.add("p-1", good)
    host = Host(tmp_path, api)
    host.step()
    host.store.remove(good.sha256)  # evicted, and the API no longer has it either
    del api.images[good.uuid]
    api.add("p-2", bad, previous=good)
    api.images.pop(good.uuid, None)
    host.step()
    final = api.final("p-2")
    assert (final["state"], final["restored"]) == ("failed", False)
    assert host.loaded()[0] is None


def test_the_previous_image_is_pinned_while_the_new_one_needs_the_room(tmp_path, api):
    good = Image("aaaaaaaa", b"A" * 600, FUNCTION_A)
    bad = Image("bbbbbbbb", b"#exosuit-simulated fail=load\n" + b"B" * 600, FUNCTION_B)
    api.add("p-1", good)
    host = Host(tmp_path, api, cache_size=700)
    host.step()
    api.add("p-2", bad, previous=good)
    host.step()
    assert api.final("p-2")["restored"] is True
    assert host.store.pinned() == set()  # released at the end


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"deployable": "elsewhere_FakeDevice"}, "is not on host"),
        (
            {"controlpath_id": {"cpid_type": "PCI", "cpid_info": pci_cpid("0000:99:00.0")}},
            "is not on host",
        ),
        ({"image_fields": {"format": "gbs"}}, "loads simulated, not gbs"),
    ],
)
def test_what_cannot_be_programmed_fails_at_once(tmp_path, api, change, reason):
    api.add("p-1", Image("aaaaaaaa", b"A", FUNCTION_A), **change)
    host = Host(tmp_path, api)
    assert host.step() is False
    final = api.final("p-1")
    assert final["state"] == "failed" and reason in final["reason"]
    assert final["restored"] is None
    assert host.driver.loads == []


def test_an_unacknowledged_end_is_reported_again_after_a_restart_never_loaded_twice(tmp_path, api):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    api.fail_puts = 4  # fetching, programming, verifying, done: none gets through
    host.step()
    assert api.reports == []
    assert host.cache.load().programs["p-1"] == {
        "report": {"state": "done", "loaded": {"function_id": FUNCTION_A, "interface_id": None}},
        "acknowledged": False,
    }
    host.restart()
    assert host.step() is False
    assert api.states("p-1") == ["done"]
    assert host.driver.loads == [image.uuid]
    host.step()  # the API no longer lists it: forgotten
    assert host.cache.load().programs == {}


def test_a_program_the_api_ended_meanwhile_is_left(tmp_path, api):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    host.reconciler.poll(host.state)
    api.ended.add("p-1")  # the conductor timed it out; our desired state is older
    host.reconciler.reconcile(host.state)
    assert host.driver.loads == []
    assert host.state.programs["p-1"]["acknowledged"] is True


def test_a_download_resumes_with_a_range(tmp_path, api):
    image = Image("aaaaaaaa", b"0123456789" * 50, FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    partial, _ = host.store.partial(image.sha256)
    with open(partial, "wb") as f:
        f.write(image.data[:123])  # what a download cut by a crash left behind
    host.step()
    assert api.data_requests()[0]["Range"] == "bytes=123-"
    assert api.final("p-1")["state"] == "done"


def test_a_resumed_download_that_goes_wrong_starts_over_once(tmp_path, api):
    image = Image("aaaaaaaa", b"0123456789" * 50, FUNCTION_A)
    api.add("p-1", image)
    host = Host(tmp_path, api)
    partial, _ = host.store.partial(image.sha256)
    with open(partial, "wb") as f:
        f.write(b"garbage!!")  # not a prefix of the image
    host.step()
    assert [h.get("Range") for h in api.data_requests()] == ["bytes=9-", None]
    assert api.final("p-1")["state"] == "done"


def test_the_desired_state_is_polled_conditionally(tmp_path, api):
    host = Host(tmp_path, api)
    host.step()
    host.step()
    polls = [h for method, path, h in api.requests if path.endswith("/desired_state")]
    assert polls[0].get("If-None-Match") is None
    assert polls[1]["If-None-Match"] == f'"{api.generation}"'
    assert host.state.desired_state == {"generation": api.generation, "programs": []}
    # Not due yet: no request at all.
    before = len(api.requests)
    host.clock.advance(1)
    host.reconciler.step(host.state)
    assert len(api.requests) == before


def test_an_unreachable_api_costs_nothing_but_a_retry(tmp_path, api, caplog):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    api.add("p-1", image)
    caplog.set_level(logging.WARNING, logger="exosuit.agent.programs")
    host = Host(tmp_path, api, session=ks_session.Session(), endpoint="http://127.0.0.1:9")
    assert host.step() is False
    assert host.step() is False
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1  # logged once
    assert host.driver.loads == []


def test_an_interrupted_download_over_http_resumes_where_it_stopped(tmp_path, api):
    # Larger than a read (1 MiB): what a read had in hand when the link broke is lost.
    image = Image("aaaaaaaa", os.urandom(3_000_000), FUNCTION_A)
    api.add("p-1", image)
    cut = {"once": True}

    def flaky(environ, start_response):
        """Dies after 2.5 MB of the first data answer, as a broken link would."""
        if environ["PATH_INFO"].endswith("/data") and cut.pop("once", False):
            start_response(
                "200 OK",
                [
                    ("Content-Type", "application/octet-stream"),
                    ("Content-Length", str(len(image.data))),
                ],
            )

            def body():
                for start in range(0, 2_500_000, 100_000):
                    yield image.data[start : start + 100_000]
                raise ConnectionResetError("link down")

            return body()
        return api(environ, start_response)

    with serve_wsgi(flaky) as url:
        host = Host(tmp_path, api, session=ks_session.Session(), endpoint=url)
        assert host.step() is False  # interrupted: tried again at the next poll
        assert 0 < host.store.partial(image.sha256)[1] <= 2_500_000
        assert api.states("p-1") == ["fetching"]
        assert host.step() is True
    had = int(api.data_requests()[-1]["Range"].removeprefix("bytes=").rstrip("-"))
    assert had > 0
    assert api.final("p-1")["state"] == "done"


def test_the_agent_loop_reports_the_inventory_at_once_after_a_program(tmp_path, api):
    image = Image("aaaaaaaa", b"simulated image A\n", FUNCTION_A)
    host = Host(tmp_path, api)
    clock = host.clock
    start = clock.now()
    api.clock = clock
    agent = Agent(
        HOST,
        [host.driver],
        Reporter(host.session, host.endpoint, HOST),
        host.cache,
        interval=60,
        jitter=0,
        clock=clock,
        reconcilers=[host.reconciler],
    )
    clock.call_at(start + 12, lambda: api.add("p-1", image))
    clock.call_at(start + 100, agent.stop)
    agent.run()
    assert api.final("p-1")["state"] == "done"
    # Reported at start; the program was seen at the first poll after it was queued
    # (every 5 s), and the inventory with its trait went out at once, then one a minute.
    assert api.inventory_times == [start, start + 15, start + 75]
    assert clock.waits == [5.0] * 3 + [5.0] * 17
    full = [b for b in api.inventories if "devices" in b]
    traits = [
        [
            a["value"]
            for a in b["devices"][0]["deployables"][0]["attributes"]
            if a["key"][:5] == "trait"
        ]
        for b in full
    ]
    assert traits[0] == ["CUSTOM_FAKE_DEVICE"]
    assert traits[1][-1].startswith("CUSTOM_FPGA_FUNCTION_ID_FAKE_")


# -- a real FPGA driver on a fixture tree ------------------------------------------------


class GbsImage(Image):
    def __init__(self, name: str, tmp_path, afu: str, interface: str) -> None:
        data = make_gbs(tmp_path / f"{name}.gbs", afu, interface)
        super().__init__(name, data, afu)


def intel_host(tmp_path, api):
    root = writable_copy("fpga-dfl-host", tmp_path)
    runner = FlashingRunner(root)
    driver = IntelFpgaDriver(DriverContext(hostname="compute-1", sysfs_root=root, runner=runner))
    cache = AgentCache(str(tmp_path / "state"))
    reconciler = ProgramReconciler(
        "compute-1",
        [driver],
        WsgiSession(api),
        "http://api.test",
        ContentStore(str(tmp_path / "state" / "images"), 10**6),
        cache,
        clock=FakeClock(),
    )
    return driver, runner, reconciler, cache.load()


D5005 = {"cpid_type": "PCI", "cpid_info": pci_cpid("0000:3b:00.0")}
D5005_INTERFACE = "9346116d-5a1d-4ea9-ac1e-2c60f1f8a4b1"
ORIGINAL_AFU = "d8424dc4-a4a3-c413-f89e-433683f9040b"
NEW_AFU = "7c1a0b2e-4d5f-4e6a-8b9c-0d1e2f3a4b5c"


def intel_program(api, name, image, previous=None):
    api.add(
        name,
        image,
        previous,
        deployable="compute-1_0000:3b:00.0",
        controlpath_id=D5005,
        image_fields={"format": "gbs", "interface_id": D5005_INTERFACE},
    )


@pytest.fixture
def intel_api():
    return AgentApi(host="compute-1")


def test_an_intel_fpga_is_programmed_through_fpgaconf_and_verified_in_sysfs(tmp_path, intel_api):
    driver, runner, reconciler, state = intel_host(tmp_path, intel_api)
    image = GbsImage("cccccccc", tmp_path, NEW_AFU, D5005_INTERFACE)
    intel_program(intel_api, "p-1", image)
    assert reconciler.step(state) is True
    final = intel_api.final("p-1")
    assert final["state"] == "done"
    assert final["loaded"] == {
        "function_id": NEW_AFU.replace("-", ""),
        "interface_id": D5005_INTERFACE.replace("-", ""),
    }
    device = next(d for d in driver.discover() if d.pci_address == "0000:3b:00.0")
    assert "CUSTOM_FPGA_FUNCTION_ID_INTEL_7C1A0B2E4D5F4E6A8B9C0D1E2F3A4B5C" in (
        device.deployables[0].traits
    )


def test_an_intel_fpga_showing_the_wrong_afu_is_rolled_back(tmp_path, intel_api):
    driver, runner, reconciler, state = intel_host(tmp_path, intel_api)
    original = GbsImage("aaaaaaaa", tmp_path, ORIGINAL_AFU, D5005_INTERFACE)
    new = GbsImage("cccccccc", tmp_path, NEW_AFU, D5005_INTERFACE)
    wrong = "00000000-0000-4000-8000-0000000000ff"

    def step():
        reconciler.clock.advance(5)  # the next poll sees the new program
        reconciler.step(state)

    intel_program(intel_api, "p-0", original)  # loaded through Exosuit: its ids are known
    step()
    assert intel_api.final("p-0")["reason"] == "already loaded"
    # The load goes wrong, the previous image goes back: restored.
    intel_program(intel_api, "p-1", new, previous=original)
    runner.wrong_afus = [wrong]
    step()
    first = intel_api.final("p-1")
    assert (first["state"], first["restored"]) == ("failed", True)
    assert "verification failed" in first["reason"] and "0000000000ff" in first["reason"]
    assert [c[0] for c in runner.calls].count("fpgaconf") == 2
    device = next(d for d in driver.discover() if d.pci_address == "0000:3b:00.0")
    assert device.vendor_board_info["afu_ids"] == ORIGINAL_AFU.replace("-", "")
    # The load goes wrong, and so does the rollback: the card cannot be trusted.
    intel_program(intel_api, "p-2", new, previous=original)
    runner.wrong_afus = [wrong, wrong]
    step()
    second = intel_api.final("p-2")
    assert (second["state"], second["restored"]) == ("failed", False)


def test_an_image_for_another_region_fails_with_the_card_untouched(tmp_path, intel_api):
    driver, runner, reconciler, state = intel_host(tmp_path, intel_api)
    original = GbsImage("aaaaaaaa", tmp_path, ORIGINAL_AFU, D5005_INTERFACE)
    other = GbsImage("dddddddd", tmp_path, NEW_AFU, "ce489693-d079-4f0b-a63f-f6a0e5f7d9a5")
    intel_program(intel_api, "p-1", other, previous=original)
    assert reconciler.step(state) is False  # nothing changed on the card
    final = intel_api.final("p-1")
    assert final["state"] == "failed"
    assert "no compatible FPGA" in final["reason"] and "device untouched" in final["reason"]
    assert final["restored"] is None
    assert [c[0] for c in runner.calls].count("fpgaconf") == 1
