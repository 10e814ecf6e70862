"""SQLAlchemy models: the schema. Queries use the tables through SQLAlchemy Core.

The hierarchy is Cyborg's: device → control-path id, deployables → attributes and
attach handles; device profiles; accelerator requests (ARQs). Exosuit adds hosts
and jobs. Deleting a device cascades to its rows, except that an attach handle
held by an ARQ cannot be deleted (the foreign key from the ARQ restricts it): the
database itself refuses to lose track of who holds what.
"""

from __future__ import annotations

import datetime as dt
from typing import cast

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Microsecond precision on MySQL/MariaDB too: lists sort by created_at.
Timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# Long text on MySQL/MariaDB (TEXT is 64 KiB).
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class TimestampMixin:
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow, nullable=False)
    updated_at: Mapped[dt.datetime | None] = mapped_column(Timestamp, onupdate=utcnow)


class Host(TimestampMixin, Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(sa.String(255), unique=True)
    snapshot_hash: Mapped[str | None] = mapped_column(sa.String(80))
    last_report_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    agent_version: Mapped[str | None] = mapped_column(sa.String(64))
    driver_errors: Mapped[str | None] = mapped_column(sa.Text)
    # Bumped whenever the host's desired state changes (a program to run, …): the
    # agent polls it cheaply and fetches the desired state only when it moved.
    desired_generation: Mapped[int] = mapped_column(sa.Integer, default=0, server_default="0")
    # The desired-state generation the agent last said it applied (its driver overrides,
    # and the discovery asked for, if any: doc/devices.md), and when that moved.
    observed_generation: Mapped[int | None] = mapped_column(sa.Integer)
    observed_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # The drivers' live figures of the host's last report (JSON: device identity →
    # figure → number), written at most once per [api] report_age_resolution.
    usage: Mapped[str | None] = mapped_column(LongText)
    usage_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # When an operator drained the host (doc/devices.md, Drain): its devices take no new
    # workload, those it reports later included; None: not drained.
    drained_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Device(TimestampMixin, Base):
    __tablename__ = "devices"
    __table_args__ = (sa.UniqueConstraint("hostname", "identity", name="uq_devices_host_identity"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    type: Mapped[str] = mapped_column(sa.String(32))
    vendor: Mapped[str] = mapped_column(sa.String(255))
    model: Mapped[str] = mapped_column(sa.String(255))
    std_board_info: Mapped[str | None] = mapped_column(sa.Text)
    vendor_board_info: Mapped[str | None] = mapped_column(sa.Text)
    hostname: Mapped[str] = mapped_column(sa.String(255), index=True)
    # The control-path id as one canonical string (the PCI address): identity within a host.
    identity: Mapped[str] = mapped_column(sa.String(255))
    status: Mapped[str] = mapped_column(sa.String(16), default="enabled")
    # Why Exosuit disabled it (a program failed and could not restore the previous
    # image); cleared when an operator enables it again.
    status_reason: Mapped[str | None] = mapped_column(sa.Text)
    # present | lost (gone from the host while an attach handle is held)
    presence: Mapped[str] = mapped_column(sa.String(16), default="present")
    presence_reason: Mapped[str | None] = mapped_column(sa.Text)
    driver_name: Mapped[str | None] = mapped_column(sa.String(100))
    # The agent's driver plug-in that reports it (driver_name is Cyborg's field, which a
    # plug-in may fill as it likes): what [inventory] ready_drivers and a driver's
    # uninstall go by. None for agents that did not say.
    plugin: Mapped[str | None] = mapped_column(sa.String(100))
    pci_address: Mapped[str | None] = mapped_column(sa.String(32))
    numa_node: Mapped[int | None] = mapped_column(sa.Integer)
    firmware_version: Mapped[str | None] = mapped_column(sa.String(255))
    # inactive | activating | ready | deactivating (doc/devices.md): only a ready device
    # is offered to Placement and bindable. Rows made before it existed were offered:
    # ready.
    activation: Mapped[str] = mapped_column(sa.String(16), default="ready", server_default="ready")
    # Why it is inactive (an install step that failed, its driver uninstalled …).
    activation_reason: Mapped[str | None] = mapped_column(sa.Text)
    # The host's desired-state generation when an operator last changed ``activation``:
    # an agent's outcome names it, so that a late one for an older change is refused.
    activation_generation: Mapped[int | None] = mapped_column(sa.Integer)
    # The partition layout an operator set (doc/devices.md, Partitions): canonical JSON of
    # {"mdev": {type: n}} | {"mig": {profile: n}} | {"vfs": n}, maybe with "on_demand";
    # None: never set (the device is left as it is). exosuit/db/partitions.py.
    partition_layout: Mapped[str | None] = mapped_column(sa.Text)
    # applying (its agent has not applied it yet) | applied | failed (with the reason).
    partition_state: Mapped[str | None] = mapped_column(sa.String(16))
    partition_reason: Mapped[str | None] = mapped_column(sa.Text)
    # The host's desired-state generation when the layout was set: the agent's outcome
    # names it, so that a late one for an older layout is refused.
    partition_generation: Mapped[int | None] = mapped_column(sa.Integer)
    # The layout makes its slices on demand: made for a bind, removed at its release.
    partition_on_demand: Mapped[bool] = mapped_column(
        sa.Boolean, nullable=False, default=False, server_default="0"
    )
    # Health (doc/devices.md, "Health"): ok | warning | unhealthy as its agent last
    # reported it (a device without health in the report is ok), why, and since when
    # (None: ok since it was first seen).
    health_state: Mapped[str] = mapped_column(sa.String(16), default="ok", server_default="ok")
    health_reason: Mapped[str | None] = mapped_column(sa.Text)
    health_since: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # Held back from every offer: None (offered) | agent (it was reported unhealthy: until
    # it has been healthy for [health] recover_after, or an operator clears it) |
    # operator (marked unhealthy by an operator: until one clears it).
    health_held: Mapped[str | None] = mapped_column(sa.String(16))
    # Where it sits, as its driver reported it beside numa_node: the PCI address of the
    # PCI Express root port above it, and its IOMMU group (None: the host has none).
    pcie_root: Mapped[str | None] = mapped_column(sa.String(32))
    iommu_group: Mapped[int | None] = mapped_column(sa.Integer)
    # An operator's labels: canonical JSON of {key: value} (None: none), selectable in
    # device profiles as accel:label:<key>=<value> (doc/devices.md, "Labels").
    labels: Mapped[str | None] = mapped_column(sa.Text)


class DeviceService(Base):
    """A service a device offers now (``enabled``) or could offer once configured, as its
    driver reported it (doc/devices.md, Services); replaced with each changed report."""

    __tablename__ = "device_services"
    id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(
        sa.ForeignKey("devices.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(sa.String(32), index=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    enabled: Mapped[bool] = mapped_column(sa.Boolean)
    # Canonical JSON of a string → string map.
    details: Mapped[str] = mapped_column(sa.Text, default="{}")


class HostDriver(TimestampMixin, Base):
    """A driver plug-in of a host's agent: what the operator asked (``desired_*``) and
    what the agent reported. The row of hostname ``""`` (``FLEET`` in exosuit/db/drivers.py)
    holds what was asked for every host, those that report later included."""

    __tablename__ = "host_drivers"
    __table_args__ = (sa.UniqueConstraint("hostname", "name", name="uq_host_drivers_host_name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(sa.String(255))
    name: Mapped[str] = mapped_column(sa.String(100))
    # None: as the agent's configuration file says.
    desired_enabled: Mapped[bool | None] = mapped_column(sa.Boolean)
    # Canonical JSON of option → string, overriding the agent's file; None: nothing asked.
    desired_config: Mapped[str | None] = mapped_column(sa.Text)
    # The host's desired-state generation that carries what was asked (None: nothing).
    desired_generation: Mapped[int | None] = mapped_column(sa.Integer)
    version: Mapped[str | None] = mapped_column(sa.String(64))
    enabled: Mapped[bool | None] = mapped_column(sa.Boolean)
    config_digest: Mapped[str | None] = mapped_column(sa.String(80))
    found: Mapped[int | None] = mapped_column(sa.Integer)
    error: Mapped[str | None] = mapped_column(sa.Text)
    reported_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Discovery(Base):
    """An operator's "discover now" (POST /v2/discoveries)."""

    __tablename__ = "discoveries"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    requested_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow)
    # Seconds within which each agent picks its random delay.
    spread: Mapped[float] = mapped_column(sa.Float, default=0.0)
    # Asked of every host (no list given).
    all_hosts: Mapped[bool] = mapped_column(sa.Boolean, default=False)


class DiscoveryHost(Base):
    """A host a discovery asked: the desired-state generation that carries the request,
    and when a report at or past it arrived."""

    __tablename__ = "discovery_hosts"
    __table_args__ = (
        sa.UniqueConstraint("discovery_id", "hostname", name="uq_discovery_hosts_host"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    discovery_id: Mapped[int] = mapped_column(
        sa.ForeignKey("discoveries.id", ondelete="CASCADE"), index=True
    )
    hostname: Mapped[str] = mapped_column(sa.String(255), index=True)
    generation: Mapped[int] = mapped_column(sa.Integer)
    received_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class ControlPathID(TimestampMixin, Base):
    __tablename__ = "controlpath_ids"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    device_id: Mapped[int] = mapped_column(
        sa.ForeignKey("devices.id", ondelete="CASCADE"), index=True
    )
    cpid_type: Mapped[str] = mapped_column(sa.String(16))
    cpid_info: Mapped[str] = mapped_column(sa.String(255))


class Deployable(TimestampMixin, Base):
    __tablename__ = "deployables"
    __table_args__ = (sa.UniqueConstraint("device_id", "name", name="uq_deployables_device_name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    parent_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="SET NULL"), index=True
    )
    root_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="SET NULL"), index=True
    )
    name: Mapped[str] = mapped_column(sa.String(255))
    num_accelerators: Mapped[int] = mapped_column(sa.Integer)
    device_id: Mapped[int] = mapped_column(
        sa.ForeignKey("devices.id", ondelete="CASCADE"), index=True
    )
    rp_uuid: Mapped[str | None] = mapped_column(sa.String(36), index=True)
    driver_name: Mapped[str | None] = mapped_column(sa.String(100))
    bitstream_id: Mapped[str | None] = mapped_column(sa.String(36))
    # The program running on it (programs.uuid), set and cleared by compare-and-set:
    # at most one at a time, and no bind takes a handle while it is set.
    program_uuid: Mapped[str | None] = mapped_column(sa.String(36))


class Attribute(TimestampMixin, Base):
    __tablename__ = "attributes"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    deployable_id: Mapped[int] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="CASCADE"), index=True
    )
    key: Mapped[str] = mapped_column(sa.String(255))
    value: Mapped[str] = mapped_column(sa.Text)
    # agent: reported by the host's agent (replaced by each snapshot); api: created by
    # an operator through POST /v2/attributes (kept across snapshots).
    source: Mapped[str] = mapped_column(sa.String(16), default="agent")


class AttachHandle(TimestampMixin, Base):
    __tablename__ = "attach_handles"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    deployable_id: Mapped[int] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="CASCADE"), index=True
    )
    cpid_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("controlpath_ids.id", ondelete="CASCADE"), index=True
    )
    in_use: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    attach_type: Mapped[str] = mapped_column(sa.String(16))
    attach_info: Mapped[str] = mapped_column(sa.Text)
    # present | lost (gone from the host's report while held: never bound again,
    # deleted when released)
    presence: Mapped[str] = mapped_column(
        sa.String(16), default="present", server_default="present"
    )


class DeviceProfile(TimestampMixin, Base):
    __tablename__ = "device_profiles"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    name: Mapped[str] = mapped_column(sa.String(255), unique=True)
    profile_json: Mapped[str] = mapped_column(LongText)
    description: Mapped[str | None] = mapped_column(sa.Text)


class AcceleratorRequest(TimestampMixin, Base):
    __tablename__ = "accelerator_requests"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    project_id: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    state: Mapped[str] = mapped_column(sa.String(16), index=True)
    # None for an ARQ of a claim that named its attach handles (no profile: 2.8).
    device_profile_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("device_profiles.id", ondelete="RESTRICT"), index=True
    )
    device_profile_group_id: Mapped[int] = mapped_column(sa.Integer, default=0)
    hostname: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    device_rp_uuid: Mapped[str | None] = mapped_column(sa.String(36), index=True)
    instance_uuid: Mapped[str | None] = mapped_column(sa.String(36), index=True)
    # UNIQUE: no two ARQs ever hold one attach handle, whatever the concurrency.
    # No ON DELETE: a held handle cannot be deleted.
    attach_handle_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("attach_handles.id"), unique=True
    )
    deployable_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="SET NULL"), index=True
    )
    # Why the last bind failed, for operators.
    reason: Mapped[str | None] = mapped_column(sa.Text)
    # The standalone claim that holds it (exosuit/db/claims.py), bound by Exosuit itself,
    # not Nova. No ON DELETE: a claim is purged only after its ARQs are gone.
    claim_id: Mapped[int | None] = mapped_column(sa.ForeignKey("claims.id"), index=True)


