"""The agent's CDI writer (agent/cdi.py): the specs of the claims its desired state hands
to containers, built from the real drivers' container edits, checked against the CDI
0.5.0 schema, written atomically, reported, rewritten when they vanish, removed when the
claim goes.

``ClaimsApi`` is a small in-process WSGI app of the desired state's ``containers`` and of
``PUT /agent/v1/hosts/{hostname}/claims/{claim_uuid}`` as the issue 12 contract describes
them (200; 404 for a claim it does not know or released), written before the API had
them; it lets a test fail a report (503) or keep a stale desired state at will. The last
test runs against the real API in-process (claims, microversion 2.8), and
tests/agent/test_cdi_serve.py on a real ``exosuit serve`` with podman.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import stat

import pytest
import webob

from exosuit import schemas
from exosuit.agent.cache import AgentCache
from exosuit.agent.cdi import (
    CDI_VERSION,
    CdiReconciler,
    SpecDirectory,
    build_specs,
    parse_claim,
    spec_errors,
    spec_file_name,
)
from exosuit.agent.clock import FakeClock
from exosuit.agent.plugins import DriverSet
from exosuit.agent.reporter import Reporter
from exosuit.agent.service import Agent
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import (
    AttachHandle,
    ContainerEdits,
    DeviceNode,
    DriverContext,
    Mount,
    load_driver,
    pci_cpid,
)
from exosuit.drivers.runner import RecordedRunner
from tests.helpers.inventory import fpga

HOST = "cdi-host"
ENDPOINT = "http://api.test"
FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
CLAIM = "0c1a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b"
OTHER = "9f8e7d6c-5b4a-4392-8180-7f6e5d4c3b2a"
D5005 = "0000:3b:00.0"
N3000_VF0 = "0000:b1:00.1"


def entry(claim: str, *devices: tuple[str, str, str, str, dict]) -> dict:
    """A desired-state ``containers`` entry: (class, driver, cpid address, type, info)."""
    return {
        "claim": claim,
        "devices": [
            {
                "name": f"{claim}-{n}",
                "class": cdi_class,
                "device": f"dddddddd-0000-4000-8000-{n:012d}",
                "controlpath_id": {"cpid_type": "PCI", "cpid_info": pci_cpid(address)},
                "driver": driver,
                "attach_handle": {"type": attach_type, "info": info},
            }
            for n, (cdi_class, driver, address, attach_type, info) in enumerate(devices)
        ],
    }


def simulated_fpga(n: int = 1) -> tuple[str, str, str, str, dict]:
    """Handle ``n`` (1–16) of the simulated host's FPGA at 0000:0c:00.0."""
    return (
        "fpga",
        "simulated",
        "0000:0c:00.0",
        "TEST_PCI",
        {"domain": "0000", "bus": "0c", "device": f"{n // 8:02x}", "function": str(n % 8)},
    )


def dfl(address: str) -> tuple[str, str, str, str, dict]:
    """A PCI handle of the intel_fpga card whose PF is at ``address``'s card."""
    card = D5005 if address == D5005 else "0000:b1:00.0"
    return ("fpga", "intel_fpga", card, "PCI", pci_cpid(address))


