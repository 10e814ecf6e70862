"""Fill a Cyborg database through Cyborg's own object layer (run with .venv-cyborg's python).

    python fill_cyborg.py CYBORG_CONF [SCENARIO]

CYBORG_CONF's ``[database] connection`` names a database made by ``cyborg-dbsync
upgrade``. What is written is what a running Cyborg writes, by the code that writes it:

* each host's devices as its conductor stores an agent's report: ``DriverDevice.create``
  (device, control-path id, deployables, attributes, attach handles) of Cyborg's own
  fake driver (``FakeDriver.discover()``, with ``[DEFAULT] host`` set to the host), of
  Cyborg's own Intel QAT driver (its ``_generate_driver_device`` on what its sysfs walk
  finds: a PF with two VFs, one deployable per VF), and of devices described with
  Cyborg's driver objects: an SR-IOV NIC as its ``intel_nic_driver`` reports one (a PF,
  one deployable per VF, ``physical_network`` in the attach info), and two devices of
  out-of-tree drivers: one whose control-path id is a bare PCI address string, one
  keyed by a serial number (no PCI address at all);
* each deployable's ``rp_uuid`` as the conductor sets it after creating its resource
  provider: ``uuid3(NAMESPACE_DNS, name)``, saved through ``Deployable.save``; the
  ``bitstream_id`` of a programmed FPGA as ``FPGAExtARQ`` records it
  (``Deployable.update``);
* device profiles through ``DeviceProfile.create``;
* ARQs through ``ExtARQ.create`` (as the conductor's ``arq_create``), then bound as the
  conductor's ``apply_patch`` binds them (``update_check_state`` to BindStarted, then
  ``ExtARQ.bind``, which takes an attach handle), failed, unbound (``ExtARQ.unbind``),
  caught mid-bind (BindStarted, before or after ``bind`` saved the attach handle it
  took) and ``Deleting`` (``update_check_state``, which allows it from Bound).

SCENARIO ``cut-over`` (the default) is a cloud with all of the above;
``unmappable-held`` is a host whose only device is the serial-keyed one, with a server
holding it (a Bound ARQ).

Prints one JSON document on standard output: the UUIDs written, for the tests to
compare with what Exosuit imported.
"""

from __future__ import annotations

import json
import sys
import uuid

PROJECT = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
HOSTS = ("compute-a", "compute-b")
NIC_PF = "0000:3b:00.0"
NIC_VFS = ("0000:3b:02.0", "0000:3b:02.1")
PHYSNET = "physnet1"
QAT_PF = "0000:5e:00.0"
QAT_VFS = ("0000:5e:01.0", "0000:5e:01.1")
LEGACY = "0000:af:00.0"
SERIAL = "SN-4F2A19"
# The image an earlier bind loaded on compute-a's fake FPGA (FPGAExtARQ records its id).
BITSTREAM = "a2b9b5d0-86a8-4a8e-9c0e-6f0b0c6f1f43"


def _slot(address: str) -> dict[str, str]:
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return {"domain": domain, "bus": bus, "device": device, "function": function}


