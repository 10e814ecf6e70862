"""``exosuit image upload|list|show|delete``: Exosuit's image catalogue (``/v2/images``,
API 2.6): bitstreams and the other files a driver loads onto a device."""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import os
import time
import uuid as uuidlib
from typing import Any, BinaryIO, TextIO

from cliff.lister import Lister

from exosuit.cli.base import (
    IMAGE,
    ApiCommand,
    Filter,
    ListCommand,
    Listed,
    ShowCommand,
    cells,
    segment,
)
from exosuit.cli.client import ApiClient, ApiError, CLIError
from exosuit.cli.progress import Progress

__all__ = ["ImageDelete", "ImageList", "ImageShow", "ImageUpload"]

NEEDS = "2.6"
VISIBILITIES = ("private", "shared", "public")
CHUNK_SIZE = 1024 * 1024
# Files at least this large show their upload's progress on a terminal.
PROGRESS_FROM = 4 * 1024 * 1024


def _is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return True


def get_image(api: ApiClient, ident: str) -> dict[str, Any]:
    """An image by UUID, or by name (exactly one image of the caller's may have it)."""
    if _is_uuid(ident):
        image: dict[str, Any] = api.get(f"/v2/images/{segment(ident)}")
        return image
    found = api.list("/v2/images", "images", {"name": ident})
    if not found:
        raise ApiError(404, f"Image {ident} could not be found.", "exosuit.image.not_found")
    if len(found) > 1:
        uuids = ", ".join(i["uuid"] for i in found)
        raise CLIError(f"several images are named {ident!r} ({uuids}): give a UUID")
    return found[0]


class ImageList(ListCommand):
    """List the images you see: your project's, public, shared with you (API 2.6)."""

    needs = NEEDS
    path = "/v2/images"
    key = "images"
    nothing = "No images."
    columns = ("uuid", "name", "format", "status", "size", "visibility", "function_id")
    long_columns = (
        "owner",
        "vendor",
        "board",
        "interface_id",
        "sha256",
        "signed",
        "signature_key_id",
        "created_at",
        "updated_at",
    )
    sort_keys = ("created_at", "name", "updated_at")
    filters = (
        Filter("--name", "name", "Only images of this name.", "NAME"),
        Filter("--image-format", "format", "Only images of this format (gbs, xclbin …).", "FORMAT"),
        Filter("--function-id", "function_id", "Only images of this function id.", "ID"),
        Filter("--vendor", "vendor", "Only images of this vendor.", "VENDOR"),
        Filter("--visibility", "visibility", "private, shared or public.", "VISIBILITY"),
        Filter("--status", "status", "queued (no data yet) or active.", "STATUS"),
    )