class ClaimsApi:
    """The desired state's containers and the claims' report endpoint, in memory."""

    def __init__(self) -> None:
        self.generation = 1
        self.containers: dict[str, dict] = {}
        self.known: set[str] = set()
        self.cdi: dict[str, dict] = {}  # claim → the last report taken
        self.reports: list[tuple[str, dict]] = []
        self.fail_puts = 0

    def claim(self, item: dict) -> None:
        self.generation += 1
        self.containers[item["claim"]] = item
        self.known.add(item["claim"])

    def release(self, claim: str) -> None:
        self.generation += 1
        self.containers.pop(claim, None)
        self.known.discard(claim)

    def desired_state(self) -> dict:
        return {
            "generation": self.generation,
            "programs": [],
            "drivers": {},
            "activations": [],
            "containers": list(self.containers.values()),
        }

    @webob.dec.wsgify
    def __call__(self, req: webob.Request) -> webob.Response:
        if req.path == f"/agent/v1/hosts/{HOST}/desired_state":
            if req.headers.get("If-None-Match") == f'"{self.generation}"':
                return webob.Response(status=304)
            response = webob.Response(json_body=self.desired_state())
            response.headers["ETag"] = f'"{self.generation}"'
            return response
        if req.path == f"/agent/v1/hosts/{HOST}/inventory":
            body = json.loads(req.body)
            answer = {"hostname": HOST, "hash": body["hash"], "changed": True}
            return webob.Response(json_body={**answer, "desired_state": self.desired_state()})
        match = re.fullmatch(rf"/agent/v1/hosts/{HOST}/claims/([^/]+)", req.path)
        if match and req.method == "PUT":
            if self.fail_puts > 0:
                self.fail_puts -= 1
                return webob.Response(status=503, json_body={"error": "busy"})
            if match[1] not in self.known:
                return webob.Response(status=404, json_body={"error": "no such claim"})
            body = json.loads(req.body)
            self.reports.append((match[1], body))
            self.cdi[match[1]] = body
            return webob.Response(json_body={"uuid": match[1], "cdi": {"state": body["cdi"]}})
        return webob.Response(status=404, json_body={"error": f"no route {req.path}"})


def drivers(tmp_path) -> DriverSet:
    """The real simulated driver and the intel_fpga driver on the recorded DFL host."""
    dfl_root = os.path.join(FIXTURES, "fpga-dfl-host")
    return DriverSet.fixed(
        [
            load_driver(
                "simulated",
                DriverContext(hostname=HOST, state_dir=str(tmp_path / "state" / "simulated")),
            ),
            load_driver(
                "intel_fpga",
                DriverContext(
                    hostname=HOST,
                    sysfs_root=dfl_root,
                    runner=RecordedRunner.from_file(os.path.join(dfl_root, "commands.json")),
                ),
            ),
        ]
    )


class Host:
    def __init__(self, tmp_path, api: ClaimsApi) -> None:
        self.tmp_path = tmp_path
        self.api = api
        self.spec_dir = tmp_path / "cdi"
        self.plugins = drivers(tmp_path)
        self.session = WsgiSession(api)
        self.restart()

    def restart(self) -> None:
        self.cache = AgentCache(str(self.tmp_path / "state"))
        self.state = self.cache.load()
        self.reconciler = CdiReconciler(
            HOST, self.plugins, self.session, ENDPOINT, self.cache, str(self.spec_dir)
        )

    def step(self) -> bool:
        self.state.desired_state = self.api.desired_state()
        return self.reconciler.step(self.state)

    def files(self) -> list[str]:
        return sorted(os.listdir(self.spec_dir)) if self.spec_dir.exists() else []

    def spec(self, cdi_class: str, claim: str) -> dict:
        with open(self.spec_dir / spec_file_name(cdi_class, claim)) as f:
            return json.load(f)


@pytest.fixture
def api():
    return ClaimsApi()


# -- the pure part ----------------------------------------------------------------------


