"""usage_samples, allocation_samples: the bounded, downsampled history of every device's
usage and of the attach handles held and free by device model, recorded by the
conductor's usage_history job and drawn by the console (doc/dashboard.md, "Charts")

Revision ID: 0013
Revises: 0012

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    op.create_table(
        "usage_samples",
        sa.Column("device_uuid", sa.String(length=36), nullable=False),
        sa.Column("tier", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("figures", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("device_uuid", "tier", "at"),
    )
    op.create_index("ix_usage_samples_tier_at", "usage_samples", ["tier", "at"])
    op.create_table(
        "allocation_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tier", sa.Integer(), nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("vendor", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("figures", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_allocation_samples_tier_at", "allocation_samples", ["tier", "at"])


def downgrade() -> None:
    op.drop_table("allocation_samples")
    op.drop_table("usage_samples")
