"""Where an image comes from: Exosuit's catalogue or Glance, as ``[images] sources`` says
(looked up in that order). What the program flow and the agent API ask of images.

* ``resolve_image``: the image a program or a bind names, as an ``ImageRef``, if the
  caller may see it and it has data. A Glance image is read with the caller's token
  (Glance decides what it sees) or as the service user of ``[glance]`` (then Exosuit
  applies Glance's visibility rules for the caller: owner, public, community, accepted
  member of a shared image). Its data is fetched into the API's cache and verified
  there the first time (size, ``os_hash_value``, signature), so its SHA-256 is known
  and agents never reach Glance.
* ``find_by_function``: the one active image with a function id, across the sources.
* ``open_data``: the bytes of an active image for ``/agent/v1/images/{uuid}/data``.

Glance's properties are Cyborg's: ``vendor``, ``board``, ``accel:function_id`` (or
``function_uuid``), ``interface_id`` (or ``accel:interface_id``), ``format`` (else
``disk_format``), ``size``, ``os_hash_algo``/``os_hash_value`` (else the MD5
``checksum``), and ``img_signature``, ``img_signature_hash_method`` (``SHA-256`` …),
``img_signature_key_type`` (``RSA-PSS``, ``ECC_*``) and
``img_signature_certificate_uuid`` (the key's id in ``[images] trusted_keys``).
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from typing import Any, BinaryIO

from exosuit import exceptions
from exosuit.db import images as db
from exosuit.db.api import Database
from exosuit.glance import catalogue
from exosuit.glance.cache import Expected, GlanceCache
from exosuit.glance.client import GlanceClient, make_adapter, uses_service_user
from exosuit.images import verify

__all__ = [
    "EXOSUIT",
    "GLANCE",
    "ImageRef",
    "find_by_function",
    "glance_expected",
    "open_data",
    "resolve_image",
]

EXOSUIT = "exosuit"
GLANCE = "glance"
# The Glance properties a function id is looked up by (Cyborg's, then the older one).
FUNCTION_PROPERTIES = ("accel:function_id", "function_uuid")


@dataclasses.dataclass(frozen=True)
class ImageRef:
    uuid: str
    source: str  # "exosuit" | "glance"
    name: str
    format: str  # "gbs" | "xclbin" | "simulated" | …
    size: int
    sha256: str
    function_id: str | None
    interface_id: str | None
    vendor: str | None
    board: str | None


def _sources(conf: Any) -> list[str]:
    sources = [s.strip().lower() for s in conf.images.sources]
    unknown = set(sources) - {EXOSUIT, GLANCE}
    if unknown:
        raise ValueError(f"[images] sources: unknown {', '.join(sorted(unknown))}")
    return sources


def _canonical(image_uuid: str) -> str | None:
    try:
        return str(uuidlib.UUID(image_uuid))
    except (ValueError, TypeError, AttributeError):
        return None


def resolve_image(
    conf: Any,
    database: Database,
    image_uuid: str,
    *,
    project_id: str | None,
    is_admin: bool,
    token: str | None = None,
) -> ImageRef:
    """The active image ``image_uuid`` the caller may see, from the first source that
    has it. ImageNotFound (absent or not visible), ImageNotActive (no data yet),
    ImageInvalid / ImageSignatureInvalid (Glance's data is not what it says, or a
    signature is required and missing, unknown or wrong), GlanceUnavailable."""
    uuid = _canonical(image_uuid)
    if uuid is None:
        raise exceptions.ImageNotFound(uuid=image_uuid)
    viewer = db.Viewer(project_id, is_admin)
    for source in _sources(conf):
        if source == EXOSUIT:
            try:
                row = database.read(db.get, uuid, viewer=viewer)
            except exceptions.ImageNotFound:
                continue
            return _catalogue_ref(conf, row)
        client = GlanceClient(make_adapter(conf, token))
        try:
            image = _visible_glance_image(conf, client, uuid, viewer)
        except exceptions.ImageNotFound:
            continue
        return _glance_ref(conf, client, image)
    raise exceptions.ImageNotFound(uuid=image_uuid)


def find_by_function(
    conf: Any,
    database: Database,
    function_id: str,
    *,
    project_id: str | None,
    is_admin: bool,
    token: str | None = None,
) -> ImageRef:
    """The one active image the caller sees whose function id is ``function_id``, in
    every configured source together. ImageNotFound when there is none,
    ImageAmbiguous when there are several (as Cyborg: exactly one must match)."""
    viewer = db.Viewer(project_id, is_admin)
    found: list[tuple[str, Any]] = []
    client: GlanceClient | None = None
    for source in _sources(conf):
        if source == EXOSUIT:
            rows = database.read(db.find_by_function, function_id, viewer=viewer)
            found += [(EXOSUIT, row) for row in rows]
            continue
        client = GlanceClient(make_adapter(conf, token))
        images = _glance_by_function(conf, client, function_id, viewer)
        found += [(GLANCE, image) for image in images]
    if not found:
        raise exceptions.ImageNotFound(uuid=f"with function id {function_id}")
    if len(found) > 1:
        uuids = ", ".join(row["uuid"] if s == EXOSUIT else row["id"] for s, row in found)
        raise exceptions.ImageAmbiguous(function_id=function_id, uuids=uuids)
    source, row = found[0]
    if source == EXOSUIT:
        return _catalogue_ref(conf, row)
    assert client is not None
    return _glance_ref(conf, client, row)


def open_data(
    conf: Any, database: Database, image_uuid: str, *, token: str | None = None
) -> tuple[BinaryIO, int, str]:
    """(stream at 0, size, sha256) of active image ``image_uuid``, whoever owns it (for
    agents). A Glance image comes from the API's cache, fetched first when it is not
    there (as the service user, else with ``token``). ImageNotFound, ImageNotActive,
    ImageInvalid, GlanceUnavailable."""
    uuid = _canonical(image_uuid)
    if uuid is None:
        raise exceptions.ImageNotFound(uuid=image_uuid)
    for source in _sources(conf):
        if source == EXOSUIT:
            try:
                row = database.read(db.get_any, uuid)
            except exceptions.ImageNotFound:
                continue
            return catalogue.open_data(conf, row)
        client = GlanceClient(make_adapter(conf, token))
        try:
            image = client.get_image(uuid)
        except exceptions.ImageNotFound:
            continue
        path, sha256 = _glance_data(conf, client, image)
        return open(path, "rb"), int(image["size"]), sha256
    raise exceptions.ImageNotFound(uuid=image_uuid)


# -- the catalogue -----------------------------------------------------------------------------


def _catalogue_ref(conf: Any, row: db.ImageRow) -> ImageRef:
    """The row as an ImageRef; ImageNotActive without data. Its data was verified when
    it was uploaded; a signature requirement (or a key withdrawn) since then is
    applied again here."""
    if row["status"] != db.ACTIVE:
        raise exceptions.ImageNotActive(uuid=row["uuid"], status=row["status"])
    catalogue.still_acceptable(conf, row["uuid"], catalogue.signature_of(row))
    size, sha256 = row["size"], row["sha256"]
    assert size is not None and sha256 is not None  # active: activate set both
    return ImageRef(
        uuid=row["uuid"],
        source=EXOSUIT,
        name=row["name"],
        format=row["format"],
        size=int(size),
        sha256=sha256,
        function_id=row["function_id"],
        interface_id=row["interface_id"],
        vendor=row["vendor"],
        board=row["board"],
    )


# -- Glance ------------------------------------------------------------------------------------


def _may_see(client: GlanceClient, image: dict[str, Any], viewer: db.Viewer) -> bool:
    """Glance's visibility rules, for a caller read as the service user."""
    if viewer.is_admin or image.get("visibility") in ("public", "community"):
        return True
    if viewer.project_id is None:
        return False
    if image.get("owner") == viewer.project_id:
        return True
    return image.get("visibility") == "shared" and client.is_member(image["id"], viewer.project_id)


