"""attach_handles.presence: a held handle gone from its host's report is never bound again

Revision ID: 0002
Revises: 0001

"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attach_handles", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("presence", sa.String(length=16), nullable=False, server_default="present")
        )


def downgrade() -> None:
    with op.batch_alter_table("attach_handles", schema=None) as batch_op:
        batch_op.drop_column("presence")
