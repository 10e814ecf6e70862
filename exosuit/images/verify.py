"""Is this data the image it claims to be? Size and hashes, and a detached signature.

Pure: no HTTP, no database. The API uses it when it stores an image (a catalogue
upload, a Glance download into its cache) and the agent after it fetched one, so
that nothing reaches a device unverified (doc/programming.md, "Verification").

Data is hashed as it streams (``Hasher``: the size, SHA-256 always, and any other
hashlib algorithm asked for, such as Glance's ``os_hash_algo``), never held whole in
memory. A signature is checked against the digest computed on the way
(``cryptography``'s ``Prehashed``), so verifying it costs no second read::

    hasher = Hasher("sha512")
    for chunk in chunks:
        hasher.update(chunk)
    check(hasher, size=123, sha256="…", hashes={"sha512": "…"})      # or Mismatch
    verify_signature(hasher, signature, keys, require=True)           # or SignatureInvalid

Signature algorithms are named ``<scheme>-<hash>``: ``RSA-PSS-SHA256``,
``RSA-PKCS1v15-SHA384``, ``ECDSA-SHA512`` … (``SIGNATURE_ALGORITHMS``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, BinaryIO, TypeAlias

# cryptography (about 6 MB resident) is imported where a signature or a key is read:
# an agent that only hashes images never loads it.
if TYPE_CHECKING:
    from _typeshed import SupportsRead
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    PublicKey: TypeAlias = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

__all__ = [
    "CHUNK_SIZE",
    "SIGNATURE_ALGORITHMS",
    "Hasher",
    "Mismatch",
    "Signature",
    "SignatureInvalid",
    "TrustedKeys",
    "check",
    "hash_file",
    "hash_stream",
    "read_chunks",
    "required_hashes",
    "signature_algorithm",
    "verify_file",
    "verify_signature",
]

# What is read (and hashed) at a time: large enough to cost few system calls, small
# enough that a thousand concurrent downloads hold little memory.
CHUNK_SIZE = 1024 * 1024

_SCHEMES = ("RSA-PSS", "RSA-PKCS1v15", "ECDSA")
# The hashes of cryptography.hazmat.primitives.hashes a signature may be made with.
_SIGNATURE_HASHES = ("SHA256", "SHA384", "SHA512")
SIGNATURE_ALGORITHMS = tuple(f"{s}-{h}" for s in _SCHEMES for h in _SIGNATURE_HASHES)


class Mismatch(ValueError):
    """The data is not what was expected: its ``what`` (``size``, ``sha256``, …) is
    ``actual``, not ``expected``."""

    def __init__(self, what: str, expected: object, actual: object) -> None:
        self.what = what
        self.expected = expected
        self.actual = actual
        unit = " bytes" if what == "size" else ""
        super().__init__(f"its {what} is {actual}{unit}, not {expected}{unit}")


class SignatureInvalid(ValueError):
    """A signature that is required is missing, names a key that is not trusted, is
    malformed, or does not verify. The message completes "its signature …"."""


class Hasher:
    """The size and digests of data fed in chunks: SHA-256 always, plus ``algorithms``
    (hashlib names: ``sha512``, ``sha3_256``, ``md5`` …)."""

    def __init__(self, *algorithms: str) -> None:
        self.size = 0
        self._hashes: dict[str, hashlib._Hash] = {"sha256": hashlib.sha256()}
        for name in algorithms:
            name = _hash_name(name)
            if name not in self._hashes:
                self._hashes[name] = hashlib.new(name)

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        for digest in self._hashes.values():
            digest.update(chunk)

    @property
    def sha256(self) -> str:
        return self.hexdigest("sha256")

    def hexdigest(self, algorithm: str) -> str:
        """The hex digest by ``algorithm``; KeyError if it was not computed."""
        return self._hashes[_hash_name(algorithm)].hexdigest()

    def digest(self, algorithm: str) -> bytes:
        return self._hashes[_hash_name(algorithm)].digest()

    @property
    def algorithms(self) -> frozenset[str]:
        return frozenset(self._hashes)


def _hash_name(name: str) -> str:
    """hashlib's name of an algorithm (``SHA-512`` and ``sha512`` alike); ValueError for
    one hashlib does not have."""
    lowered = name.strip().lower()
    candidates = (lowered, lowered.replace("-", ""), lowered.replace("-", "_"))
    for candidate in candidates:
        if candidate in hashlib.algorithms_available:
            return candidate
    raise ValueError(f"unknown hash algorithm {name!r}")


def read_chunks(
    stream: SupportsRead[bytes], *, chunk_size: int = CHUNK_SIZE, limit: int | None = None
) -> Iterator[bytes]:
    """The chunks of ``stream`` until its end (or ``limit`` bytes)."""
    remaining = limit
    while remaining is None or remaining > 0:
        size = chunk_size if remaining is None else min(chunk_size, remaining)
        chunk = stream.read(size)
        if not chunk:
            return
        if remaining is not None:
            remaining -= len(chunk)
        yield chunk


def hash_stream(stream: BinaryIO, *algorithms: str, chunk_size: int = CHUNK_SIZE) -> Hasher:
    """Hash everything ``stream`` holds from where it is to its end."""
    hasher = Hasher(*algorithms)
    for chunk in read_chunks(stream, chunk_size=chunk_size):
        hasher.update(chunk)
    return hasher


def hash_file(path: str | os.PathLike[str], *algorithms: str) -> Hasher:
    with open(path, "rb") as stream:
        return hash_stream(stream, *algorithms)


def check(
    hasher: Hasher,
    *,
    size: int | None = None,
    sha256: str | None = None,
    hashes: Mapping[str, str] | None = None,
) -> None:
    """Mismatch unless the data hashed has ``size`` bytes and these digests (hex, any
    case); a value that is None is not checked."""
    if size is not None and hasher.size != size:
        raise Mismatch("size", size, hasher.size)
    expected = dict(hashes or {})
    if sha256 is not None:
        expected["sha256"] = sha256
    for algorithm, value in expected.items():
        actual = hasher.hexdigest(algorithm)
        if not hmac.compare_digest(actual, value.strip().lower()):
            raise Mismatch(_hash_name(algorithm), value, actual)


def verify_file(
    path: str | os.PathLike[str],
    *,
    size: int | None = None,
    sha256: str | None = None,
    hashes: Mapping[str, str] | None = None,
) -> Hasher:
    """Hash the file and check it (Mismatch); the hasher, for a signature check."""
    hasher = hash_file(path, *(hashes or {}))
    check(hasher, size=size, sha256=sha256, hashes=hashes)
    return hasher


# -- signatures -------------------------------------------------------------------------------


def signature_algorithm(name: str) -> str:
    """The canonical name (``RSA-PSS-SHA256``) of a signature algorithm written in any
    case, with or without the hash's dash (``rsa-pss-sha-256``); SignatureInvalid for
    one that is not supported."""
    upper = name.strip().upper().replace("SHA-", "SHA")
    for canonical in SIGNATURE_ALGORITHMS:
        if canonical.upper() == upper:
            return canonical
    raise SignatureInvalid(
        f"uses algorithm {name!r}, which is none of {', '.join(SIGNATURE_ALGORITHMS)}"
    )


@dataclasses.dataclass(frozen=True)
class Signature:
    """A detached signature of the image's data by the trusted key ``key_id``."""

    key_id: str
    value: bytes
    algorithm: str  # one of SIGNATURE_ALGORITHMS

    @classmethod
    def from_base64(cls, key_id: str, value: str, algorithm: str) -> Signature:
        """SignatureInvalid for a value that is not base64 or an unknown algorithm."""
        try:
            raw = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise SignatureInvalid("is not base64") from None
        if not raw:
            raise SignatureInvalid("is empty")
        return cls(key_id, raw, signature_algorithm(algorithm))

    @property
    def base64(self) -> str:
        return base64.b64encode(self.value).decode()