class Claim(TimestampMixin, Base):
    """A standalone claim (microversion 2.8, doc/standalone.md): devices bound by Exosuit
    itself for a caller that is not Nova (a container, a DRA plugin, a script). It holds
    them through ordinary ARQs (``accelerator_requests.claim_id``); its state is theirs
    (exosuit/db/claims.py)."""

    __tablename__ = "claims"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    project_id: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    user_id: Mapped[str | None] = mapped_column(sa.String(255))
    consumer: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    # sha256 of (project, consumer) while the claim is not released: one live claim per
    # consumer of a project, whatever the concurrency (NULLs never collide).
    consumer_key: Mapped[str | None] = mapped_column(sa.String(64), unique=True)
    hostname: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    # The device profile it was made from (None: it named its attach handles).
    device_profile_name: Mapped[str | None] = mapped_column(sa.String(255))
    container: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    # pending | written | failed: the agent's CDI spec files (container claims only).
    cdi_state: Mapped[str | None] = mapped_column(sa.String(16))
    cdi_reason: Mapped[str | None] = mapped_column(sa.Text)
    # Placement was configured when it was made: its release deletes the allocation.
    placement: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    expires_at: Mapped[dt.datetime | None] = mapped_column(Timestamp, index=True)
    released_at: Mapped[dt.datetime | None] = mapped_column(Timestamp, index=True)
    # Why it was released (by its owner, expired …).
    reason: Mapped[str | None] = mapped_column(sa.Text)


