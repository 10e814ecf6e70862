"""One naming scheme for an NVIDIA GPU and its slices, used by nvidia_gpu and the simulated
driver alike, so that a device profile written against ``exosuit serve`` asks the same
resource class and traits of a real GPU (doc/drivers.md, "Naming GPUs and their slices").

* the GPU whole, for PCI passthrough: resource class ``PGPU``; traits ``OWNER_CYBORG``,
  ``CUSTOM_NVIDIA_<PRODUCT ID>`` (Cyborg's) and, on a MIG-capable GPU,
  ``CUSTOM_NVIDIA_MIG_CAPABLE``;
* a MIG instance: a resource class of its own per GPU-instance profile,
  ``CUSTOM_NVIDIA_MIG_<PROFILE>`` (``1g.5gb`` → ``CUSTOM_NVIDIA_MIG_1G_5GB``), so that
  Placement counts each profile's instances and a request for ``PGPU`` never lands on a
  slice; traits ``OWNER_CYBORG``, ``CUSTOM_NVIDIA_<PRODUCT ID>``,
  ``CUSTOM_NVIDIA_MIG_CAPABLE``; attribute ``mig_profile``;
* a vGPU (an mdev): resource class ``VGPU`` (Nova's); traits ``OWNER_CYBORG``,
  ``CUSTOM_NVIDIA_<PRODUCT ID>_<TYPE>`` (Cyborg's: the second word of the type's name,
  ``GRID T4-1B`` → ``CUSTOM_NVIDIA_1EB8_T4_1B``) and, on a MIG-capable GPU,
  ``CUSTOM_NVIDIA_MIG_CAPABLE``; attributes ``vgpu_type`` (the mdev type, ``nvidia-223``)
  and ``vgpu_type_name`` (its name, ``GRID T4-1B``).
"""

from __future__ import annotations

import dataclasses
import re

__all__ = [
    "MIG_CAPABLE",
    "OWNER",
    "PGPU",
    "VGPU",
    "Naming",
    "mig_resource_class",
    "mig_slice",
    "product_trait",
    "trait_token",
    "vgpu",
    "vgpu_trait",
    "whole_gpu",
]

OWNER = "OWNER_CYBORG"
MIG_CAPABLE = "CUSTOM_NVIDIA_MIG_CAPABLE"
PGPU = "PGPU"
VGPU = "VGPU"


@dataclasses.dataclass(frozen=True)
class Naming:
    """What Placement and a device profile see of a deployable."""

    resource_class: str
    traits: tuple[str, ...]
    attributes: tuple[tuple[str, str], ...] = ()


def trait_token(text: str) -> str:
    """``T4-1B`` → ``T4_1B``, ``1g.5gb`` → ``1G_5GB``: what a custom trait may hold."""
    return re.sub(r"[^A-Z0-9]+", "_", text.upper()).strip("_")


def product_trait(product_id: str) -> str:
    """``1eb8`` → ``CUSTOM_NVIDIA_1EB8``."""
    return f"CUSTOM_NVIDIA_{product_id.upper()}"


def mig_resource_class(profile: str) -> str:
    """``1g.5gb`` → ``CUSTOM_NVIDIA_MIG_1G_5GB``."""
    return f"CUSTOM_NVIDIA_MIG_{trait_token(profile)}"


def vgpu_trait(product_id: str, type_name: str) -> str:
    """Cyborg's vGPU trait: the product's and the second word of the type's name
    (``1eb8``, ``GRID T4-1B`` → ``CUSTOM_NVIDIA_1EB8_T4_1B``)."""
    words = type_name.split()
    return f"{product_trait(product_id)}_{trait_token(words[1] if len(words) > 1 else type_name)}"


def _capable(mig_capable: bool) -> tuple[str, ...]:
    return (MIG_CAPABLE,) if mig_capable else ()


def whole_gpu(product_id: str, mig_capable: bool) -> Naming:
    """The GPU whole, for PCI passthrough."""
    return Naming(PGPU, (OWNER, product_trait(product_id), *_capable(mig_capable)))


def mig_slice(product_id: str, profile: str) -> Naming:
    """The MIG instances of one GPU-instance profile (``1g.5gb``)."""
    return Naming(
        mig_resource_class(profile),
        (OWNER, product_trait(product_id), MIG_CAPABLE),
        (("mig_profile", profile),),
    )


def vgpu(product_id: str, type_id: str, type_name: str, mig_capable: bool) -> Naming:
    """The vGPUs of one mdev type (``nvidia-223``, named ``GRID T4-1B``)."""
    return Naming(
        VGPU,
        (OWNER, vgpu_trait(product_id, type_name), *_capable(mig_capable)),
        (("vgpu_type", type_id), ("vgpu_type_name", type_name)),
    )
