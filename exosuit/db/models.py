"""SQLAlchemy models: the schema. Queries use the tables through SQLAlchemy Core.

The hierarchy is Cyborg's: device → control-path id, deployables → attributes and
attach handles; device profiles; accelerator requests (ARQs). Exosuit adds hosts
and jobs. Deleting a device cascades to its rows, except that an attach handle
held by an ARQ cannot be deleted (the foreign key from the ARQ restricts it): the
database itself refuses to lose track of who holds what.
"""

from __future__ import annotations

import datetime as dt

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
    # present | lost (gone from the host while an attach handle is held)
    presence: Mapped[str] = mapped_column(sa.String(16), default="present")
    presence_reason: Mapped[str | None] = mapped_column(sa.Text)
    driver_name: Mapped[str | None] = mapped_column(sa.String(100))
    pci_address: Mapped[str | None] = mapped_column(sa.String(32))
    numa_node: Mapped[int | None] = mapped_column(sa.Integer)
    firmware_version: Mapped[str | None] = mapped_column(sa.String(255))


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
    presence: Mapped[str] = mapped_column(sa.String(16), default="present",
                                          server_default="present")


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
    device_profile_id: Mapped[int] = mapped_column(
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


class MetricCounter(Base):
    """Prometheus counters shared by every process (the API's /metrics reads them)."""

    __tablename__ = "metric_counters"
    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    # Canonical JSON of the labels ({} for none).
    labels: Mapped[str] = mapped_column(sa.String(255), primary_key=True)
    value: Mapped[int] = mapped_column(sa.BigInteger, default=0)

devices = Device.__table__
controlpath_ids = ControlPathID.__table__
deployables = Deployable.__table__
attributes = Attribute.__table__
attach_handles = AttachHandle.__table__
device_profiles = DeviceProfile.__table__
accelerator_requests = AcceleratorRequest.__table__
hosts = Host.__table__
jobs = Job.__table__
placement_hosts = PlacementHost.__table__
placement_providers = PlacementProvider.__table__
metric_counters = MetricCounter.__table__