class TrustedKeys:
    """The public keys that may sign images, by key id (``[images] trusted_keys``)."""

    def __init__(self, keys: Mapping[str, PublicKey] | None = None) -> None:
        self._keys = dict(keys or {})

    @classmethod
    def load(cls, paths: Mapping[str, str]) -> TrustedKeys:
        """Read each PEM file (a public key or an X.509 certificate, RSA or EC);
        ValueError naming the key id and file for one that cannot be used."""
        from cryptography.exceptions import UnsupportedAlgorithm

        keys: dict[str, PublicKey] = {}
        for key_id, path in paths.items():
            try:
                with open(path, "rb") as f:
                    keys[key_id] = _public_key(f.read())
            except (OSError, ValueError, UnsupportedAlgorithm) as error:
                raise ValueError(f"trusted key {key_id!r} ({path}): {error}") from error
        return cls(keys)

    def get(self, key_id: str) -> PublicKey | None:
        return self._keys.get(key_id)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._keys))


def _public_key(pem: bytes) -> PublicKey:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key: object
    if b"-----BEGIN CERTIFICATE-----" in pem:
        key = x509.load_pem_x509_certificate(pem).public_key()
    else:
        key = serialization.load_pem_public_key(pem)
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise ValueError(f"a {type(key).__name__} key: only RSA and EC keys sign images")
    return key


