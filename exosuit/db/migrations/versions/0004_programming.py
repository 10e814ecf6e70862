"""images, image_members, programs; deployables.program_uuid; hosts.desired_generation:
FPGA programming (doc/programming.md)

Revision ID: 0004
Revises: 0003

"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Timestamp = (
    sa.DateTime()
    .with_variant(mysql.DATETIME(fsp=6), "mariadb")
    .with_variant(mysql.DATETIME(fsp=6), "mysql")
)


def upgrade() -> None:
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("vendor", sa.String(length=255), nullable=True),
        sa.Column("board", sa.String(length=255), nullable=True),
        sa.Column("function_id", sa.String(length=255), nullable=True),
        sa.Column("interface_id", sa.String(length=255), nullable=True),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("signature", sa.Text(), nullable=True),
        sa.Column("signature_key_id", sa.String(length=255), nullable=True),
        sa.Column("signature_algorithm", sa.String(length=32), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
    )
    op.create_index("ix_images_owner", "images", ["owner"])
    op.create_index("ix_images_function_id", "images", ["function_id"])
    op.create_index("ix_images_sha256", "images", ["sha256"])
    op.create_table(
        "image_members",
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("image_id", "project_id"),
    )
    op.create_table(
        "programs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("deployable_id", sa.Integer(), nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("image_uuid", sa.String(length=36), nullable=False),
        sa.Column("image_source", sa.String(length=16), nullable=False),
        sa.Column("image_format", sa.String(length=32), nullable=True),
        sa.Column("image_sha256", sa.String(length=128), nullable=True),
        sa.Column("image_size", sa.BigInteger(), nullable=True),
        sa.Column("function_id", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("previous_image_uuid", sa.String(length=36), nullable=True),
        sa.Column("restored", sa.Boolean(), nullable=True),
        sa.Column("arq_uuid", sa.String(length=36), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=True),
        sa.ForeignKeyConstraint(["deployable_id"], ["deployables.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
    )
    op.create_index("ix_programs_deployable_id", "programs", ["deployable_id"])
    op.create_index("ix_programs_hostname", "programs", ["hostname"])
    op.create_index("ix_programs_state", "programs", ["state"])
    op.create_index("ix_programs_arq_uuid", "programs", ["arq_uuid"])
    op.add_column("deployables", sa.Column("program_uuid", sa.String(length=36), nullable=True))
    op.add_column(
        "hosts",
        sa.Column("desired_generation", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("hosts", "desired_generation")
    op.drop_column("deployables", "program_uuid")
    op.drop_table("programs")
    op.drop_table("image_members")
    op.drop_table("images")