def test_a_claims_specs_hold_each_devices_nodes_and_env_under_its_index():
    claim = parse_claim(entry(CLAIM, simulated_fpga(1), ("gpu", "x", D5005, "PCI", {})))
    edits = [
        ContainerEdits(
            device_nodes=(DeviceNode("/dev/a0", "/dev/null"), DeviceNode("/dev/a1", None, "rw")),
            env={"PCI_ADDRESS": "0000:0c:00.1", "FPGA_FUNCTION": "f00d"},
            mounts=(Mount("/opt/lib", "/usr/lib/acme", ("ro", "bind")),),
        ),
        ContainerEdits(env={"GPU_UUID": "GPU-1"}),
    ]
    specs = build_specs(claim, edits)
    assert list(specs) == [spec_file_name("fpga", CLAIM), spec_file_name("gpu", CLAIM)]
    fpga, gpu = specs.values()
    assert fpga == {
        "cdiVersion": "0.5.0",
        "kind": "exosuit.dev/fpga",
        "devices": [
            {
                "name": f"{CLAIM}-0",
                "containerEdits": {
                    "env": [
                        f"EXOSUIT_CLAIM={CLAIM}",
                        "EXOSUIT_DEVICE_0_FPGA_FUNCTION=f00d",
                        "EXOSUIT_DEVICE_0_PCI_ADDRESS=0000:0c:00.1",
                    ],
                    "deviceNodes": [
                        {"path": "/dev/a0", "hostPath": "/dev/null"},
                        {"path": "/dev/a1", "permissions": "rw"},
                    ],
                    "mounts": [
                        {
                            "hostPath": "/opt/lib",
                            "containerPath": "/usr/lib/acme",
                            "options": ["ro", "bind"],
                        }
                    ],
                },
            }
        ],
    }
    # Device 1 is n = 1 in its own spec; no driver's PCI_ADDRESS: none from a handle
    # without PCI info either.
    assert gpu["kind"] == "exosuit.dev/gpu"
    assert gpu["devices"][0]["name"] == f"{CLAIM}-1"
    assert gpu["devices"][0]["containerEdits"] == {
        "env": [f"EXOSUIT_CLAIM={CLAIM}", "EXOSUIT_DEVICE_1_GPU_UUID=GPU-1"]
    }
    assert spec_errors(fpga) == [] and spec_errors(gpu) == []


def test_a_pci_handle_gives_its_address_when_the_driver_does_not():
    claim = parse_claim(entry(CLAIM, dfl(D5005)))
    (spec,) = build_specs(claim, [ContainerEdits(device_nodes=(DeviceNode("/dev/x"),))]).values()
    env = spec["devices"][0]["containerEdits"]["env"]
    assert env == [f"EXOSUIT_CLAIM={CLAIM}", f"EXOSUIT_DEVICE_0_PCI_ADDRESS={D5005}"]


def valid_spec() -> dict:
    claim = parse_claim(entry(CLAIM, simulated_fpga()))
    edits = ContainerEdits(device_nodes=(DeviceNode("/dev/x", "/dev/null"),), env={"A": "1"})
    (spec,) = build_specs(claim, [edits]).values()
    return spec


def broken(change) -> dict:
    spec = copy.deepcopy(valid_spec())
    change(spec)
    return spec


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param(broken(lambda s: s.update(cdiVersion="0.6.0")), "cdiVersion", id="0.6.0"),
        pytest.param(broken(lambda s: s.update(cdiVersion="1.0.0")), "cdiVersion", id="1.0.0"),
        pytest.param(broken(lambda s: s.update(cdiVersion="v0.5.0")), "cdiVersion", id="v0.5.0"),
        pytest.param(
            broken(lambda s: s.update(cdiVersion="0.4.0")),
            "'0.5.0' was expected",
            id="leading-digit-and-hostPath-need-0.5.0",
        ),
        pytest.param(
            broken(lambda s: s.update(annotations={"a": "b"})),
            "Additional properties are not allowed ('annotations'",
            id="annotations",
        ),
        pytest.param(
            broken(lambda s: s["devices"][0].update(annotations={"a": "b"})),
            "annotations",
            id="device-annotations",
        ),
        pytest.param(
            broken(lambda s: s["devices"][0].update(containerEdits={})),
            "devices/0/containerEdits",
            id="empty-edits",
        ),
        pytest.param(
            broken(lambda s: s.update(kind="exosuit.dev/fpga.v2")), "kind", id="dot-in-class"
        ),
        pytest.param(broken(lambda s: s.update(kind="exosuit.dev")), "kind", id="no-class"),
        pytest.param(
            broken(lambda s: s["devices"][0].update(name="-x")), "devices/0/name", id="bad-name"
        ),
        pytest.param(
            broken(lambda s: s["devices"][0]["containerEdits"].update(intelRdt={})),
            "intelRdt",
            id="0.7.0-field",
        ),
        pytest.param(
            broken(lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].pop("path")),
            "'path' is a required property",
            id="node-without-path",
        ),
        pytest.param(
            broken(lambda s: s["devices"].append(copy.deepcopy(s["devices"][0]))),
            "is defined twice",
            id="duplicate-device",
        ),
        pytest.param(broken(lambda s: s.update(devices=[])), "devices", id="no-devices"),
    ],
)
def test_the_schema_check_refuses_what_podman_4_3_1_cannot_resolve(spec, error):
    assert spec_errors(valid_spec()) == []
    errors = spec_errors(spec)
    assert errors, spec
    assert any(error in e for e in errors), errors