def verify_signature(
    hasher: Hasher, signature: Signature | None, keys: TrustedKeys, *, require: bool
) -> bool:
    """Whether the data hashed by ``hasher`` carries a verified signature.

    True: ``signature`` verifies with the trusted key it names. False: there is no
    signature and none is required, or no key is trusted at all (nothing can be
    checked) and none is required. SignatureInvalid: a signature is required and
    missing; it names a key that is not trusted; it is not made with that key's
    kind (RSA, EC); or it does not verify.
    """
    if signature is None:
        if require:
            raise SignatureInvalid("is missing, and [images] require_signature is set")
        return False
    if not keys and not require:
        return False
    key = keys.get(signature.key_id)
    if key is None:
        trusted = ", ".join(keys) or "none"
        raise SignatureInvalid(
            f"names key {signature.key_id!r}, which is not trusted "
            f"([images] trusted_keys: {trusted})"
        )
    scheme, _, hash_name = signature.algorithm.rpartition("-")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

    algorithm: hashes.HashAlgorithm = getattr(hashes, hash_name)()
    digest = _digest_for(hasher, algorithm.name)
    try:
        if scheme == "ECDSA":
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise SignatureInvalid(f"is {scheme} but key {signature.key_id!r} is not EC")
            key.verify(signature.value, digest, ec.ECDSA(utils.Prehashed(algorithm)))
        else:
            if not isinstance(key, rsa.RSAPublicKey):
                raise SignatureInvalid(f"is {scheme} but key {signature.key_id!r} is not RSA")
            pad: padding.AsymmetricPadding
            if scheme == "RSA-PSS":
                # AUTO: any salt length (Glance's signers use the maximum, others the
                # digest's length).
                pad = padding.PSS(mgf=padding.MGF1(algorithm), salt_length=padding.PSS.AUTO)
            else:
                pad = padding.PKCS1v15()
            key.verify(signature.value, digest, pad, utils.Prehashed(algorithm))
    except InvalidSignature:
        raise SignatureInvalid(
            f"does not verify with key {signature.key_id!r} ({signature.algorithm})"
        ) from None
    return True


def _digest_for(hasher: Hasher, name: str) -> bytes:
    try:
        return hasher.digest(name)
    except KeyError:
        raise ValueError(
            f"the data was not hashed with {name}: make the Hasher with required_hashes(signature)"
        ) from None


def required_hashes(signature: Signature | None) -> tuple[str, ...]:
    """The hashlib algorithms a Hasher needs for ``signature`` (beyond SHA-256)."""
    if signature is None:
        return ()
    name = signature.algorithm.rpartition("-")[2].lower()
    return () if name == "sha256" else (name,)
