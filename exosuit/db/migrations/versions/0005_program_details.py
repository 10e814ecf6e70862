"""programs.image_interface_id (what the agent checks after loading); devices.status_reason
(why a device is disabled: a failed program that could not restore the previous image)

Revision ID: 0005
Revises: 0004

"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("programs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("image_interface_id", sa.String(length=255), nullable=True))
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.add_column(sa.Column("status_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("devices", schema=None) as batch_op:
        batch_op.drop_column("status_reason")
    with op.batch_alter_table("programs", schema=None) as batch_op:
        batch_op.drop_column("image_interface_id")
