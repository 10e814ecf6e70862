"""devices.health_state, health_reason, health_since and health_held: a device's health as
its agent last reported it (ok, warning, unhealthy; why; since when) and whether it is
held back from every offer (by a report of unhealthy, or by an operator) until it
recovers or is cleared (doc/devices.md, "Health")

Revision ID: 0010
Revises: 0009

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("health_state", sa.String(length=16), nullable=False, server_default="ok")
        )
        batch_op.add_column(sa.Column("health_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("health_since", Timestamp, nullable=True))
        batch_op.add_column(sa.Column("health_held", sa.String(length=16), nullable=True))


def downgrade() -> None:
    # NOTE: plain DROP COLUMNs, not a batch: on SQLite (3.35 and later drop a column in
    # place) a batch would copy devices and drop the old table, whose implicit delete
    # cascades to deployables and attach handles and fails on an ARQ that holds one.
    for name in ("health_held", "health_since", "health_reason", "health_state"):
        op.drop_column("devices", name)
