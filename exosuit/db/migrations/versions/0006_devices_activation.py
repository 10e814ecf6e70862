"""devices.activation (existing devices ready), activation_reason, activation_generation;
device_services, host_drivers, discoveries, discovery_hosts; hosts.observed_generation,
observed_at, usage, usage_at: services, drivers, discovery and activation (doc/devices.md)

Revision ID: 0006
Revises: 0005

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)
LongText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        # Every device known before was offered to Placement: ready.
        batch_op.add_column(
            sa.Column("activation", sa.String(length=16), nullable=False, server_default="ready")
        )
        batch_op.add_column(sa.Column("activation_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("activation_generation", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("plugin", sa.String(length=100), nullable=True))
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("observed_generation", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("observed_at", Timestamp, nullable=True))
        batch_op.add_column(sa.Column("usage", LongText, nullable=True))
        batch_op.add_column(sa.Column("usage_at", Timestamp, nullable=True))
    op.create_table(
        "device_services",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_device_services_device_id", "device_services", ["device_id"])
    op.create_index("ix_device_services_kind", "device_services", ["kind"])
    op.create_table(
        "host_drivers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("desired_enabled", sa.Boolean(), nullable=True),
        sa.Column("desired_config", sa.Text(), nullable=True),
        sa.Column("desired_generation", sa.Integer(), nullable=True),
        sa.Column("version", sa.String(length=64), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column("config_digest", sa.String(length=80), nullable=True),
        sa.Column("found", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reported_at", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hostname", "name", name="uq_host_drivers_host_name"),
    )
    op.create_table(
        "discoveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("requested_at", Timestamp, nullable=False),
        sa.Column("spread", sa.Float(), nullable=False),
        sa.Column("all_hosts", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
    )
    op.create_table(
        "discovery_hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("discovery_id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("received_at", Timestamp, nullable=True),
        sa.ForeignKeyConstraint(["discovery_id"], ["discoveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("discovery_id", "hostname", name="uq_discovery_hosts_host"),
    )
    op.create_index("ix_discovery_hosts_discovery_id", "discovery_hosts", ["discovery_id"])
    op.create_index("ix_discovery_hosts_hostname", "discovery_hosts", ["hostname"])


def downgrade() -> None:
    op.drop_table("discovery_hosts")
    op.drop_table("discoveries")
    op.drop_table("host_drivers")
    op.drop_table("device_services")
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("usage_at")
        batch_op.drop_column("usage")
        batch_op.drop_column("observed_at")
        batch_op.drop_column("observed_generation")
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_column("plugin")
        batch_op.drop_column("activation_generation")
        batch_op.drop_column("activation_reason")
        batch_op.drop_column("activation")
