"""The kubelet's gRPC services as exosuit/kubelet/protos/ holds them.

* ``make protos`` (grpcio-tools) gives exactly the committed modules;
* the services' full names give the method paths the kubelet calls, and every message
  has the fields, numbers and types of the published API (containers.md, sections 3
  and 4).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

from exosuit.kubelet.protos import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
)

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "exosuit" / "kubelet" / "protos"
SOURCES = ("pluginregistration.proto", "dra_v1.proto", "dra_v1beta1.proto")

STRING, BOOL, MESSAGE = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, "message"


def generated_names() -> list[str]:
    names = []
    for source in SOURCES:
        stem = source.removesuffix(".proto")
        names += [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]
    return names


def test_make_protos_gives_the_committed_modules(tmp_path):
    """The command of the Makefile's ``protos`` target, run on a copy of the sources,
    writes byte for byte what is committed."""
    copy = tmp_path / "exosuit" / "kubelet" / "protos"
    copy.mkdir(parents=True)
    for source in SOURCES:
        shutil.copy(PROTOS / source, copy / source)
    makefile = (ROOT / "Makefile").read_text()
    assert "grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=." in makefile
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            "--python_out=.",
            "--pyi_out=.",
            "--grpc_python_out=.",
            *(f"exosuit/kubelet/protos/{s}" for s in SOURCES),
        ],
        cwd=tmp_path,
        check=True,
    )
    for name in generated_names():
        assert (copy / name).read_bytes() == (PROTOS / name).read_bytes(), (
            f"{name} differs from what `make protos` writes: run it and commit the result"
        )


def test_the_method_paths_are_the_kubelets():
    registration = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert [f"/{registration.full_name}/{m.name}" for m in registration.methods] == [
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    ]
    for version, module in (("v1", dra_v1_pb2), ("v1beta1", dra_v1beta1_pb2)):
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert [f"/{service.full_name}/{m.name}" for m in service.methods] == [
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodePrepareResources",
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodeUnprepareResources",
        ]


def test_the_generated_stubs_call_those_paths():
    """The client stubs (what the tests call the plugin with) use the same paths."""
    for version, module in (("v1", dra_v1_pb2_grpc), ("v1beta1", dra_v1beta1_pb2_grpc)):
        text = Path(module.__file__).read_text()
        assert f"'/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodePrepareResources'" in text


def _fields(message) -> dict[str, tuple[int, object, bool]]:
    """name → (number, type, repeated) of a message's fields; a map field's type is
    ``("map", value message name)``."""
    found = {}
    for f in message.fields:
        repeated = f.is_repeated
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry:
                value = f.message_type.fields_by_name["value"].message_type.name
                found[f.name] = (f.number, ("map", value), False)
            else:
                found[f.name] = (f.number, f.message_type.name, repeated)
        else:
            found[f.name] = (f.number, f.type, repeated)
    return found


def test_the_registration_messages():
    messages = pluginregistration_pb2.DESCRIPTOR.message_types_by_name
    assert _fields(messages["PluginInfo"]) == {
        "type": (1, STRING, False),
        "name": (2, STRING, False),
        "endpoint": (3, STRING, False),
        "supported_versions": (4, STRING, True),
    }
    assert _fields(messages["RegistrationStatus"]) == {
        "plugin_registered": (1, BOOL, False),
        "error": (2, STRING, False),
    }
    assert _fields(messages["InfoRequest"]) == {}
    assert _fields(messages["RegistrationStatusResponse"]) == {}


@pytest.mark.parametrize("module", [dra_v1_pb2, dra_v1beta1_pb2], ids=["v1", "v1beta1"])
def test_the_dra_messages(module):
    messages = module.DESCRIPTOR.message_types_by_name
    expected = {
        "NodePrepareResourcesRequest": {"claims": (1, "Claim", True)},
        "NodePrepareResourcesResponse": {
            "claims": (1, ("map", "NodePrepareResourceResponse"), False)
        },
        "NodePrepareResourceResponse": {
            "devices": (1, "Device", True),
            "error": (2, STRING, False),
        },
        "Device": {
            "request_names": (1, STRING, True),
            "pool_name": (2, STRING, False),
            "device_name": (3, STRING, False),
            "cdi_device_ids": (4, STRING, True),
        },
        "NodeUnprepareResourcesRequest": {"claims": (1, "Claim", True)},
        "NodeUnprepareResourcesResponse": {
            "claims": (1, ("map", "NodeUnprepareResourceResponse"), False)
        },
        "NodeUnprepareResourceResponse": {"error": (1, STRING, False)},
        "Claim": {
            "namespace": (1, STRING, False),
            "uid": (2, STRING, False),
            "name": (3, STRING, False),
        },
    }
    assert {name: _fields(messages[name]) for name in expected} == expected
    assert set(messages) == set(expected)


def test_a_message_on_the_wire_is_the_published_encoding():
    """Field numbers as bytes: a Claim {namespace: "a", uid: "b", name: "c"} is tags
    0x0a, 0x12, 0x1a (fields 1, 2, 3, length-delimited)."""
    claim = dra_v1_pb2.Claim(namespace="a", uid="b", name="c")
    assert claim.SerializeToString() == b"\x0a\x01a\x12\x01b\x1a\x01c"
    # The two versions' messages are the same on the wire.
    assert dra_v1beta1_pb2.Claim.FromString(claim.SerializeToString()).uid == "b"
