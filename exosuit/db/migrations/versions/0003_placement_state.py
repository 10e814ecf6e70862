"""placement_hosts, placement_providers, metric_counters: what the conductor wrote to
Placement, and counters shared by every process for /metrics

Revision ID: 0003
Revises: 0002

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    op.create_table(
        "placement_hosts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("compute_rp_uuid", sa.String(length=36), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("synced_at", Timestamp, nullable=True),
        sa.Column("verified_at", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hostname"),
    )
    op.create_table(
        "placement_providers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rp_uuid", sa.String(length=36), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("parent_rp_uuid", sa.String(length=36), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("reserved", sa.Integer(), nullable=False),
        sa.Column("traits", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=True),
        sa.Column("removing", sa.Boolean(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("rp_uuid"),
    )
    op.create_index(
        op.f("ix_placement_providers_hostname"), "placement_providers", ["hostname"], unique=False
    )
    op.create_table(
        "metric_counters",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.String(length=255), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "labels"),
    )


def downgrade() -> None:
    op.drop_table("metric_counters")
    op.drop_index(op.f("ix_placement_providers_hostname"), table_name="placement_providers")
    op.drop_table("placement_providers")
    op.drop_table("placement_hosts")
