"""claims; accelerator_requests.claim_id (the claim that holds an ARQ), and
accelerator_requests.device_profile_id nullable (a claim that names its attach handles
has no profile): standalone claims (doc/standalone.md)

Revision ID: 0007
Revises: 0006

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("consumer", sa.String(length=255), nullable=True),
        sa.Column("consumer_key", sa.String(length=64), nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("device_profile_name", sa.String(length=255), nullable=True),
        sa.Column("container", sa.Boolean(), nullable=False),
        sa.Column("cdi_state", sa.String(length=16), nullable=True),
        sa.Column("cdi_reason", sa.Text(), nullable=True),
        sa.Column("placement", sa.Boolean(), nullable=False),
        sa.Column("expires_at", Timestamp, nullable=True),
        sa.Column("released_at", Timestamp, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
        sa.UniqueConstraint("consumer_key"),
    )
    op.create_index("ix_claims_project_id", "claims", ["project_id"])
    op.create_index("ix_claims_consumer", "claims", ["consumer"])
    op.create_index("ix_claims_hostname", "claims", ["hostname"])
    op.create_index("ix_claims_expires_at", "claims", ["expires_at"])
    op.create_index("ix_claims_released_at", "claims", ["released_at"])
    with op.batch_alter_table("accelerator_requests", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_id", sa.Integer(), nullable=True))
        batch_op.create_index("ix_accelerator_requests_claim_id", ["claim_id"])
        batch_op.create_foreign_key(
            "fk_accelerator_requests_claim_id", "claims", ["claim_id"], ["id"]
        )
        batch_op.alter_column("device_profile_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    # Claims go: their ARQs are released (handles freed, ARQs deleted), as a DELETE of
    # each claim would (ARQs without a profile could not stay anyway).
    op.execute(
        "UPDATE attach_handles SET in_use = false WHERE id IN (SELECT attach_handle_id "
        "FROM accelerator_requests WHERE claim_id IS NOT NULL AND attach_handle_id IS NOT NULL)"
    )
    op.execute(
        "DELETE FROM accelerator_requests WHERE claim_id IS NOT NULL OR device_profile_id IS NULL"
    )
    with op.batch_alter_table("accelerator_requests", schema=None) as batch_op:
        batch_op.alter_column("device_profile_id", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_constraint("fk_accelerator_requests_claim_id", type_="foreignkey")
        batch_op.drop_index("ix_accelerator_requests_claim_id")
        batch_op.drop_column("claim_id")
    op.drop_table("claims")
