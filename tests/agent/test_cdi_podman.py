"""A real consumer of the agent's CDI specs: Debian's podman 4.3.1.

The agent's writer (agent/cdi.py, with the real simulated and intel_fpga drivers) writes
a claim's spec into /var/run/cdi; ``podman create --device exosuit.dev/fpga=<claim>-<n>
--rootfs DIR`` and ``podman init`` resolve it and write the container's OCI config.json,
which must show the injected device nodes (their type and numbers read from the host
node by podman), their cgroup rule and the environment. A spec podman cannot resolve (a
cdiVersion it does not know, annotations) is refused by the writer's own schema check
before podman ever sees it; written anyway, podman's error shows why the check exists.
tests/agent/conftest.py says where things are written and why.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from exosuit.agent.cache import AgentCache
from exosuit.agent.cdi import CdiReconciler, SpecDirectory, build_specs, parse_claim, spec_errors
from exosuit.agent.transport import WsgiSession
from exosuit.drivers import ContainerEdits, DeviceNode
from tests.agent.conftest import CDI_DIR
from tests.agent.test_cdi import ENDPOINT, HOST, ClaimsApi, dfl, drivers, entry, simulated_fpga

pytestmark = pytest.mark.slow

NULL = os.stat("/dev/null")  # what podman reads of the simulated nodes' host node


def unresolvable(result, device: str) -> bool:
    return result.returncode != 0 and f"unresolvable CDI devices {device}" in result.stderr


def write(tmp_path, api: ClaimsApi) -> CdiReconciler:
    """The agent's writer into /var/run/cdi, one step on the API's desired state."""
    cache = AgentCache(str(tmp_path / "state"))
    reconciler = CdiReconciler(HOST, drivers(tmp_path), WsgiSession(api), ENDPOINT, cache, CDI_DIR)
    step(reconciler, api)
    return reconciler


def step(reconciler: CdiReconciler, api: ClaimsApi) -> None:
    state = reconciler.cache.load()
    state.desired_state = api.desired_state()
    reconciler.step(state)


def test_podman_injects_the_nodes_and_environment_of_the_agents_spec(tmp_path, podman, claim_uuid):
    api = ClaimsApi()
    api.claim(entry(claim_uuid, simulated_fpga(1), simulated_fpga(2), dfl("0000:b1:00.1")))
    reconciler = write(tmp_path, api)
    assert api.cdi[claim_uuid]["cdi"] == "written"
    path = os.path.join(CDI_DIR, f"exosuit.dev-fpga_{claim_uuid}.json")
    assert os.path.isfile(path)

    # The two simulated handles (backed by /dev/null): the third, the recorded N3000's
    # VF, names a /dev/dfl-port.1 this machine does not have, so it is not asked for.
    name = podman.create(f"exosuit.dev/fpga={claim_uuid}-0", f"exosuit.dev/fpga={claim_uuid}-1")
    result = podman.init(name)
    assert "CDI" not in result.stderr, result.stderr
    config = podman.config(name)
    nodes = {node["path"]: node for node in config["linux"]["devices"]}
    for handle in ("fpga-0000-0c-00-1", "fpga-0000-0c-00-2"):
        node = nodes[f"/dev/exosuit-simulated/{handle}"]
        assert (node["type"], node["major"], node["minor"]) == (
            "c",
            os.major(NULL.st_rdev),
            os.minor(NULL.st_rdev),
        )
    rules = config["linux"]["resources"]["devices"]
    assert {
        "allow": True,
        "type": "c",
        "major": os.major(NULL.st_rdev),
        "minor": os.minor(NULL.st_rdev),
        "access": "rwm",
    } in rules
    env = config["process"]["env"]
    for variable in (
        f"EXOSUIT_CLAIM={claim_uuid}",
        "EXOSUIT_DEVICE_0_PCI_ADDRESS=0000:0c:00.1",
        "EXOSUIT_DEVICE_0_SIMULATED=true",
        "EXOSUIT_DEVICE_1_PCI_ADDRESS=0000:0c:00.2",
    ):
        assert variable in env, env
    assert not any(v.startswith("EXOSUIT_DEVICE_2_") for v in env)  # not asked for

    # Released: the agent removes the file, and podman no longer resolves the device.
    api.release(claim_uuid)
    step(reconciler, api)
    assert not os.path.exists(path)
    again = podman.create(f"exosuit.dev/fpga={claim_uuid}-0")
    assert unresolvable(podman.init(again), f"exosuit.dev/fpga={claim_uuid}-0")


def spec_for(claim_uuid: str) -> tuple[str, dict]:
    claim = parse_claim(entry(claim_uuid, simulated_fpga()))
    edits = ContainerEdits(
        device_nodes=(DeviceNode("/dev/exosuit-simulated/check", "/dev/null"),),
        env={"PCI_ADDRESS": "0000:0c:00.1"},
    )
    ((name, spec),) = build_specs(claim, [edits]).items()
    return name, spec


@pytest.mark.parametrize(
    ("change", "error"),
    [
        pytest.param(lambda s: s.update(cdiVersion="0.6.0"), "cdiVersion", id="version-0.6.0"),
        pytest.param(lambda s: s.update(cdiVersion="v0.5.0"), "cdiVersion", id="version-v0.5.0"),
        pytest.param(
            lambda s: s.update(annotations={"exosuit.dev/claim": "x"}),
            "annotations",
            id="annotations",
        ),
    ],
)
def test_a_spec_podman_cannot_resolve_is_refused_by_the_writers_check_first(
    podman, claim_uuid, change, error
):
    name, spec = spec_for(claim_uuid)
    device = f"exosuit.dev/fpga={claim_uuid}-0"
    directory = SpecDirectory(CDI_DIR)
    # What the writer writes resolves.
    assert spec_errors(spec) == []
    directory.write(name, json.dumps(spec).encode())
    result = podman.init(podman.create(device))
    assert not unresolvable(result, device), result.stderr
    assert "/dev/exosuit-simulated/check" in [
        d["path"] for d in podman.config(podman.names[-1])["linux"]["devices"]
    ]
    # The broken spec: the writer's check refuses it, saying why …
    bad = copy.deepcopy(spec)
    change(bad)
    errors = spec_errors(bad)
    assert any(error in e for e in errors), errors
    # … and, written past the check, podman cannot resolve the device.
    directory.write(name, json.dumps(bad).encode())
    result = podman.init(podman.create(device))
    assert unresolvable(result, device), result.stderr
    directory.remove(name)
