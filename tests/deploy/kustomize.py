"""The part of kustomize that deploy/kubernetes/ uses, to render its overlays in tests
(no kustomize binary here, and no Python package renders kustomizations).

A ``kustomization.yaml`` may say three things, each as kustomize means it:

* ``resources``: YAML files (their documents, in order) and directories (rendered by
  their own ``kustomization.yaml`` first);
* ``patches``: ``- path: FILE``, FILE one strategic merge patch of the resource of its
  apiVersion, kind, name and namespace (one must match). Maps merge key
  by key; the lists Kubernetes merges by a key (containers, env, volumes, volumeMounts,
  ports …, see ``MERGE_KEYS``) merge item by item, other lists are replaced; ``null``
  removes a key;
* ``images``: ``name`` → ``newName``/``newTag``, in every container and init container.

Anything else (another field, a patch directive such as ``$patch``, a patch by target
or inline, a generator) is refused with ``KustomizeError`` rather than ignored: a file
this reader cannot render as kustomize would fails the test that reads it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KustomizeError", "MERGE_KEYS", "build"]

KUSTOMIZATION = "kustomization.yaml"
KNOWN = {"apiVersion", "kind", "resources", "patches", "images"}
# The patch merge keys of the Kubernetes types deploy/kubernetes/ patches (the
# x-kubernetes-patch-merge-key of the fields of that name in the published API).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


class KustomizeError(Exception):
    """A kustomization this reader does not render (or that kustomize would refuse)."""


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _identity(document: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = document.get("metadata") or {}
    return (
        document.get("apiVersion", ""),
        document.get("kind", ""),
        meta.get("name", ""),
        meta.get("namespace", ""),
    )


def _merge(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, dict) and any(key.startswith("$") for key in patch):
        raise KustomizeError(f"{field}: patch directives are not supported: {sorted(patch)}")
    if isinstance(target, dict) and isinstance(patch, dict):
        merged = dict(target)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = _merge(merged[key], value, key)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(target, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged_list = list(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise KustomizeError(f"{field}: an item without its merge key {key}: {item}")
            at = [i for i, old in enumerate(merged_list) if old.get(key) == item[key]]
            if at:
                merged_list[at[0]] = _merge(merged_list[at[0]], item, field)
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(patch)


def _set_images(document: dict[str, Any], images: list[dict[str, Any]]) -> None:
    spec = document.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or spec
    for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        name, _, tag = str(container.get("image", "")).partition(":")
        for image in images:
            if image["name"] == name:
                new_tag = image.get("newTag", tag)
                container["image"] = image.get("newName", name) + (f":{new_tag}" if new_tag else "")


def build(directory: Path) -> list[dict[str, Any]]:
    """The documents ``kustomize build directory`` gives (in resource order)."""
    path = directory / KUSTOMIZATION
    [kustomization] = _load(path)
    unknown = set(kustomization) - KNOWN
    if unknown:
        raise KustomizeError(f"{path}: not supported here: {sorted(unknown)}")
    documents: list[dict[str, Any]] = []
    for entry in kustomization.get("resources") or ():
        resource = (directory / entry).resolve()
        documents += build(resource) if resource.is_dir() else _load(resource)
    identities = [_identity(d) for d in documents]
    if len(set(identities)) != len(identities):
        raise KustomizeError(f"{path}: a resource is given twice")
    for patch_entry in kustomization.get("patches") or ():
        if set(patch_entry) != {"path"}:
            raise KustomizeError(f"{path}: only patches by path are supported: {patch_entry}")
        patches = _load(directory / patch_entry["path"])
        if len(patches) != 1:
            raise KustomizeError(f"{patch_entry['path']}: one patch per file")
        identity = _identity(patches[0])
        if identity not in identities:
            raise KustomizeError(f"{patch_entry['path']}: no resource {identity} to patch")
        at = identities.index(identity)
        documents[at] = _merge(documents[at], patches[0])
    for document in documents:
        _set_images(document, kustomization.get("images") or [])
    return documents