def _visible_glance_image(
    conf: Any, client: GlanceClient, uuid: str, viewer: db.Viewer
) -> dict[str, Any]:
    image = client.get_image(uuid)
    if uses_service_user(conf) and not _may_see(client, image, viewer):
        raise exceptions.ImageNotFound(uuid=uuid)
    return image


def _glance_by_function(
    conf: Any, client: GlanceClient, function_id: str, viewer: db.Viewer
) -> list[dict[str, Any]]:
    images: dict[str, dict[str, Any]] = {}
    for prop in FUNCTION_PROPERTIES:
        for image in client.list_images({prop: function_id, "status": "active"}):
            images.setdefault(image["id"], image)
    if uses_service_user(conf):
        return [i for i in images.values() if _may_see(client, i, viewer)]
    return list(images.values())


def _property(image: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = image.get(name)
        if value not in (None, ""):
            return str(value)
    return None


def glance_signature(image: dict[str, Any]) -> verify.Signature | None:
    """The image's ``img_signature*`` properties as a Signature (None: no signature).

    ImageSignatureInvalid when some are set and not all, or they name what cannot
    be verified (DSA keys, SHA-224)."""
    names = (
        "img_signature",
        "img_signature_hash_method",
        "img_signature_key_type",
        "img_signature_certificate_uuid",
    )
    values = {name: _property(image, name) for name in names}
    if not any(values.values()):
        return None
    missing = [name for name, value in values.items() if value is None]
    uuid = image["id"]
    if missing:
        raise exceptions.ImageSignatureInvalid(
            uuid=uuid, reason=f"is incomplete: {', '.join(missing)} not set"
        )
    key_type = str(values["img_signature_key_type"]).upper()
    scheme = "ECDSA" if key_type.startswith("ECC_") else key_type
    algorithm = f"{scheme}-{values['img_signature_hash_method']}"
    try:
        return verify.Signature.from_base64(
            str(values["img_signature_certificate_uuid"]), str(values["img_signature"]), algorithm
        )
    except verify.SignatureInvalid as error:
        raise exceptions.ImageSignatureInvalid(uuid=uuid, reason=str(error)) from None


def glance_expected(image: dict[str, Any]) -> Expected:
    """What the image's data must be (size, hashes, signature); ImageInvalid when
    Glance says nothing to check it by."""
    uuid = image["id"]
    hashes: dict[str, str] = {}
    algorithm, value = image.get("os_hash_algo"), image.get("os_hash_value")
    if algorithm and value:
        hashes[str(algorithm)] = str(value)
    elif image.get("checksum"):  # a Glance older than Rocky: MD5 only
        hashes["md5"] = str(image["checksum"])
    if image.get("size") is None or not hashes:
        raise exceptions.ImageInvalid(
            uuid=uuid, reason="Glance gives it no size or hash to verify its data by"
        )
    try:
        verify.Hasher(*hashes)
    except ValueError as error:
        raise exceptions.ImageInvalid(uuid=uuid, reason=str(error)) from None
    return Expected(size=int(image["size"]), hashes=hashes, signature=glance_signature(image))


def _glance_data(conf: Any, client: GlanceClient, image: dict[str, Any]) -> tuple[str, str]:
    """(path, sha256) of the image's verified data in the API's cache."""
    uuid = image["id"]
    if image.get("status") != "active":
        raise exceptions.ImageNotActive(uuid=uuid, status=image.get("status"))
    expected = glance_expected(image)
    catalogue.still_acceptable(conf, uuid, expected.signature)
    cache = GlanceCache(conf.images.cache_dir, conf.images.cache_size)

    def check(hasher: verify.Hasher) -> None:
        catalogue.verify_signature(conf, uuid, hasher, expected.signature)

    try:
        return cache.fetch(uuid, expected, lambda offset: client.data(uuid, offset=offset), check)
    except verify.Mismatch as error:
        raise exceptions.ImageInvalid(
            uuid=uuid, reason=f"its data from Glance does not match: {error}"
        ) from None


def _glance_ref(conf: Any, client: GlanceClient, image: dict[str, Any]) -> ImageRef:
    _, sha256 = _glance_data(conf, client, image)
    return ImageRef(
        uuid=image["id"],
        source=GLANCE,
        name=image.get("name") or "",
        format=_property(image, "format", "disk_format") or "",
        size=int(image["size"]),
        sha256=sha256,
        function_id=_property(image, *FUNCTION_PROPERTIES),
        interface_id=_property(image, "interface_id", "accel:interface_id"),
        vendor=_property(image, "vendor"),
        board=_property(image, "board"),
    )