def main(conf_file: str, scenario: str = "cut-over") -> int:
    from cyborg.common import constants
    from cyborg.conf import CONF

    CONF([], project="cyborg", default_config_files=[conf_file])

    from cyborg import context as cyborg_context
    from cyborg import objects
    from cyborg.common import rpc

    # ExtARQ builds an agent RPC client (used only for mdevs): CYBORG_CONF sets
    # ``transport_url = fake:/``, oslo.messaging's in-memory transport.
    rpc.init(CONF)

    objects.register_all()
    from cyborg.accelerator.drivers.fake import FakeDriver
    from cyborg.accelerator.drivers.qat.intel import sysinfo as qat_sysinfo
    from cyborg.objects.driver_objects import (
        driver_attach_handle,
        driver_attribute,
        driver_controlpath_id,
        driver_deployable,
        driver_device,
    )

    ctx = cyborg_context.get_admin_context()
    ctx.project_id = PROJECT

    def attributes(*pairs: tuple[str, str]):
        found = []
        for key, value in pairs:
            attribute = driver_attribute.DriverAttribute()
            attribute.key, attribute.value = key, value
            found.append(attribute)
        return found

    def nic(host: str):
        device = driver_device.DriverDevice()
        device.vendor = "0x8086"
        device.model = "0x158b"
        device.type = constants.DEVICE_NIC
        device.std_board_info = json.dumps({"device_id": "0x158b", "class": "Ethernet"})
        device.vendor_board_info = json.dumps({"firmware": "8.30"})
        device.stub = False
        cpid = driver_controlpath_id.DriverControlPathID()
        cpid.cpid_type = "PCI"
        cpid.cpid_info = json.dumps(_slot(NIC_PF))
        device.controlpath_id = cpid
        deployables = []
        for vf in NIC_VFS:
            dep = driver_deployable.DriverDeployable()
            dep.name = f"{host}_{vf}"
            dep.num_accelerators = 1
            dep.driver_name = "intel"
            dep.attribute_list = attributes(
                ("rc", "CUSTOM_NIC"), ("trait0", "CUSTOM_VF"), ("trait1", "CUSTOM_PHYSNET1")
            )
            handle = driver_attach_handle.DriverAttachHandle()
            handle.attach_type = constants.AH_TYPE_PCI
            handle.in_use = False
            handle.attach_info = json.dumps({**_slot(vf), "physical_network": PHYSNET})
            dep.attach_handle_list = [handle]
            deployables.append(dep)
        device.deployable_list = deployables
        return device

    def qat(host: str):
        """What Cyborg's intel QAT driver reports for a PF with SR-IOV on: its qat_tree()
        dict (as qat_gen reads it from sysfs) through its own _generate_driver_device."""

        def function(address: str, product: str) -> dict:
            return {
                "name": f"{host}_{address}",
                "device": address,
                "type": constants.DEVICE_QAT,
                "vendor": "0x8086",
                "product_id": product,
                "rc": qat_sysinfo.RESOURCES["qat"],
                "stub": False,
            }

        pf = function(QAT_PF, "0x37c8")
        pf["vfs"] = [function(vf, "0x37c9") for vf in QAT_VFS]
        return qat_sysinfo._generate_driver_device(pf)

    def out_of_tree(host: str, cpid_info: str, address: str, device_type: str, vendor: str):
        """A device an out-of-tree driver stored: its control-path id is ``cpid_info``,
        not the JSON object Cyborg's in-tree drivers write."""
        device = driver_device.DriverDevice()
        device.vendor, device.model, device.type = vendor, "0x0001", device_type
        device.stub = False
        cpid = driver_controlpath_id.DriverControlPathID()
        cpid.cpid_type = "PCI"
        cpid.cpid_info = cpid_info
        device.controlpath_id = cpid
        dep = driver_deployable.DriverDeployable()
        dep.name, dep.num_accelerators, dep.driver_name = f"{host}_{address}", 1, "vendor_x"
        dep.attribute_list = attributes(("rc", f"CUSTOM_{device_type}"))
        handle = driver_attach_handle.DriverAttachHandle()
        handle.attach_type, handle.in_use = constants.AH_TYPE_PCI, False
        handle.attach_info = json.dumps(_slot(address))
        dep.attach_handle_list = [handle]
        device.deployable_list = [dep]
        return device

    def legacy(host: str):
        return out_of_tree(host, LEGACY, LEGACY, constants.DEVICE_QAT, "0x8086")

    def serial_keyed(host: str):
        return out_of_tree(host, SERIAL, "0000:d8:00.0", constants.DEVICE_AICHIP, "0x19e5")

    # -- devices, as each host's report is stored, and their resource providers -----------
    if scenario == "cut-over":
        reports = {
            HOSTS[0]: lambda host: [*FakeDriver().discover(), nic(host)],
            HOSTS[1]: lambda host: [
                *FakeDriver().discover(),
                qat(host),
                legacy(host),
                serial_keyed(host),
            ],
        }
    elif scenario == "unmappable-held":
        reports = {"compute-c": lambda host: [serial_keyed(host)]}
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    for host, report in reports.items():
        CONF.set_override("host", host)
        for device in report(host):
            device.create(ctx, host)
    CONF.clear_override("host")
    for dep in objects.Deployable.list(ctx):
        dep.rp_uuid = str(uuid.uuid3(uuid.NAMESPACE_DNS, dep.name))
        dep.save(ctx)
    deployables = {d.name: d for d in objects.Deployable.list(ctx)}

    # -- device profiles -------------------------------------------------------------------
    profiles = {}
    for name, groups, description in (
        (
            "fpga-dp",
            [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
            "One fake FPGA",
        ),
        ("nic-dp", [{"resources:CUSTOM_NIC": "1", "trait:CUSTOM_PHYSNET1": "required"}], None),
        ("two-groups", [{"resources:FPGA": "1"}, {"resources:FPGA": "1"}], "Two groups"),
        ("qat-dp", [{"resources:CUSTOM_QAT": "1"}], None),
        ("npu-dp", [{"resources:CUSTOM_AICHIP": "1"}], None),
    ):
        profile = objects.DeviceProfile(ctx, name=name, groups=groups)
        if description:
            profile.description = description
        profile.create(ctx)
        profiles[name] = profile

    # -- ARQs ------------------------------------------------------------------------------
    def create(profile: str, group: int = 0):
        arq = objects.ARQ(
            ctx,
            device_profile_name=profile,
            device_profile_group_id=group,
            project_id=PROJECT,
        )
        extarq = objects.ExtARQ(ctx, arq=arq)
        extarq.create(ctx, profiles[profile].id)
        return extarq

    def start_bind(extarq, host: str, deployable_name: str, instance: str):
        dep = deployables[deployable_name]
        extarq.arq.hostname = host
        extarq.arq.device_rp_uuid = dep.rp_uuid
        extarq.arq.instance_uuid = instance
        extarq.update_check_state(ctx, constants.ARQ_BIND_STARTED)
        return dep

    instances: dict[str, str] = {}
    arqs: dict[str, str] = {}

    def bound(key: str, profile: str, host: str, deployable_name: str, group: int = 0):
        instance = instances.setdefault(key.split("-")[0], str(uuid.uuid4()))
        extarq = create(profile, group)
        extarq.bind(ctx, start_bind(extarq, host, deployable_name, instance))
        arqs[key] = extarq.arq.uuid
        return extarq

    if scenario == "cut-over":
        fake_a = f"{HOSTS[0]}_FakeDevice"
        fake_b = f"{HOSTS[1]}_FakeDevice"
        # compute-a's fake FPGA was programmed by an earlier bind (FPGAExtARQ._do_programming
        # records the image so).
        deployables[fake_a].update(ctx, {"bitstream_id": BITSTREAM})
        # Bound: a server with one FPGA on compute-a.
        bound("bound", "fpga-dp", HOSTS[0], fake_a)
        # Bound: a server with two FPGAs (both groups) on compute-b.
        for group in (0, 1):
            bound(f"two-{group}", "two-groups", HOSTS[1], fake_b, group)
        # Bound: a SmartNIC port's ARQ on compute-a.
        bound("nic", "nic-dp", HOSTS[0], f"{HOSTS[0]}_{NIC_VFS[0]}")
        # Bound: a QAT VF on compute-b.
        bound("qat", "qat-dp", HOSTS[1], f"{HOSTS[1]}_{QAT_VFS[0]}")
        # Initial: created, never bound.
        arqs["initial"] = create("fpga-dp").arq.uuid
        # BindFailed: a bind that could not be satisfied.
        failed = create("fpga-dp")
        start_bind(failed, HOSTS[0], fake_a, str(uuid.uuid4()))
        failed.update_check_state(ctx, constants.ARQ_BIND_FAILED)
        arqs["bind_failed"] = failed.arq.uuid
        # Unbound: bound, then unbound (its handle released).
        unbound = bound("unbound", "fpga-dp", HOSTS[0], fake_a)
        unbound.unbind(ctx)
        # BindStarted, holding a handle: Cyborg stopped inside ExtARQ.bind, after it took
        # the handle and saved it, before it set Bound (bind's own steps, up to there).
        instances["started"] = str(uuid.uuid4())
        started = create("fpga-dp")
        dep = start_bind(started, HOSTS[0], fake_a, instances["started"])
        started._allocate_attach_handle(ctx, dep)
        started.deployable_id = dep.id
        started.save(ctx)
        arqs["bind_started"] = started.arq.uuid
        # BindStarted without a handle: Cyborg's API accepted the bind, its conductor
        # never started it.
        instances["early"] = str(uuid.uuid4())
        early = create("nic-dp")
        start_bind(early, HOSTS[0], f"{HOSTS[0]}_{NIC_VFS[1]}", instances["early"])
        arqs["bind_started_early"] = early.arq.uuid
        # Deleting: a Bound ARQ moved to Deleting (allowed from Bound by Cyborg's state
        # matrix), still holding its handle.
        deleting = bound("deleting", "fpga-dp", HOSTS[0], fake_a)
        deleting.update_check_state(ctx, constants.ARQ_DELETING)
    else:
        bound("held", "npu-dp", "compute-c", "compute-c_0000:d8:00.0")

    # -- what was written, read back through the objects -------------------------------------
    devices = objects.Device.list(ctx)
    device_uuids = {d.id: d.uuid for d in devices}
    deployable_list = objects.Deployable.list(ctx)
    handles = objects.AttachHandle.list(ctx)
    handle_uuids = {h.id: h.uuid for h in handles}
    extarqs = objects.ExtARQ.list(ctx)
    out = {
        "project_id": PROJECT,
        "bitstream_id": BITSTREAM,
        "instances": instances,
        "arqs": arqs,
        "arq_states": {a.arq.uuid: a.arq.state for a in extarqs},
        "arq_instances": {a.arq.uuid: a.arq.instance_uuid for a in extarqs},
        # Whatever the state: the handle each ARQ's row holds.
        "arq_handles": {
            a.arq.uuid: handle_uuids[a.attach_handle_id] for a in extarqs if a.attach_handle_id
        },
        "devices": {
            d.uuid: {"hostname": d.hostname, "type": d.type, "vendor": d.vendor} for d in devices
        },
        "controlpath_ids": {
            c.uuid: {"device": device_uuids[c.device_id], "cpid_info": c.cpid_info}
            for c in objects.ControlpathID.list(ctx)
        },
        "deployables": {
            d.uuid: {
                "name": d.name,
                "rp_uuid": d.rp_uuid,
                "driver_name": d.driver_name,
                "bitstream_id": d.bitstream_id,
                "device": device_uuids[d.device_id],
            }
            for d in deployable_list
        },
        "attributes": {
            a.uuid: {"deployable": d.uuid, "key": a.key, "value": a.value}
            for d in deployable_list
            for a in objects.Attribute.get_by_deployable_id(ctx, d.id)
        },
        "attach_handles": {
            h.uuid: {
                "in_use": h.in_use,
                "attach_info": h.attach_info,
                "deployable": next(d.uuid for d in deployable_list if d.id == h.deployable_id),
            }
            for h in handles
        },
        "device_profiles": {p.name: p.uuid for p in objects.DeviceProfile.list(ctx)},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
