"""Microversions: ``OpenStack-API-Version: accelerator X.Y``.

Versions are data. Each entry of ``VERSIONS`` is one microversion, and
doc/api-version-history.md has one section per entry; a test pins the latest.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import microversion_parse

__all__ = ["MAX_VERSION", "MIN_VERSION", "SERVICE_TYPE", "VERSIONS", "Version", "parse"]

SERVICE_TYPE = "accelerator"

VERSIONS = [
    "2.0",  # Ussuri: the v2 API.
    "2.1",  # Victoria: ARQ PATCH accepts /project_id (admin only).
    "2.2",  # Yoga: GET /v2/device_profiles/{name} (lookup by name).
    "2.3",  # 2023.2: device `status` (enabled/maintaining) on device list/show.
    "2.4",  # Exosuit: limit/marker/sort_key/sort_dir and `next` on every list; ARQ list
    #         filters state/hostname/device_profile_name/instance; device `presence`.
    "2.5",  # Exosuit: fleet views: /v2/hosts, /v2/attach_handles, /v2/jobs (+ retry), /v2/summary.
    "2.6",  # Exosuit: programming: /v2/images (catalogue); PATCH …/program answers 202 and
    #         GET /v2/deployables/{uuid}/program shows the program's state.
    "2.7",  # Exosuit: devices' activation, services and usage; /v2/device_activations,
    #         /v2/services, /v2/drivers (+ install/update/uninstall), /v2/discoveries.
    "2.8",  # Exosuit: standalone claims: /v2/claims (+ renew); ARQs show claim_uuid.
    "2.9",  # Exosuit: running a fleet: device health, drain, partitions, audit.
    "2.10",  # Exosuit: strict queries (an unknown parameter is a 400); topology
    #          (pcie_root, iommu_group), labels, topology constraints, dry-run claims.
    "2.11",  # Exosuit: the console's reads: the caller's permissions, devices' usage
    #          history and the fleet's allocation history.
]

Version = microversion_parse.Version


def _version(value: str) -> Version:
    """A Version whose ``matches((2, 4))`` compares against the supported maximum."""
    version = microversion_parse.parse_version_string(value)
    version.min_version = (int(VERSIONS[0].split(".")[0]), int(VERSIONS[0].split(".")[1]))
    version.max_version = (int(VERSIONS[-1].split(".")[0]), int(VERSIONS[-1].split(".")[1]))
    return version


MIN_VERSION = _version(VERSIONS[0])
MAX_VERSION = _version(VERSIONS[-1])

HEADER = "OpenStack-API-Version"
MIN_HEADER = "OpenStack-API-Minimum-Version"
MAX_HEADER = "OpenStack-API-Maximum-Version"


class VersionNotAcceptable(Exception):
    """The requested version is malformed or outside [MIN_VERSION, MAX_VERSION]."""


def parse(headers: MutableMapping[str, str]) -> Version:
    """The version a request asks for; absent means the minimum (as Nova expects).

    Accepts ``accelerator X.Y``, ``accelerator latest`` and, as Cyborg still does,
    a bare ``X.Y``.
    """
    raw = headers.get(HEADER)
    if raw is None:
        return MIN_VERSION
    try:
        value = microversion_parse.get_version(headers, service_type=SERVICE_TYPE)
    except ValueError as error:
        raise VersionNotAcceptable(str(error)) from None
    if value is None:
        # Not "accelerator X.Y": Cyborg still takes a bare "X.Y" (deprecated).
        value = raw.strip()
        if " " in value:
            # A version for another service only: the default applies.
            return MIN_VERSION
    if value == "latest":
        return MAX_VERSION
    try:
        version = _version(value)
    except (TypeError, ValueError):
        raise VersionNotAcceptable(
            f"Invalid microversion {value!r}: expected 'accelerator X.Y' or 'latest'. "
            f"The supported version range is: [{MIN_VERSION}, {MAX_VERSION}]."
        ) from None
    if version.major != MIN_VERSION.major:
        # NOTE: Cyborg (and microversion-parse's own words) said "Mutually exclusive
        # versions requested" here, which names nothing the caller did.
        raise VersionNotAcceptable(
            f"Version {version} was requested but this service has no major version "
            f"{version.major}, only {MIN_VERSION.major}. The supported version range is: "
            f"[{MIN_VERSION}, {MAX_VERSION}]."
        )
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise VersionNotAcceptable(
            f"Version {version} was requested but the minor version is not supported by "
            f"this service. The supported version range is: [{MIN_VERSION}, {MAX_VERSION}]."
        )
    return version


def response_headers(version: Version | None) -> list[tuple[str, str]]:
    headers = [
        (MIN_HEADER, str(MIN_VERSION)),
        (MAX_HEADER, str(MAX_VERSION)),
        ("Vary", HEADER),
    ]
    if version is not None:
        headers.append((HEADER, f"{SERVICE_TYPE} {version}"))
    return headers
