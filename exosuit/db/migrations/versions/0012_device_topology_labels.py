"""devices.pcie_root, devices.iommu_group: where a device sits (the PCI Express root port
above it, its IOMMU group), reported by its driver beside numa_node; devices.labels: an
operator's labels (canonical JSON of {key: value}), selectable in device profiles
(``accel:label:<key>``; doc/devices.md)

Revision ID: 0012
Revises: 0011

"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (see 0011): a batch would copy devices, which the enforced
    # foreign keys of attach handles refuse.
    op.add_column("devices", sa.Column("pcie_root", sa.String(32), nullable=True))
    op.add_column("devices", sa.Column("iommu_group", sa.Integer(), nullable=True))
    op.add_column("devices", sa.Column("labels", sa.Text(), nullable=True))


def downgrade() -> None:
    # Plain DROP COLUMNs, not a batch (see 0010's downgrade).
    op.drop_column("devices", "labels")
    op.drop_column("devices", "iommu_group")
    op.drop_column("devices", "pcie_root")
