"""nvidia_gpu's health (``HealthReader``): the GPU's PCIe AER counters, link and bus
(exosuit/drivers/health.py), and what NVML says (``Nvml.health``): a GPU NVML calls lost
(fallen off the bus), an XID of ``[health] xid_unhealthy`` (``xid_warning``) within the
window, uncorrected ECC errors since the driver loaded (``ecc_uncorrected_unhealthy``),
corrected ones within the window (``ecc_corrected_warning``), retired pages
(``retired_pages_unhealthy``) and pages pending retirement, a row remapping failure and
rows pending remapping (a GPU reset applies those two pendings: warning).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from exosuit.drivers.base import HEALTH_UNHEALTHY, HEALTH_WARNING, Device, Health
from exosuit.drivers.health import CounterWindow, HealthSettings, PciHealth
from exosuit.drivers.nvml import Nvml, NvmlHealth, NvmlUnavailable

__all__ = ["GpuHealth", "nvml_findings"]

# The driver's one logger, whichever of its modules logs.
LOG = logging.getLogger("exosuit.drivers.nvidia_gpu")


class GpuHealth:
    """Implements [exosuit.drivers.base.HealthReader] for nvidia_gpu. Mixed into
    ``NvidiaGpuDriver``, which sets these attributes; the memory of XIDs and corrected
    ECC counts is per driver (``_xids_seen``, ``_ecc_corrected``)."""

    health_settings: HealthSettings
    pci_health: PciHealth
    _xids_seen: dict[str, dict[int, float]]
    _ecc_corrected: dict[str, CounterWindow]

    if TYPE_CHECKING:  # discovery's (exosuit/drivers/nvidia/discovery.py)

        def _nvml_source(self) -> Nvml | None: ...

    def health(self, device: Device) -> Health:
        """Implements [exosuit.drivers.base.HealthReader]: the GPU's AER counters, link
        and bus, and what NVML says of it (the module's docstring)."""
        address = device.pci_address or ""
        findings = [self.pci_health.check(address)]
        nvml = self._nvml_source()
        if nvml is not None and address:
            try:
                found = nvml.health(address)
            except NvmlUnavailable as error:
                LOG.info("nvidia_gpu: NVML unavailable for health: %s", error)
                found = None
            if found is not None:
                findings.append(self._nvml_health(address, found))
        return Health.worst(*findings)

    def _nvml_health(self, address: str, found: NvmlHealth) -> Health:
        now = time.monotonic()
        seen = self._xids_seen.setdefault(address, {})
        for xid in found.xids:
            seen[xid] = now
        window = self.health_settings.window
        for xid in [x for x, at in seen.items() if at <= now - window]:
            del seen[xid]
        corrected = None
        if found.ecc_corrected is not None:
            counter = self._ecc_corrected.setdefault(address, CounterWindow(window))
            corrected = counter.add(found.ecc_corrected)
        return nvml_findings(self.health_settings, found, sorted(seen), corrected)


def nvml_findings(
    settings: HealthSettings,
    found: NvmlHealth,
    xids: list[int],
    corrected_growth: int | None,
) -> Health:
    """What NVML's answers make a GPU under ``settings``: ``xids``, those seen within the
    window; ``corrected_growth``, corrected ECC errors within the window."""
    if found.lost:
        return Health(HEALTH_UNHEALTHY, ("NVML: the GPU is lost (fallen off the bus)",))
    findings = []
    window = f"{settings.window:g} s"
    bad = [x for x in xids if x in settings.xid_unhealthy]
    if bad:
        listed = ", ".join(str(x) for x in bad)
        findings.append(Health(HEALTH_UNHEALTHY, (f"NVIDIA XID {listed} within {window}",)))
    odd = [x for x in xids if x in settings.xid_warning and x not in settings.xid_unhealthy]
    if odd:
        listed = ", ".join(str(x) for x in odd)
        findings.append(Health(HEALTH_WARNING, (f"NVIDIA XID {listed} within {window}",)))
    threshold = settings.ecc_uncorrected_unhealthy
    if threshold and (found.ecc_uncorrected or 0) >= threshold:
        reason = "NVML: uncorrected ECC errors since the driver loaded"
        findings.append(Health(HEALTH_UNHEALTHY, (reason,)))
    threshold = settings.ecc_corrected_warning
    if threshold and (corrected_growth or 0) >= threshold:
        reason = f"NVML: {threshold} or more corrected ECC errors within {window}"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    threshold = settings.retired_pages_unhealthy
    if threshold and (found.retired_pages or 0) >= threshold:
        reason = f"NVML: {threshold} or more memory pages retired"
        findings.append(Health(HEALTH_UNHEALTHY, (reason,)))
    if found.retired_pages_pending:
        reason = "NVML: memory pages are pending retirement (a GPU reset retires them)"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    if found.remapped_rows_failure:
        findings.append(Health(HEALTH_UNHEALTHY, ("NVML: a memory row remapping failed",)))
    if found.remapped_rows_pending:
        reason = "NVML: memory rows are pending remapping (a GPU reset remaps them)"
        findings.append(Health(HEALTH_WARNING, (reason,)))
    return Health.worst(*findings)