def test_the_schema_file_is_a_valid_draft_2020_12_schema():
    import jsonschema

    with open(os.path.join(os.path.dirname(schemas.__file__), "cdi-spec-0.5.0.json")) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["cdiVersion"]["enum"][-1] == CDI_VERSION


@pytest.mark.parametrize(
    ("item", "error"),
    [
        ("junk", "not an object"),
        ({"claim": "NOT-A-UUID", "devices": []}, "not a lower-case UUID"),
        ({"claim": CLAIM, "devices": []}, "no devices"),
        (
            {**entry(CLAIM, simulated_fpga()), "devices": [{"name": "x", "class": "fpga"}]},
            "is named 'x'",
        ),
        (
            entry(CLAIM, ("fpga.v2", "simulated", "0000:0c:00.0", "PCI", {})),
            "not one CDI 0.5.0 takes",
        ),
        (
            entry(CLAIM, ("FPGA", "simulated", "0000:0c:00.0", "PCI", {})),
            "not one CDI 0.5.0 takes",
        ),
    ],
)
def test_a_desired_state_entry_the_agent_cannot_write_is_refused(item, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_claim(item)


# -- the files --------------------------------------------------------------------------


def test_a_spec_is_written_atomically_and_only_exosuit_names_are_touched(tmp_path):
    directory = SpecDirectory(str(tmp_path / "cdi"))
    name = spec_file_name("fpga", CLAIM)
    directory.write(name, b'{"one": 1}\n')
    directory.write(name, b'{"two": 2}\n')
    assert os.listdir(directory.path) == [name]  # no temporary file left
    assert directory.read(name) == b'{"two": 2}\n'
    mode = stat.S_IMODE(os.stat(os.path.join(directory.path, name)).st_mode)
    assert mode & 0o044 == 0o044  # container engines read it
    # An interrupted write's temporary file is hidden from CDI (a leading dot, .tmp) and
    # removed with the spec.
    (tmp_path / "cdi" / f".{name}.tmp").write_text("half")
    directory.remove(name)
    assert os.listdir(directory.path) == []
    for other in ("nvidia.com-gpu.json", f"exosuit.dev-fpga_{CLAIM}.yaml", "../x.json"):
        with pytest.raises(ValueError, match="not the name of an Exosuit CDI spec file"):
            directory.write(other, b"{}")
        with pytest.raises(ValueError):
            directory.remove(other)


# -- the reconciler ---------------------------------------------------------------------


def test_a_claim_listed_gets_its_spec_and_the_api_hears_written(tmp_path, api):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga(1), simulated_fpga(2), dfl(D5005)))
    assert host.step() is True
    assert host.files() == [spec_file_name("fpga", CLAIM)]
    spec = host.spec("fpga", CLAIM)
    assert spec_errors(spec) == []
    assert [d["name"] for d in spec["devices"]] == [f"{CLAIM}-0", f"{CLAIM}-1", f"{CLAIM}-2"]
    first, second, d5005 = (d["containerEdits"] for d in spec["devices"])
    assert first["deviceNodes"] == [
        {"path": "/dev/exosuit-simulated/fpga-0000-0c-00-1", "hostPath": "/dev/null"}
    ]
    assert second["deviceNodes"][0]["path"] == "/dev/exosuit-simulated/fpga-0000-0c-00-2"
    assert "EXOSUIT_DEVICE_1_PCI_ADDRESS=0000:0c:00.2" in second["env"]
    # The real intel_fpga driver on the recorded D5005: its port and FME, its function.
    assert d5005["deviceNodes"] == [{"path": "/dev/dfl-port.0"}, {"path": "/dev/dfl-fme.0"}]
    assert "EXOSUIT_DEVICE_2_FPGA_FUNCTION=d8424dc4a4a3c413f89e433683f9040b" in d5005["env"]
    assert api.reports == [
        (
            CLAIM,
            {
                "cdi": "written",
                "reason": None,
                "devices": [f"exosuit.dev/fpga={CLAIM}-{n}" for n in range(3)],
            },
        )
    ]
    specs = host.cache.load().containers[CLAIM]
    assert (specs["state"], specs["acknowledged"]) == ("written", True)
    # Nothing more to do while it is listed and its file is there.
    assert host.step() is False
    assert len(api.reports) == 1


