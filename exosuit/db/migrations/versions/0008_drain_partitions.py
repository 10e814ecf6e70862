"""hosts.drained_at (a host an operator drained: its devices take no new workload, those it
reports later included); devices.partition_layout, partition_state, partition_reason and
partition_generation (the partition layout an operator set and how its host's agent
applied it): drain and partitions (doc/devices.md)

Revision ID: 0008
Revises: 0007

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("drained_at", Timestamp, nullable=True))
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("partition_layout", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("partition_state", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("partition_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("partition_generation", sa.Integer(), nullable=True))


def _drop_columns(table: str, *names: str) -> None:
    """Drop columns. On SQLite natively (ALTER TABLE … DROP COLUMN, SQLite 3.35+: none of
    these columns is indexed or constrained), not by batch mode's copy of the table: that
    drops the old table, which the foreign keys of the rows that refer to it forbid while
    foreign keys are enforced (as every connection of exosuit/db/api.py enforces them)."""
    if op.get_bind().dialect.name == "sqlite":
        for name in names:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
        return
    with op.batch_alter_table(table, schema=None) as batch_op:
        for name in names:
            batch_op.drop_column(name)


def downgrade() -> None:
    _drop_columns(
        "devices", "partition_generation", "partition_reason", "partition_state", "partition_layout"
    )
    _drop_columns("hosts", "drained_at")
