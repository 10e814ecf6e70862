"""devices.partition_on_demand: the device's partition layout makes its slices on demand
(a bind's slice is made when the bind takes it and removed when it is released;
doc/devices.md, "Partitions"), kept beside the layout so that a host's desired state
finds such devices with an indexed read

Revision ID: 0011
Revises: 0010

"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite takes one with a constant default in place): a batch
    # would copy devices, which the enforced foreign keys of attach handles refuse.
    op.add_column(
        "devices",
        sa.Column("partition_on_demand", sa.Boolean(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    # A plain DROP COLUMN, not a batch (see 0010's downgrade).
    op.drop_column("devices", "partition_on_demand")