def test_a_claim_of_several_classes_gets_one_file_per_class(tmp_path, api):
    host = Host(tmp_path, api)
    simulated = host.plugins.drivers[0]
    gpu = next(d for d in simulated.discover() if d.type == "GPU")
    gpu_handle = ("gpu", "simulated", gpu.pci_address, "PCI", pci_cpid(gpu.pci_address))
    api.claim(entry(CLAIM, simulated_fpga(3), gpu_handle))
    host.step()
    assert host.files() == sorted([spec_file_name("fpga", CLAIM), spec_file_name("gpu", CLAIM)])
    assert host.spec("gpu", CLAIM)["devices"][0]["name"] == f"{CLAIM}-1"
    assert api.cdi[CLAIM]["devices"] == [
        f"exosuit.dev/fpga={CLAIM}-0",
        f"exosuit.dev/gpu={CLAIM}-1",
    ]


def test_a_spec_that_vanishes_is_written_again_without_a_second_report(tmp_path, api):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga()))
    host.step()
    written = host.spec("fpga", CLAIM)
    os.unlink(host.spec_dir / spec_file_name("fpga", CLAIM))  # a reboot empties /run
    assert host.step() is True
    assert host.spec("fpga", CLAIM) == written
    (host.spec_dir / spec_file_name("fpga", CLAIM)).write_text("{}")  # someone edited it
    assert host.step() is True
    assert host.spec("fpga", CLAIM) == written
    assert len(api.reports) == 1


def test_a_released_claims_files_are_removed_and_nobody_elses(tmp_path, api):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga(1)))
    api.claim(entry(OTHER, simulated_fpga(2)))
    host.step()
    # Files the agent did not write: another vendor's, and one named like an Exosuit
    # spec (another agent's on this host, say).
    host.spec_dir.joinpath("nvidia.com-gpu.json").write_text("{}")
    stranger = "exosuit.dev-fpga_11111111-2222-4333-8444-555555555555.json"
    host.spec_dir.joinpath(stranger).write_text("{}")
    api.release(CLAIM)
    assert host.step() is True
    assert host.files() == sorted(["nvidia.com-gpu.json", stranger, spec_file_name("fpga", OTHER)])
    assert CLAIM not in host.cache.load().containers
    api.release(OTHER)
    host.step()
    assert host.files() == sorted(["nvidia.com-gpu.json", stranger])
    assert host.cache.load().containers == {}


def test_an_api_without_containers_changes_nothing(tmp_path, api):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga()))
    host.step()
    host.state.desired_state = {"generation": 9, "programs": []}  # an older API's
    assert host.reconciler.step(host.state) is False
    assert host.files() == [spec_file_name("fpga", CLAIM)]


