"""Kubernetes objects checked against the API's published schemas, as
``kubernetes-validate --strict`` checks them (the package ships the JSON schemas made
from each release's OpenAPI document, and reads them offline).

``KUBERNETES_VERSIONS`` are the releases Exosuit supports (doc/kubernetes.md): every
object the tests check must be valid in each. Strict: a field the release does not
know is an error, as the API server's strict field validation makes it.
"""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate.utils as kubernetes_validate

__all__ = ["KUBERNETES_VERSIONS", "schema_errors"]

KUBERNETES_VERSIONS = ("1.34", "1.35")

# kubernetes-validate reads its schema files again at each call (1.5 MB of definitions,
# some 40 ms), and the stand-in checks every ResourceSlice written: each file is read
# once here (the schemas are only read, never changed).
kubernetes_validate.schema_contents = functools.lru_cache(maxsize=None)(  # type: ignore[assignment]
    kubernetes_validate.schema_contents
)


def schema_errors(document: dict[str, Any], *, strict: bool = True) -> list[str]:
    """Why ``document`` is not a valid object of its kind in each supported release
    (empty: it is valid in all of them). A kind without a published schema is an error."""
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(document, version, strict)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(map(str, error.absolute_path)) or "(root)"
            errors.append(f"Kubernetes {version}: {where}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            errors.append(f"Kubernetes {version}: {error.message}")
    return errors
