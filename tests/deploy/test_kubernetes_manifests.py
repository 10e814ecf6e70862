"""deploy/kubernetes/: every manifest read by the kubernetes client's model classes
(whole: a misspelt or unknown field is lost on the way and fails the test), and what
each must say for the plugin to work (doc/kubernetes.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exosuit.cmd.kubelet_plugin import build_parser
from tests.kubelet.kube_standin import model_round_trip

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "Pod"): "V1Pod",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass",
    ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
}


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path.name, document))
    return found


def of_kind(kind: str) -> list[dict]:
    return [d for _, d in documents() if d["kind"] == kind]


def test_the_manifests_are_there():
    assert sorted(p.name for p in DEPLOY.glob("*.yaml")) == [
        "claim-example.yaml",
        "deviceclass.yaml",
        "plugin.yaml",
    ]
    assert sorted(d["kind"] for _, d in documents()) == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet",
            "DeviceClass",
            "DeviceClass",
            "ResourceClaim",
            "Pod",
        ]
    )


@pytest.mark.parametrize(
    "name, document",
    documents(),
    ids=[f"{n}:{d['kind']}:{d['metadata']['name']}" for n, d in documents()],
)
def test_each_manifest_is_read_whole_by_its_model(name, document):
    klass = MODELS[(document["apiVersion"], document["kind"])]
    assert model_round_trip(document, klass) == document


def test_the_model_check_catches_a_misspelt_field():
    [daemonset] = of_kind("DaemonSet")
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    assert model_round_trip(broken, "V1DaemonSet") != broken


def test_the_daemonset_mounts_the_kubelets_directories_and_cdi():
    [daemonset] = of_kind("DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert sorted(host_paths.values()) == [
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
    ]
    [container] = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {host_paths[name]: path for name, path in mounts.items()} == {
        path: path for path in host_paths.values()
    }
    # The plugin's own defaults are those directories: no option needed for them.
    defaults = build_parser().parse_args([])
    assert defaults.registry_dir == "/var/lib/kubelet/plugins_registry"
    assert defaults.plugins_dir == "/var/lib/kubelet/plugins"


def test_the_daemonset_runs_the_plugin_with_options_it_knows():
    [daemonset] = of_kind("DaemonSet")
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["exosuit-kubelet-plugin"]
    args = build_parser().parse_args(container["args"])
    assert args.publish_interval == 30 and args.prepare_timeout == 40
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["EXOSUIT_URL"]["value"].startswith("http://")
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "exosuit-kubelet-plugin"


def test_rbac_grants_what_the_plugin_calls_to_its_service_account():
    [role] = of_kind("ClusterRole")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        ("resource.k8s.io", "resourceclaims", "get"),
        ("", "nodes", "get"),
        *(
            ("resource.k8s.io", "resourceslices", verb)
            for verb in ("list", "create", "update", "delete")
        ),
    }
    assert needed <= granted
    assert not any("*" in (resource, verb) for _, resource, verb in granted)
    [binding] = of_kind("ClusterRoleBinding")
    [account] = of_kind("ServiceAccount")
    [daemonset] = of_kind("DaemonSet")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": daemonset["metadata"]["namespace"],
        }
    ]


def test_the_device_classes_select_exosuits_devices_by_type():
    classes = {d["metadata"]["name"]: d for d in of_kind("DeviceClass")}
    fpga = classes["exosuit-fpga"]["spec"]["selectors"][0]["cel"]["expression"]
    assert 'device.driver == "exosuit.dev"' in fpga
    assert 'device.attributes["exosuit.dev"].type == "FPGA"' in fpga


def test_the_example_claim_asks_for_a_class_that_exists_and_the_pod_uses_it():
    classes = {d["metadata"]["name"] for d in of_kind("DeviceClass")}
    [claim] = of_kind("ResourceClaim")
    [pod] = of_kind("Pod")
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] in classes
    [pod_claim] = pod["spec"]["resourceClaims"]
    assert pod_claim["resourceClaimName"] == claim["metadata"]["name"]
    [container] = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": pod_claim["name"]}]
