"""``exosuit service list``: the services devices offer now or could offer once
configured (``/v2/services``, API 2.7, doc/devices.md)."""

from __future__ import annotations

from exosuit.cli.base import Filter, ListCommand

__all__ = ["ServiceList"]


class ServiceList(ListCommand):
    """List the services devices offer now or could offer (API 2.7).

    QAT services, vGPU types, MIG profiles, FPGA functions, SR-IOV VFs, NVMe namespaces;
    enabled: offered now."""

    needs = "2.7"
    path = "/v2/services"
    key = "services"
    nothing = "No services."
    columns = ("hostname", "device_uuid", "device_type", "kind", "name", "enabled", "details")
    long_columns = ("id", "driver_name", "activation")
    sort_keys = ("id", "kind", "name")
    filters = (
        Filter("--host", "hostname", "Only the services of this host's devices.", "HOSTNAME"),
        Filter("--type", "type", "Only the services of devices of this type (GPU, …).", "TYPE"),
        Filter("--kind", "kind", "Only this kind (qat, vgpu, mig, fpga_function, …).", "KIND"),
        Filter("--name", "name", "Only services of this name (sym, nvidia-222, …).", "NAME"),
        Filter("--enabled", "enabled", "true: offered now; false: could be.", "true|false"),
    )