def test_a_device_that_is_not_there_fails_with_the_reason_and_writes_nothing(tmp_path, api):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga(1), ("fpga", "intel_fpga", "0000:99:00.0", "PCI", {})))
    assert host.step() is True
    assert host.files() == []
    assert api.cdi[CLAIM] == {
        "cdi": "failed",
        "reason": f"device 0000:99:00.0 is not found on host {HOST}",
        "devices": [],
    }
    # Tried again at a new generation only, and reported again only if it changed.
    assert host.step() is False
    api.generation += 1
    assert host.step() is True
    assert len(api.reports) == 1


def test_a_drivers_refusal_is_the_reason_reported(tmp_path, api):
    host = Host(tmp_path, api)
    # The N3000's VF1 is not the card's PF: a handle the card's PF does not list …
    vf1 = ("fpga", "intel_fpga", "0000:b1:00.0", "PCI", pci_cpid("0000:b2:00.0"))
    api.claim(entry(CLAIM, vf1))
    host.step()
    assert api.cdi[CLAIM]["cdi"] == "failed"
    assert api.cdi[CLAIM]["reason"].startswith("intel_fpga: 0000:b2:00.0 shows no FPGA port")
    # … and a VF given to a VM through vfio-pci is handed to a container through vfio.
    api.claim(entry(OTHER, dfl("0000:b1:00.2")))
    host.step()
    nodes = host.spec("fpga", OTHER)["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes == [{"path": "/dev/vfio/vfio"}, {"path": "/dev/vfio/10"}]


class Plain:
    """A driver that finds one FPGA and cannot hand it to containers."""

    name = "plain"

    def discover(self):
        return [fpga("0000:0e:00.0")]


class Broken(Plain):
    """One that can, but breaks doing it."""

    name = "broken"

    def container_edits(self, device, attach_handle):
        raise OSError(5, "Input/output error")


@pytest.mark.parametrize(
    ("driver", "reason"),
    [
        (Plain(), "the driver plain cannot hand devices to containers"),
        (Broken(), "broken: OSError: [Errno 5] Input/output error"),
    ],
)
def test_a_driver_that_cannot_give_edits_fails_the_claim(tmp_path, api, driver, reason):
    host = Host(tmp_path, api)
    host.plugins = DriverSet.fixed([driver])
    host.restart()
    api.claim(entry(CLAIM, ("fpga", driver.name, "0000:0e:00.0", "PCI", {})))
    host.step()
    assert api.cdi[CLAIM] == {"cdi": "failed", "reason": reason, "devices": []}
    assert host.files() == []


def test_an_outcome_not_acknowledged_survives_a_restart_and_a_404_removes_the_files(
    tmp_path, api, caplog
):
    host = Host(tmp_path, api)
    api.fail_puts = 2
    api.claim(entry(CLAIM, simulated_fpga()))
    host.step()
    assert api.reports == []
    specs = host.cache.load().containers[CLAIM]
    assert (specs["state"], specs["acknowledged"]) == ("written", False)
    host.restart()
    assert host.step() is False  # 503 again: kept; the file is there, not rewritten
    assert host.step() is False  # delivered now
    assert [body["cdi"] for _, body in api.reports] == ["written"]
    assert "will retry" in caplog.text
    # Released before the agent heard (its desired state still lists it): the API says
    # 404 to the report, and the files go at once and stay gone while it is listed.
    api.claim(entry(OTHER, simulated_fpga(4)))
    api.known.discard(OTHER)
    assert host.step() is True
    assert spec_file_name("fpga", OTHER) not in host.files()
    assert host.cache.load().containers[OTHER]["state"] == "gone"
    assert host.step() is False
    assert spec_file_name("fpga", OTHER) not in host.files()
    assert [claim for claim, _ in api.reports] == [CLAIM]
    api.release(OTHER)
    host.step()
    assert OTHER not in host.cache.load().containers


def test_a_write_interrupted_before_the_file_is_finished_again(tmp_path, api):
    host = Host(tmp_path, api)
    item = entry(CLAIM, simulated_fpga())
    api.claim(item)
    # The cache names the file before it is written: a crash right then leaves this.
    host.state.containers[CLAIM] = {
        "digest": parse_claim(item).digest,
        "files": {spec_file_name("fpga", CLAIM): None},
        "state": "pending",
        "report": None,
        "acknowledged": False,
    }
    host.cache.save(host.state)
    host.spec_dir.mkdir()
    host.spec_dir.joinpath(f".{spec_file_name('fpga', CLAIM)}.tmp").write_text("half")
    host.restart()
    assert host.step() is True
    assert host.files() == [spec_file_name("fpga", CLAIM)]
    assert api.cdi[CLAIM]["cdi"] == "written"


def test_an_unwritable_directory_fails_with_the_reason(tmp_path, api):
    host = Host(tmp_path, api)
    host.spec_dir.write_text("a file, not a directory")
    api.claim(entry(CLAIM, simulated_fpga()))
    host.step()
    assert api.cdi[CLAIM]["cdi"] == "failed"
    assert api.cdi[CLAIM]["reason"].startswith(f"cannot write {host.spec_dir}/")


def test_a_malformed_entry_is_logged_once_and_the_others_written(tmp_path, api, caplog):
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga()))
    api.containers["junk"] = {"claim": "junk"}
    caplog.set_level(logging.ERROR, logger="exosuit.agent.cdi")
    host.step()
    host.step()
    said = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(said) == 1
    assert host.files() == [spec_file_name("fpga", CLAIM)]


