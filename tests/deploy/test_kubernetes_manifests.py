"""deploy/kubernetes/: the base and its overlays rendered (tests/deploy/kustomize.py),
every object valid in Kubernetes 1.34 and 1.35 (their published schemas, strict), and
what each must say for Exosuit to run, read from Exosuit's own code: the paths the
agent and the kubelet plugin read and write (their configuration defaults and
options), the Kubernetes API calls the plugin makes (RBAC), the console scripts the
containers run (one image), the device types the drivers report (DeviceClasses)."""

from __future__ import annotations

import ast
import copy
import importlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from exosuit.cmd.kubelet_plugin import build_parser
from exosuit.conf import (
    AgentSettings,
    ApiSettings,
    CdiSettings,
    DefaultSettings,
    ImagesSettings,
    make_agent_conf,
    make_conf,
)
from exosuit.kubernetes.publisher import SlicePublisher
from exosuit.kubernetes.resource_claims import allocated_devices
from exosuit.kubernetes.slices import DRIVER, Inventory
from tests.deploy import kube_calls
from tests.deploy.kustomize import KustomizeError, build
from tests.helpers.kube_schemas import KUBERNETES_VERSIONS, schema_errors
from tests.kubelet.kube_standin import KubeStandIn

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("openstack", "standalone")
RENDERED = {name: build(DEPLOY / "overlays" / name) for name in OVERLAYS}
EXAMPLES = sorted((DEPLOY / "examples").glob("*.yaml"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
NODE = "node-a"


def one(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def container(pod_owner: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in pod_owner["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def all_documents() -> list[tuple[str, dict[str, Any]]]:
    found = [(name, d) for name in OVERLAYS for d in RENDERED[name]]
    for path in EXAMPLES:
        found += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return found


# -- the layout and the rendering ---------------------------------------------------------------


def test_the_base_lists_every_file_beside_it_and_each_overlay_renders():
    base = DEPLOY / "base"
    [kustomization] = yaml.safe_load_all((base / "kustomization.yaml").read_text())
    beside = {p.name for p in base.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(beside)
    assert sorted(p.name for p in (DEPLOY / "overlays").iterdir()) == sorted(OVERLAYS)
    kinds = {d["kind"] for d in RENDERED["openstack"]}
    assert {
        "Namespace",
        "ConfigMap",
        "Job",
        "Deployment",
        "Service",
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DeviceClass",
    } <= kinds
    assert (DEPLOY / "Containerfile").is_file()


@pytest.mark.parametrize(
    "origin, document",
    all_documents(),
    ids=[f"{o}:{d['kind']}:{d['metadata']['name']}" for o, d in all_documents()],
)
def test_each_object_is_valid_in_every_supported_kubernetes(origin, document):
    assert KUBERNETES_VERSIONS == ("1.34", "1.35")
    assert schema_errors(document) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubernetes_validate_strict_passes_the_rendered_overlay(overlay, tmp_path):
    """The command an operator can run: ``kubectl kustomize overlays/<name> |
    kubernetes-validate --strict -k 1.34 -k 1.35 -``; a kind it has no schema for
    would be a warning, so none may be printed."""
    rendered = tmp_path / f"{overlay}.yaml"
    rendered.write_text(yaml.safe_dump_all(RENDERED[overlay]))
    versions = [arg for v in KUBERNETES_VERSIONS for arg in ("-k", v)]
    command = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", *versions]
    ran = subprocess.run([*command, str(rendered)], capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    broken = copy.deepcopy(RENDERED[overlay])
    broken[0]["metadata"]["lables"] = {}
    rendered.write_text(yaml.safe_dump_all(broken))
    ran = subprocess.run([*command, str(rendered)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1 and ran.stdout.count("'lables' was unexpected") == 2


def test_the_validation_catches_a_misspelt_field_and_a_wrong_type():
    daemonset = one(RENDERED["standalone"], "DaemonSet", "exosuit-node")
    misspelt = copy.deepcopy(daemonset)
    misspelt["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    errors = schema_errors(misspelt)
    assert len(errors) == 2 and all("'volumeMount' was unexpected" in e for e in errors)
    wrong = copy.deepcopy(daemonset)
    wrong["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    assert schema_errors(wrong)
    unknown = {"apiVersion": "exosuit.dev/v1", "kind": "Accelerator", "metadata": {"name": "x"}}
    assert "Couldn't find schema" in schema_errors(unknown)[0]


def test_the_overlays_patch_what_they_say_and_keep_the_rest():
    standalone, openstack = RENDERED["standalone"], RENDERED["openstack"]
    assert one(standalone, "Deployment", "exosuit-api")["spec"]["replicas"] == 1
    assert one(openstack, "Deployment", "exosuit-api")["spec"]["replicas"] == 2
    assert one(standalone, "PersistentVolumeClaim", "exosuit-images")["spec"]["accessModes"] == [
        "ReadWriteOnce"
    ]
    assert [d for d in openstack if d["kind"] == "StatefulSet"] == []
    api_env = [
        e["name"] for e in container(one(openstack, "Deployment", "exosuit-api"), "api")["env"]
    ]
    # Merged by name: the base's variable kept, the overlay's added.
    assert api_env[0] == "OS_DATABASE__CONNECTION" and "OS_KEYSTONE_AUTHTOKEN__PASSWORD" in api_env
    plugin = container(one(openstack, "DaemonSet", "exosuit-node"), "kubelet-plugin")
    assert {e["name"] for e in plugin["env"]} == {"NODE_NAME", "EXOSUIT_URL", "OS_CLOUD"}
    assert [m["mountPath"] for m in plugin["volumeMounts"]] == [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/etc/openstack",
    ]
    config = one(openstack, "ConfigMap", "exosuit-config")["data"]
    assert "auth_strategy = keystone" in config["exosuit.conf"]
    assert (
        "auth_strategy"
        not in one(standalone, "ConfigMap", "exosuit-config")["data"]["exosuit.conf"]
    )


def kustomization(tmp_path: Path, text: str, **files: str) -> Path:
    (tmp_path / "kustomization.yaml").write_text(text)
    for name, content in files.items():
        (tmp_path / name.replace("_", ".")).write_text(content)
    return tmp_path


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n"


@pytest.mark.parametrize(
    "text, patch, why",
    [
        ("resources: [cm.yaml]\nconfigMapGenerator: []\n", "", "not supported here"),
        ("resources: [cm.yaml]\nnamespace: x\n", "", "not supported here"),
        (
            "resources: [cm.yaml]\npatches: [{path: p.yaml, target: {kind: ConfigMap}}]\n",
            "",
            "only patches by path",
        ),
        (
            "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n",
            "no resource",
        ),
        (
            "resources: [cm.yaml]\npatches: [{path: p.yaml}]\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {$patch: replace}\n",
            "patch directives",
        ),
        ("resources: [cm.yaml, cm.yaml]\n", "", "given twice"),
        ("resources: [cm.yaml]\npatches: [{path: p.yaml}]\n", f"{CM}---\n{CM}", "one patch per"),
    ],
)
def test_the_reader_refuses_what_it_would_not_render_as_kustomize(tmp_path, text, patch, why):
    directory = kustomization(tmp_path, text, cm_yaml=CM, p_yaml=patch or CM)
    with pytest.raises(KustomizeError, match=re.escape(why)):
        build(directory)


def test_the_reader_merges_as_a_strategic_merge_patch(tmp_path):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "exosuit", "args": ["x"], "env": [{"name": "A"}]},
                        {"name": "b", "image": "other:1"},
                    ]
                }
            },
        },
    }
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": None,
            "template": {
                "spec": {"containers": [{"name": "a", "args": ["y"], "env": [{"name": "B"}]}]}
            },
        },
    }
    directory = kustomization(
        tmp_path,
        "resources: [d.yaml]\npatches: [{path: p.yaml}]\n"
        "images: [{name: exosuit, newName: r.example/exosuit, newTag: '2'}]\n",
        d_yaml=yaml.safe_dump(deployment),
        p_yaml=yaml.safe_dump(patch),
    )
    [rendered] = build(directory)
    assert "replicas" not in rendered["spec"]
    assert rendered["spec"]["template"]["spec"]["containers"] == [
        {
            "name": "a",
            "image": "r.example/exosuit:2",
            "args": ["y"],
            "env": [{"name": "A"}, {"name": "B"}],
        },
        {"name": "b", "image": "other:1"},
    ]


# -- one image, every console script --------------------------------------------------------


def exosuit_containers(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for d in documents:
        spec = (d.get("spec") or {}).get("template", {}).get("spec") or {}
        found += [c for c in spec.get("containers", ()) if "exosuit" in c["image"]]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_exosuit_container_runs_a_console_script_of_the_one_image(overlay):
    containers = exosuit_containers(RENDERED[overlay])
    assert {c["image"] for c in containers} == {"registry.example.com/exosuit:0.1.0"}
    commands = {c["command"][0] for c in containers}
    assert commands <= set(SCRIPTS)
    # Every process of a deployment, from one image.
    assert commands == {
        "exosuit-api",
        "exosuit-conductor",
        "exosuit-manage",
        "exosuit-agent",
        "exosuit-kubelet-plugin",
    }
    for c in containers:
        assert c["command"] == c["command"][:1]  # options in args, where they are read
    # The options given are the commands' own.
    plugin = container(one(RENDERED[overlay], "DaemonSet", "exosuit-node"), "kubelet-plugin")
    options = build_parser().parse_args(plugin["args"])
    assert options.publish_interval == 30 and options.prepare_timeout == 40


def test_every_console_script_names_a_function_that_exists():
    for name, target in SCRIPTS.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), name


def containerfile() -> list[list[str]]:
    """The Containerfile's instructions, each as its words (continued lines joined)."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Containerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [shlex.split(line) for line in lines if line and not line.startswith("#")]


def test_the_containerfile_installs_the_package_with_the_kubernetes_extra():
    instructions = containerfile()
    [base] = [words[1] for words in instructions if words[0] == "FROM"]
    requires = PYPROJECT["project"]["requires-python"]
    assert base.split(":")[1].startswith("3.11") and ">=3.11" in requires
    copied = [words[1:-1] for words in instructions if words[0] == "COPY"]
    assert sorted(sum(copied, [])) == ["README.md", "exosuit", "pyproject.toml"]
    [install] = [words for words in instructions if words[0] == "RUN" and "pip" in words]
    assert "/src[kubernetes]" in install
    assert not any(words[0] == "ENTRYPOINT" for words in instructions)


def test_what_the_containerfile_copies_builds_a_wheel_with_every_console_script(tmp_path):
    """The COPY lines' files alone make the package (README.md is its readme)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    (source / "exosuit").symlink_to(ROOT / "exosuit")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "wheel"), str(source)],
        check=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    [wheel] = (tmp_path / "wheel").glob("exosuit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        [entry_points] = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        text = archive.read(entry_points).decode()
        names = archive.namelist()
    for script, target in SCRIPTS.items():
        assert f"{script} = {target}" in text
    # Every module and data file of the package (migrations, templates, schemas, protos).
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["exosuit"]
    needed = {p for p in (ROOT / "exosuit").rglob("*.py") if "__pycache__" not in p.parts}
    needed |= {p for pattern in data for p in (ROOT / "exosuit").glob(pattern) if p.is_file()}
    missing = {str(p.relative_to(ROOT)) for p in needed} - set(names)
    assert missing == set()


# -- what the node's processes read and write ------------------------------------------------


def pod_environment(owner: dict[str, Any], name: str) -> dict[str, str]:
    """The container's variables as the kubelet would set them (a field of the pod as
    this test's node, a Secret's key as a placeholder)."""
    found = {}
    for variable in container(owner, name).get("env", ()):
        source = variable.get("valueFrom") or {}
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "spec.nodeName"
            found[variable["name"]] = NODE
        elif "secretKeyRef" in source:
            found[variable["name"]] = f"secret-{source['secretKeyRef']['name']}"
        else:
            found[variable["name"]] = variable["value"]
    return found


def config_files(
    documents: list[dict[str, Any]], owner: dict[str, Any], name: str, tmp_path: Path
) -> list[str]:
    """The container's --config-file paths, each written where this test can read it
    from the ConfigMap its volume mounts."""
    volumes = {v["name"]: v for v in owner["spec"]["template"]["spec"]["volumes"]}
    args = container(owner, name)["args"]
    files = [args[i + 1] for i, arg in enumerate(args) if arg == "--config-file"]
    written = []
    for path in files:
        [mount] = [
            m
            for m in container(owner, name)["volumeMounts"]
            if os.path.dirname(path) == m["mountPath"]
        ]
        config_map = volumes[mount["name"]]["configMap"]["name"]
        data = one(documents, "ConfigMap", config_map)["data"]
        target = tmp_path / os.path.basename(path)
        target.write_text(data[os.path.basename(path)])
        written.append(str(target))
    return written


def host_mounts(owner: dict[str, Any], name: str) -> dict[str, tuple[str, bool]]:
    """mount path → (the node's path, read-only) of the container's hostPath volumes."""
    volumes = {v["name"]: v for v in owner["spec"]["template"]["spec"]["volumes"]}
    return {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
        for m in container(owner, name)["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }


def assert_on_the_node(path: str, mounts: dict[str, tuple[str, bool]], *, writes: bool) -> None:
    """``path`` in the container is the same path on the node, through a hostPath
    mount, writable if the process writes there."""
    [(mount_path, (host_path, read_only))] = [
        (m, v) for m, v in mounts.items() if path == m or path.startswith(m.rstrip("/") + "/")
    ]
    assert host_path == mount_path, f"{path} is {host_path} on the node"
    assert not (writes and read_only), f"{path} is mounted read-only"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemonset_mounts_what_the_agent_reads_and_writes(overlay, tmp_path, monkeypatch):
    documents = RENDERED[overlay]
    daemonset = one(documents, "DaemonSet", "exosuit-node")
    for variable, value in pod_environment(daemonset, "agent").items():
        monkeypatch.setenv(variable, value)
    conf = make_agent_conf(config_files(documents, daemonset, "agent", tmp_path))
    agent, cdi = AgentSettings.from_conf(conf), CdiSettings.from_conf(conf)
    # The agent's host name is the node's (the plugin asks Exosuit for that host).
    assert DefaultSettings.from_conf(conf).host == NODE
    mounts = host_mounts(daemonset, "agent")
    # sysfs: read, and written (SR-IOV VFs, mdevs, driver binding).
    assert_on_the_node(os.path.join(agent.sysfs_root, "sys"), mounts, writes=True)
    assert_on_the_node(agent.state_dir, mounts, writes=True)  # its cache, kept on the node
    assert_on_the_node(cdi.spec_dir, mounts, writes=True)  # read by the container runtime
    assert cdi.spec_dir == "/var/run/cdi"
    assert container(daemonset, "agent")["securityContext"]["privileged"] is True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_daemonset_mounts_what_the_plugin_reads_and_writes(overlay, monkeypatch):
    daemonset = one(RENDERED[overlay], "DaemonSet", "exosuit-node")
    for variable, value in pod_environment(daemonset, "kubelet-plugin").items():
        monkeypatch.setenv(variable, value)
    plugin = container(daemonset, "kubelet-plugin")
    options = build_parser().parse_args(plugin["args"])
    assert options.node_name == NODE
    checkpoint = options.checkpoint_dir or os.path.join(options.plugins_dir, DRIVER)
    mounts = host_mounts(daemonset, "kubelet-plugin")
    for written in (options.registry_dir, options.plugins_dir, checkpoint):
        assert_on_the_node(written, mounts, writes=True)
    assert options.registry_dir == "/var/lib/kubelet/plugins_registry"
    assert options.plugins_dir == "/var/lib/kubelet/plugins"
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "exosuit-node"
    assert pod.get("automountServiceAccountToken", True)  # in-cluster: the account's token


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_writes_its_images_where_every_replica_sees_them(overlay, tmp_path, monkeypatch):
    documents = RENDERED[overlay]
    api = one(documents, "Deployment", "exosuit-api")
    for variable, value in pod_environment(api, "api").items():
        monkeypatch.setenv(variable, value)
    images = ImagesSettings.from_conf(make_conf(config_files(documents, api, "api", tmp_path)))
    volumes = {v["name"]: v for v in api["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container(api, "api")["volumeMounts"]}
    shared = mounts[images.data_dir]["persistentVolumeClaim"]["claimName"]
    access = one(documents, "PersistentVolumeClaim", shared)["spec"]["accessModes"]
    assert api["spec"]["replicas"] == 1 or access == ["ReadWriteMany"]
    assert "emptyDir" in mounts[images.cache_dir]
    assert container(api, "api")["securityContext"]["readOnlyRootFilesystem"] is True


# -- RBAC: the calls the code makes ------------------------------------------------------------


def granted(role: dict[str, Any]) -> set[kube_calls.Permission]:
    return {
        kube_calls.Permission(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_grants_exactly_the_calls_the_plugin_makes(overlay):
    documents = RENDERED[overlay]
    calls = kube_calls.calls_in_code()
    needed = {call.permission for call in calls}
    assert {call.method for call in calls} >= {
        "list_resource_slice",
        "create_resource_slice",
        "read_namespaced_resource_claim",
    }
    assert granted(one(documents, "ClusterRole", "exosuit-kubelet-plugin")) == needed
    binding = one(documents, "ClusterRoleBinding", "exosuit-kubelet-plugin")
    daemonset = one(documents, "DaemonSet", "exosuit-node")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    one(documents, "ServiceAccount", account)
    assert binding["roleRef"]["name"] == "exosuit-kubelet-plugin"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": daemonset["metadata"]["namespace"]}
    ]
    # Only the plugin talks to Kubernetes.
    for d in documents:
        if d["kind"] in ("Deployment", "Job", "StatefulSet"):
            assert d["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_code_scan_sees_every_request_the_plugin_sends():
    """The publisher and the claim reader against the stand-in API server: each request
    it received is one the scan of the code found (the scan misses nothing they do)."""
    standin = KubeStandIn().start()
    try:
        standin.add_node(NODE)
        device = {"uuid": "d1", "type": "FPGA", "numa_node": 0}
        handles = [
            {"uuid": f"h{i}", "device_uuid": "d1", "attach_type": "TEST_PCI", "attach_info": {}}
            for i in range(130)
        ]
        api = client.ApiClient(client.Configuration(host=standin.url))
        publisher = SlicePublisher(api, NODE)
        publisher.sync(Inventory(NODE, [device], handles))  # two slices created
        publisher.sync(Inventory(NODE, [device], handles[:3]))  # one replaced, one deleted
        uid = standin.add_claim(
            "default",
            "c",
            [{"request": "r", "driver": DRIVER, "pool": NODE, "device": "fpga-h0"}],
        )
        allocated_devices(client.ResourceV1Api(api), "default", "c", uid)
        requests = list(standin.requests)
    finally:
        standin.stop()
    assert standin.forbidden == []
    assert {method for method, _ in requests} == {"GET", "POST", "PUT", "DELETE"}
    scanned = {call.permission for call in kube_calls.calls_in_code()}
    for method, path in requests:
        assert kube_calls.rbac(method, path) in scanned, (method, path)


def test_the_scan_names_requests_as_rbac_does():
    rbac = kube_calls.rbac
    assert rbac("GET", "/api/v1/nodes/{name}") == kube_calls.Permission("", "nodes", "get")
    assert rbac("GET", "/apis/resource.k8s.io/v1/resourceslices", watch=True).verb == "watch"
    assert rbac("DELETE", "/apis/resource.k8s.io/v1/resourceslices").verb == "deletecollection"
    status = rbac("PATCH", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status")
    assert status == kube_calls.Permission("resource.k8s.io", "resourceclaims/status", "patch")
    assert rbac("GET", "/api/v1/namespaces/ns/pods") == kube_calls.Permission("", "pods", "list")


# -- DeviceClasses, the example, the Services --------------------------------------------------


def reported_types() -> set[str]:
    """The device types the drivers report: every ``type="…"`` of a ``Device(…)``."""
    found = set()
    for path in (ROOT / "exosuit" / "drivers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Device":
                for keyword in node.keywords:
                    if keyword.arg == "type" and isinstance(keyword.value, ast.Constant):
                        found.add(keyword.value.value)
    return found


def test_a_device_class_selects_each_type_the_drivers_report():
    classes = [d for d in RENDERED["standalone"] if d["kind"] == "DeviceClass"]
    expressions = {
        d["metadata"]["name"]: " ".join(s["cel"]["expression"] for s in d["spec"]["selectors"])
        for d in classes
    }
    assert all(f'device.driver == "{DRIVER}"' in e for e in expressions.values())
    types = reported_types()
    assert {"FPGA", "GPU", "NIC", "QAT", "SSD"} <= types
    for device_type in types:
        selecting = [
            name
            for name, e in expressions.items()
            if f'device.attributes["{DRIVER}"].type == "{device_type}"' in e
        ]
        assert selecting == [f"exosuit-{device_type.lower()}"] or (
            device_type == "GPU" and selecting == ["exosuit-gpu", "exosuit-gpu-partition"]
        ), device_type
    assert expressions["exosuit-device"] == f'device.driver == "{DRIVER}"'


def test_the_example_claim_asks_for_a_class_that_exists_and_the_pod_uses_it():
    classes = {d["metadata"]["name"] for d in RENDERED["standalone"] if d["kind"] == "DeviceClass"}
    [example] = EXAMPLES
    documents = [d for d in yaml.safe_load_all(example.read_text()) if d]
    [claim] = [d for d in documents if d["kind"] == "ResourceClaim"]
    [pod] = [d for d in documents if d["kind"] == "Pod"]
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] in classes
    [pod_claim] = pod["spec"]["resourceClaims"]
    assert pod_claim["resourceClaimName"] == claim["metadata"]["name"]
    [job] = pod["spec"]["containers"]
    assert job["resources"]["claims"] == [{"name": pod_claim["name"]}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_selects_a_workloads_pods_and_port(overlay):
    documents = RENDERED[overlay]
    for service in (d for d in documents if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        [workload] = [
            d
            for d in documents
            if d["kind"] in ("Deployment", "StatefulSet")
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert workload["spec"]["selector"]["matchLabels"] == selector
        ports = {
            p["name"]
            for c in workload["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", ())
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_every_secret_the_manifests_read_is_named_in_the_docs():
    text = (ROOT / "doc" / "kubernetes.md").read_text()
    named = {
        ref["name"] for overlay in OVERLAYS for d in RENDERED[overlay] for ref in _secret_refs(d)
    }
    assert named == {"exosuit-database", "exosuit-keystone", "exosuit-agent", "exosuit-clouds"}
    for secret in named:
        assert f"`{secret}`" in text, secret


def _secret_refs(value: Any) -> list[dict[str, str]]:
    if isinstance(value, dict):
        found = [value["secretKeyRef"]] if "secretKeyRef" in value else []
        if "secret" in value and "secretName" in value["secret"]:
            found.append({"name": value["secret"]["secretName"]})
        return found + [r for v in value.values() for r in _secret_refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _secret_refs(v)]
    return []


@pytest.mark.parametrize(
    "kind, name, container_name, groups",
    [
        ("Deployment", "exosuit-api", "api", ("keystone_authtoken", "placement", "nova")),
        ("Deployment", "exosuit-conductor", "conductor", ("placement", "nova", "service_user")),
        ("DaemonSet", "exosuit-node", "agent", ("agent",)),
    ],
)
def test_the_openstack_passwords_reach_the_sections_that_authenticate(
    kind, name, container_name, groups, tmp_path, monkeypatch
):
    """A section's password is its OS_<GROUP>__PASSWORD variable, from a Secret: read
    by keystoneauth as it builds the section's auth plugin."""
    from keystoneauth1 import loading as ks_loading

    documents = RENDERED["openstack"]
    owner = one(documents, kind, name)
    environment = pod_environment(owner, container_name)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    files = config_files(documents, owner, container_name, tmp_path)
    conf = make_agent_conf(files) if container_name == "agent" else make_conf(files)
    for group in groups:
        if group == "keystone_authtoken":  # keystonemiddleware registers it
            ks_loading.register_auth_conf_options(conf, group)
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        assert conf[group].auth_type == "password" and auth is not None
        assert conf[group].password == environment[f"OS_{group.upper()}__PASSWORD"]
        assert conf[group].password.startswith("secret-exosuit-")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agents_and_plugins_reach_the_api_where_it_listens(overlay, tmp_path, monkeypatch):
    documents = RENDERED[overlay]
    api = one(documents, "Deployment", "exosuit-api")
    for variable, value in pod_environment(api, "api").items():
        monkeypatch.setenv(variable, value)
    settings = ApiSettings.from_conf(make_conf(config_files(documents, api, "api", tmp_path)))
    [port] = container(api, "api")["ports"]
    assert (settings.host_ip, settings.port) == ("0.0.0.0", port["containerPort"])
    service = one(documents, "Service", "exosuit-api")
    [service_port] = service["spec"]["ports"]
    meta = service["metadata"]
    url = f"http://{meta['name']}.{meta['namespace']}.svc:{service_port['port']}"
    assert service_port["targetPort"] == port["name"]
    daemonset = one(documents, "DaemonSet", "exosuit-node")
    agent_conf = make_agent_conf(config_files(documents, daemonset, "agent", tmp_path))
    assert AgentSettings.from_conf(agent_conf).api_url == url
    assert pod_environment(daemonset, "kubelet-plugin")["EXOSUIT_URL"] == url
    # On the node's network, the Service's name is found through the cluster's DNS.
    assert daemonset["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