class ImageShow(ShowCommand):
    """Show one image (by name or UUID), every field (API 2.6)."""

    needs = NEEDS

    ids = {"image": IMAGE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("image", metavar="IMAGE", help="The image's name or UUID.")
        return parser

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        return get_image(self.api, parsed_args.image)


class ImageDelete(ApiCommand, Lister):
    """Delete an image (by name or UUID) and its data (API 2.6).

    Shows what was deleted; an image a program is loading is refused."""

    needs = NEEDS

    ids = {"image": IMAGE}

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("image", metavar="IMAGE", help="The image's name or UUID.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> Listed:
        image = get_image(self.api, parsed_args.image)
        self.api.delete(f"/v2/images/{segment(image['uuid'])}")
        columns = ("uuid", "name")
        return columns, [cells(image, columns, parsed_args.formatter)]


def read_signature(path: str) -> str:
    """The signature in ``path`` as base64: the file holds it raw (as ``openssl dgst
    -sign`` writes it) or already in base64."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise CLIError(f"cannot read the signature file: {error}") from None
    try:
        text = data.decode("ascii").strip()
        if text:
            base64.b64decode(text, validate=True)
            return "".join(text.split())
    except (UnicodeDecodeError, binascii.Error, ValueError):
        pass
    if not data:
        raise CLIError(f"the signature file {path} is empty")
    return base64.b64encode(data).decode()


def _hash(path: str) -> tuple[int, str]:
    """(size, SHA-256) of the file, read in chunks."""
    hasher, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK_SIZE):
                hasher.update(chunk)
                size += len(chunk)
    except OSError as error:
        raise CLIError(f"cannot read {path}: {error}") from None
    return size, hasher.hexdigest()


class _Reading:
    """The file being uploaded, showing how much was sent (on a terminal)."""

    def __init__(self, file: BinaryIO, size: int, name: str, stream: TextIO) -> None:
        self.file = file
        self.size = size
        self.name = name
        self.sent = 0
        self.progress = Progress(stream)
        self.show = self.progress.terminal and size >= PROGRESS_FROM
        self._shown_at = 0.0

    def read(self, size: int = -1) -> bytes:
        chunk = self.file.read(size)
        self.sent += len(chunk)
        now = time.monotonic()
        if self.show and (now - self._shown_at >= 0.1 or self.sent == self.size):
            self._shown_at = now
            percent = 100 * self.sent // max(self.size, 1)
            self.progress.show(
                f"uploading {self.name}: {percent}% ({_mib(self.sent)} of {_mib(self.size)} MiB)"
            )
        return chunk

    def done(self) -> None:
        if self.show:
            self.progress.clear()


def _mib(value: int) -> str:
    return f"{value / 1024 / 1024:.1f}"


class ImageUpload(ShowCommand):
    """Create an image from a file and upload its data (API 2.6).

    The file's SHA-256 is computed first and given at creation, so the API refuses
    data that is not the file's; with --signature-file the API verifies the signature
    with the trusted key --key-id names. A large upload shows its progress on a
    terminal. Shows the image, active. An upload that does not end (Ctrl-C, a refusal,
    a lost connection) deletes the image it created, and says so."""

    needs = NEEDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("file", metavar="FILE", help="The image's data (.gbs, .xclbin, …).")
        parser.add_argument("--name", required=True, help="The image's name.")
        # NOTE: not --format: cliff's output format option (-f/--format) has that name.
        parser.add_argument(
            "--image-format",
            required=True,
            metavar="FORMAT",
            help="What a driver loads it as: gbs, xclbin, simulated …",
        )
        parser.add_argument("--function-id", metavar="ID", help="The function (AFU) id it loads.")
        parser.add_argument("--interface-id", metavar="ID", help="The interface id it needs.")
        parser.add_argument("--vendor", help="The vendor of the devices it is for (0x8086 …).")
        parser.add_argument("--board", help="The board it is for.")
        parser.add_argument(
            "--visibility",
            choices=VISIBILITIES,
            help="private (default: your project), shared (with projects you name), public.",
        )
        parser.add_argument(
            "--signature-file",
            metavar="PATH",
            help="A detached signature of the file (raw or base64).",
        )
        parser.add_argument("--key-id", help="The trusted key the signature was made with.")
        parser.add_argument(
            "--algorithm",
            default="RSA-PSS-SHA256",
            help="The signature's algorithm: RSA-PSS, RSA-PKCS1v15 or ECDSA, with SHA256, "
            "SHA384 or SHA512 (default: RSA-PSS-SHA256).",
        )
        return parser

    def _body(self, parsed_args: argparse.Namespace, sha256: str) -> dict[str, Any]:
        body: dict[str, Any] = {"name": parsed_args.name, "format": parsed_args.image_format}
        for option in ("vendor", "board", "function_id", "interface_id", "visibility"):
            value = getattr(parsed_args, option)
            if value is not None:
                body[option] = value
        body["sha256"] = sha256
        if (parsed_args.signature_file is None) != (parsed_args.key_id is None):
            raise CLIError("--signature-file and --key-id go together")
        if parsed_args.signature_file is not None:
            body["signature"] = {
                "key_id": parsed_args.key_id,
                "value": read_signature(parsed_args.signature_file),
                "algorithm": parsed_args.algorithm,
            }
        return body

    def item(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        path = parsed_args.file
        if not os.path.isfile(path):
            raise CLIError(f"{path} is not a file")
        size, sha256 = _hash(path)
        api = self.api
        image = api.post("/v2/images", self._body(parsed_args, sha256))
        data_path = f"/v2/images/{segment(image['uuid'])}/file"
        # NOTE: an image without its data is of no use: whatever stops the upload
        # (Ctrl-C, a refusal, a lost connection, the file gone) deletes it again.
        try:
            with open(path, "rb") as file:
                reading = _Reading(file, size, parsed_args.name, self.app.stderr)
                try:
                    api.put_data(data_path, reading, size)
                finally:
                    reading.done()
        except KeyboardInterrupt:
            self.app.stderr.write(f"upload interrupted: {_discard(api, image)}\n")
            raise
        except CLIError as error:
            raise CLIError(f"{error}; {_discard(api, image)}") from None
        except OSError as error:
            raise CLIError(f"cannot read {path}: {error}; {_discard(api, image)}") from None
        shown: dict[str, Any] = api.get(f"/v2/images/{segment(image['uuid'])}")
        return shown


def _discard(api: Any, image: dict[str, Any]) -> str:
    """Delete an image whose upload did not end (best effort); what became of it."""
    uuid = image["uuid"]
    try:
        api.delete(f"/v2/images/{segment(uuid)}")
    except CLIError as error:
        return (
            f"image {uuid} was created without data and could not be deleted ({error}): "
            f"`exosuit image delete {uuid}`"
        )
    except KeyboardInterrupt:
        return f"image {uuid} was created without data: `exosuit image delete {uuid}`"
    return f"image {uuid} was deleted"