def test_the_agent_loop_writes_the_spec_after_the_desired_state_poll(tmp_path, api):
    """From the claim to the file, through the agent's loop on a FakeClock."""
    from exosuit.agent.programs import ProgramReconciler
    from exosuit.images.store import ContentStore

    host = Host(tmp_path, api)
    clock = FakeClock()
    start = clock.now()
    agent = Agent(
        HOST,
        host.plugins,
        Reporter(host.session, ENDPOINT, HOST),
        host.cache,
        interval=60,
        jitter=0,
        clock=clock,
        reconcilers=[
            ProgramReconciler(
                HOST,
                host.plugins,
                host.session,
                ENDPOINT,
                ContentStore(str(tmp_path / "images"), 10**6),
                host.cache,
                clock=clock,
                interval=5.0,
            ),
            host.reconciler,
        ],
    )
    seen: list[tuple[float, list[str]]] = []
    clock.call_at(start + 12, lambda: api.claim(entry(CLAIM, simulated_fpga())))
    clock.call_at(start + 14, lambda: seen.append((clock.now(), host.files())))
    clock.call_at(start + 16, lambda: seen.append((clock.now(), host.files())))
    clock.call_at(start + 32, lambda: api.release(CLAIM))
    clock.call_at(start + 40, lambda: seen.append((clock.now(), host.files())))
    clock.call_at(start + 50, agent.stop)
    agent.run()
    # Not before the poll after the claim (every 5 s: at 15 s), gone after the release.
    assert seen == [
        (start + 14, []),
        (start + 16, [spec_file_name("fpga", CLAIM)]),
        (start + 40, []),
    ]
    assert [body["cdi"] for _, body in api.reports] == ["written"]
    assert host.cache.load().containers == {}


def test_written_specs_resolve_to_the_handles_of_the_claim(tmp_path, api):
    """Every device id reported is defined in exactly one written file, once."""
    host = Host(tmp_path, api)
    api.claim(entry(CLAIM, simulated_fpga(5), simulated_fpga(6), dfl(N3000_VF0)))
    host.step()
    defined = []
    for name in host.files():
        with open(host.spec_dir / name) as f:
            spec = json.load(f)
        defined += [f"{spec['kind']}={d['name']}" for d in spec["devices"]]
    assert sorted(defined) == sorted(api.cdi[CLAIM]["devices"])
    assert len(set(defined)) == len(defined)
    vf = host.spec("fpga", CLAIM)["devices"][2]["containerEdits"]
    assert vf["deviceNodes"] == [{"path": "/dev/dfl-port.1"}]
    assert "EXOSUIT_DEVICE_2_VF_INDEX=0" in vf["env"]