class Job(TimestampMixin, Base):
    __tablename__ = "jobs"
    __table_args__ = (sa.Index("ix_jobs_state_run_after", "state", "run_after"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(64))
    # Jobs with the same key are coalesced while pending (e.g. "placement-sync:<host>").
    key: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    payload: Mapped[str] = mapped_column(LongText, default="{}")
    # pending | running | succeeded | failed
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    run_after: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow)
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    worker: Mapped[str | None] = mapped_column(sa.String(255))
    last_error: Mapped[str | None] = mapped_column(sa.Text)


class PlacementHost(TimestampMixin, Base):
    """What the conductor knows of a host in Placement (exosuit/placement)."""

    __tablename__ = "placement_hosts"
    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(sa.String(255), unique=True)
    compute_rp_uuid: Mapped[str | None] = mapped_column(sa.String(36))
    # Consecutive syncs that could not finish (the retry delay doubles), and why.
    failures: Mapped[int] = mapped_column(sa.Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    synced_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    verified_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class PlacementProvider(TimestampMixin, Base):
    """A deployable's resource provider as Exosuit last wrote it to Placement."""

    __tablename__ = "placement_providers"
    id: Mapped[int] = mapped_column(primary_key=True)
    rp_uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    hostname: Mapped[str] = mapped_column(sa.String(255), index=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    parent_rp_uuid: Mapped[str] = mapped_column(sa.String(36))
    resource_class: Mapped[str | None] = mapped_column(sa.String(255))
    total: Mapped[int] = mapped_column(sa.Integer, default=0)
    reserved: Mapped[int] = mapped_column(sa.Integer, default=0)
    # JSON list of trait names, sorted.
    traits: Mapped[str] = mapped_column(sa.Text, default="[]")
    generation: Mapped[int | None] = mapped_column(sa.Integer)
    # The deployable is gone but the provider still has allocations: it is kept,
    # fully reserved, and deleted once they are gone.
    removing: Mapped[bool] = mapped_column(sa.Boolean, default=False)


class Image(TimestampMixin, Base):
    """A bitstream (or any image a driver can load) in Exosuit's own catalogue."""

    __tablename__ = "images"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    name: Mapped[str] = mapped_column(sa.String(255))
    owner: Mapped[str | None] = mapped_column(sa.String(255), index=True)  # project id
    visibility: Mapped[str] = mapped_column(sa.String(16), default="private")
    vendor: Mapped[str | None] = mapped_column(sa.String(255))
    board: Mapped[str | None] = mapped_column(sa.String(255))
    function_id: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    interface_id: Mapped[str | None] = mapped_column(sa.String(255))
    format: Mapped[str] = mapped_column(sa.String(32))
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    size: Mapped[int | None] = mapped_column(sa.BigInteger)
    sha256: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    # A detached signature of the data (base64), the id of the trusted key that made
    # it ([images] trusted_keys) and its algorithm.
    signature: Mapped[str | None] = mapped_column(sa.Text)
    signature_key_id: Mapped[str | None] = mapped_column(sa.String(255))
    signature_algorithm: Mapped[str | None] = mapped_column(sa.String(32))


class ImageMember(Base):
    """A project an image is shared with (visibility ``shared``)."""

    __tablename__ = "image_members"
    image_id: Mapped[int] = mapped_column(
        sa.ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow, nullable=False)


class Program(TimestampMixin, Base):
    """Loading an image onto a deployable: asked by an operator (whole device) or by a
    bind (``arq_uuid``), run by the host's agent (doc/programming.md)."""

    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(sa.String(36), unique=True)
    deployable_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("deployables.id", ondelete="SET NULL"), index=True
    )
    hostname: Mapped[str] = mapped_column(sa.String(255), index=True)
    image_uuid: Mapped[str] = mapped_column(sa.String(36))
    image_source: Mapped[str] = mapped_column(sa.String(16))  # exosuit | glance
    image_format: Mapped[str | None] = mapped_column(sa.String(32))
    image_sha256: Mapped[str | None] = mapped_column(sa.String(128))
    image_size: Mapped[int | None] = mapped_column(sa.BigInteger)
    function_id: Mapped[str | None] = mapped_column(sa.String(255))
    image_interface_id: Mapped[str | None] = mapped_column(sa.String(255))
    state: Mapped[str] = mapped_column(sa.String(16), index=True)
    reason: Mapped[str | None] = mapped_column(sa.Text)
    previous_image_uuid: Mapped[str | None] = mapped_column(sa.String(36))
    # After a failure: whether the previous image was loaded again (None: not known).
    restored: Mapped[bool | None] = mapped_column(sa.Boolean)
    arq_uuid: Mapped[str | None] = mapped_column(sa.String(36), index=True)
    project_id: Mapped[str | None] = mapped_column(sa.String(255))
    user_id: Mapped[str | None] = mapped_column(sa.String(255))
    finished_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class AuditEvent(Base):
    """One change of a device, deployable, profile, ARQ, claim, driver, image or host's
    inventory: who made it, in which request, and what it was before and after, in
    brief (exosuit/db/audit.py, doc/audit.md). Written in the change's transaction."""

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(
        Timestamp, default=utcnow, nullable=False, index=True
    )
    request_id: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    # "user:<id>", "service:<id>", "host:<name>", "conductor" or "system".
    actor: Mapped[str] = mapped_column(sa.String(255))
    user_id: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    project_id: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    action: Mapped[str] = mapped_column(sa.String(64))
    object_type: Mapped[str] = mapped_column(sa.String(32))
    # The object's uuid; a driver's or a host's name.
    object_uuid: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    # The host the object is on (None: none, or every host).
    host: Mapped[str | None] = mapped_column(sa.String(255), index=True)
    # Canonical JSON, in brief (None: created, or deleted).
    before_data: Mapped[str | None] = mapped_column(sa.Text)
    after_data: Mapped[str | None] = mapped_column(sa.Text)
    # A notification of it is still to be published on the message bus.
    notify_pending: Mapped[bool] = mapped_column(sa.Boolean, default=False, index=True)


class MetricCounter(Base):
    """Prometheus counters shared by every process (the API's /metrics reads them)."""

    __tablename__ = "metric_counters"
    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    # Canonical JSON of the labels ({} for none).
    labels: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    value: Mapped[int] = mapped_column(sa.BigInteger, default=0)


# The tables, for SQLAlchemy Core queries (``__table__`` is typed as a FromClause).
devices = cast(sa.Table, Device.__table__)
controlpath_ids = cast(sa.Table, ControlPathID.__table__)
deployables = cast(sa.Table, Deployable.__table__)
attributes = cast(sa.Table, Attribute.__table__)
attach_handles = cast(sa.Table, AttachHandle.__table__)
device_profiles = cast(sa.Table, DeviceProfile.__table__)
accelerator_requests = cast(sa.Table, AcceleratorRequest.__table__)
hosts = cast(sa.Table, Host.__table__)
jobs = cast(sa.Table, Job.__table__)
placement_hosts = cast(sa.Table, PlacementHost.__table__)
placement_providers = cast(sa.Table, PlacementProvider.__table__)
metric_counters = cast(sa.Table, MetricCounter.__table__)
images = cast(sa.Table, Image.__table__)
image_members = cast(sa.Table, ImageMember.__table__)
programs = cast(sa.Table, Program.__table__)
device_services = cast(sa.Table, DeviceService.__table__)
host_drivers = cast(sa.Table, HostDriver.__table__)
discoveries = cast(sa.Table, Discovery.__table__)
discovery_hosts = cast(sa.Table, DiscoveryHost.__table__)
claims = cast(sa.Table, Claim.__table__)
audit_events = cast(sa.Table, AuditEvent.__table__)


class UsageSample(Base):
    """A device's usage over one bucket of its history (exosuit/db/usage_history.py):
    ``tier`` 0, the recent history ([dashboard] history_resolution), 1 the older one
    (history_coarse_resolution); ``at`` the bucket's start; ``figures`` canonical JSON of
    {figure: value}, the mean of the ``samples`` taken in it. No foreign key: the hot
    report path never touches it; the usage_history job deletes a gone device's rows."""

    __tablename__ = "usage_samples"
    __table_args__ = (sa.Index("ix_usage_samples_tier_at", "tier", "at"),)
    device_uuid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    tier: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    at: Mapped[dt.datetime] = mapped_column(Timestamp, primary_key=True)
    samples: Mapped[int] = mapped_column(sa.Integer, default=1)
    figures: Mapped[str] = mapped_column(sa.Text)


class AllocationSample(Base):
    """The attach handles of one device model (type, vendor, model) over one bucket of
    the fleet's allocation history: ``figures`` canonical JSON of {"held": n, "free": n},
    the mean of the ``samples`` taken in it; tiers as ``UsageSample``'s."""

    __tablename__ = "allocation_samples"
    __table_args__ = (sa.Index("ix_allocation_samples_tier_at", "tier", "at"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tier: Mapped[int] = mapped_column(sa.Integer)
    at: Mapped[dt.datetime] = mapped_column(Timestamp)
    type: Mapped[str] = mapped_column(sa.String(32))
    vendor: Mapped[str] = mapped_column(sa.String(255))
    model: Mapped[str] = mapped_column(sa.String(255))
    samples: Mapped[int] = mapped_column(sa.Integer, default=1)
    figures: Mapped[str] = mapped_column(sa.Text)


usage_samples = cast(sa.Table, UsageSample.__table__)
allocation_samples = cast(sa.Table, AllocationSample.__table__)
