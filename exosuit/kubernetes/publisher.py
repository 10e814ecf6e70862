"""Keeps the node's ResourceSlices equal to its inventory through ``ResourceV1Api``.

Level-triggered: each ``sync`` lists the slices of this node and driver (field
selectors ``spec.nodeName`` and ``spec.driver``), compares their devices with the ones
the inventory gives (``slices.devices_of``), and when anything differs writes the whole
pool again at the next generation: the existing slices replaced (by name and
resourceVersion), the missing ones created, the extra ones deleted. Nothing is written
while they are equal, so a sync every few seconds costs one list. A failed write is
left to the next sync (the kubelet also deletes a node's slices when it starts; the
next sync puts them back).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from exosuit.kubernetes import slices
from exosuit.kubernetes.slices import DRIVER, Inventory

__all__ = ["SlicePublisher", "SyncResult"]

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncResult:
    """What one sync did: the pool's generation after it and the writes it made."""

    generation: int
    created: int = 0
    replaced: int = 0
    deleted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.replaced or self.deleted)


class SlicePublisher:
    """The ResourceSlices of one node, for one ``ApiClient`` of the Kubernetes API."""

    def __init__(self, api_client: client.ApiClient, node: str) -> None:
        self.node = node
        self.resources = client.ResourceV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self._node_uid: str | None = None

    def _selector(self) -> str:
        return f"spec.nodeName={self.node},spec.driver={DRIVER}"

    def existing(self) -> list[client.V1ResourceSlice]:
        """This node's slices of our driver, by name."""
        found = self.resources.list_resource_slice(field_selector=self._selector())
        # A server that ignores the selector still gives only ours here.
        mine = [
            s
            for s in found.items or ()
            if s.spec and s.spec.node_name == self.node and s.spec.driver == DRIVER
        ]
        return sorted(mine, key=_name)

    def node_uid(self) -> str | None:
        """The Node's uid (the slices' owner), read once; None when it cannot be read
        (the slices are then published without an owner)."""
        if self._node_uid is None:
            try:
                node = self.core.read_node(self.node)
            except ApiException as error:
                LOG.warning("cannot read Node %s (%s): slices without owner", self.node, error)
                return None
            self._node_uid = node.metadata.uid if node.metadata else None
        return self._node_uid

    def sync(self, inventory: Inventory) -> SyncResult:
        """Make the published slices hold exactly the inventory's devices."""
        chunks = slices.slice_devices(slices.devices_of(inventory))
        existing = self.existing()
        generations = {s.spec.pool.generation for s in existing if s.spec and s.spec.pool}
        current = max(generations, default=0)
        if _up_to_date(existing, chunks, generations):
            return SyncResult(current)
        generation = current + 1
        wanted = slices.build_slices(self.node, chunks, generation, self.node_uid())
        created = replaced = 0
        for index, body in enumerate(wanted):
            if index < len(existing):
                old = existing[index]
                assert old.metadata is not None and body.metadata is not None
                body.metadata.name = _name(old)
                body.metadata.generate_name = None
                body.metadata.resource_version = old.metadata.resource_version
                self.resources.replace_resource_slice(_name(old), body)
                replaced += 1
            else:
                self.resources.create_resource_slice(body)
                created += 1
        deleted = 0
        for old in existing[len(wanted) :]:
            try:
                self.resources.delete_resource_slice(_name(old))
            except ApiException as error:
                if error.status != 404:  # gone already: what we wanted
                    raise
            deleted += 1
        LOG.info(
            "ResourceSlices of %s at generation %d: %d devices in %d slices "
            "(%d created, %d replaced, %d deleted)",
            self.node,
            generation,
            sum(len(c) for c in chunks),
            len(chunks),
            created,
            replaced,
            deleted,
        )
        return SyncResult(generation, created, replaced, deleted)


def _name(item: client.V1ResourceSlice) -> str:
    return (item.metadata.name if item.metadata else None) or ""


def _up_to_date(
    existing: list[client.V1ResourceSlice],
    chunks: list[list[client.V1Device]],
    generations: set[int],
) -> bool:
    """The slices hold the chunks' devices, one generation, the right count."""
    if len(existing) != len(chunks) or len(generations) > 1:
        return False
    if any(
        not s.spec or not s.spec.pool or s.spec.pool.resource_slice_count != len(chunks)
        for s in existing
    ):
        return False
    have = sorted(slices.fingerprint(s.spec.devices or ()) for s in existing if s.spec)
    return have == sorted(slices.fingerprint(c) for c in chunks)