def test_attach_handles_are_given_as_the_desired_state_says(tmp_path):
    """The handle the driver is asked about is the desired state's, not rediscovered."""
    claim = parse_claim(entry(CLAIM, simulated_fpga(9)))
    assert claim.devices[0].attach_handle == AttachHandle(
        "TEST_PCI", {"domain": "0000", "bus": "0c", "device": "01", "function": "1"}
    )


# -- against the real API ---------------------------------------------------------------


def test_the_real_api_hears_written_and_its_release_removes_the_files(
    tmp_path, conf, sqlite_database
):
    """The claims API of issue 12 (microversion 2.8) and its agent endpoint, in-process:
    the claim's cdi state follows the agent's report; a claim released before the agent
    reported is answered 404, and the files go at once."""
    from exosuit.api.deploy import loadapp
    from tests.conftest import ApiClient

    app = loadapp(conf, sqlite_database)
    client = ApiClient(app)
    session = WsgiSession(app)
    cache = AgentCache(str(tmp_path / "state"))
    simulated = load_driver(
        "simulated", DriverContext(hostname=HOST, state_dir=str(tmp_path / "state" / "sim"))
    )
    plugins = DriverSet.fixed([simulated])
    reconciler = CdiReconciler(HOST, plugins, session, ENDPOINT, cache, str(tmp_path / "cdi"))
    agent = Agent(
        HOST,
        plugins,
        Reporter(session, ENDPOINT, HOST),
        cache,
        jitter=0,
        clock=FakeClock(),
        reconcilers=[reconciler],
    )
    assert agent.deliver(agent.snapshot()).kind == "ok"
    groups = [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
    profile = client.request(
        "POST", "/v2/device_profiles", [{"name": "cdi", "groups": groups}], version="2.8"
    )
    assert profile.status_code == 201, profile.text

    def claim() -> dict:
        answer = client.request(
            "POST",
            "/v2/claims",
            {"device_profile_name": "cdi", "hostname": HOST, "container": True},
            version="2.8",
        )
        assert answer.status_code == 201, answer.text
        return answer.json

    first = claim()
    assert first["cdi"]["state"] == "pending"
    assert agent.deliver(agent.snapshot()).kind == "ok"  # the answer's desired state lists it
    assert reconciler.step(agent.state) is True
    shown = client.request("GET", f"/v2/claims/{first['uuid']}", version="2.8").json
    assert shown["cdi"] == {"state": "written", "reason": None}
    name = spec_file_name("fpga", first["uuid"])
    spec = json.loads((tmp_path / "cdi" / name).read_text())
    assert [f"{spec['kind']}={d['name']}" for d in spec["devices"]] == [
        d["cdi_device"] for d in shown["devices"]
    ]
    assert cache.load().containers[first["uuid"]]["acknowledged"] is True

    # Released: the next desired state does not list it; the file goes.
    assert client.request("DELETE", f"/v2/claims/{first['uuid']}", version="2.8").status_code == 204
    assert agent.deliver(agent.snapshot()).kind == "ok"
    assert reconciler.step(agent.state) is True
    assert os.listdir(tmp_path / "cdi") == []

    # Released before the agent wrote: the API answers its report 404.
    second = claim()
    assert agent.deliver(agent.snapshot()).kind == "ok"
    stale = copy.deepcopy(agent.state.desired_state)
    assert (
        client.request("DELETE", f"/v2/claims/{second['uuid']}", version="2.8").status_code == 204
    )
    agent.state.desired_state = stale
    assert reconciler.step(agent.state) is True
    assert os.listdir(tmp_path / "cdi") == []
    assert cache.load().containers[second["uuid"]]["state"] == "gone"
