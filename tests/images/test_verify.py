"""exosuit.images.verify: sizes and hashes while streaming, detached signatures made here
with keys generated here (cryptography), every algorithm, and every way to be refused."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import NameOID

from exosuit.images import verify

DATA = os.urandom(3 * verify.CHUNK_SIZE + 17)  # several chunks, the last one short
_HASHES = {"SHA256": hashes.SHA256, "SHA384": hashes.SHA384, "SHA512": hashes.SHA512}


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP384R1())


def sign(key, algorithm: str, data: bytes = DATA, *, salt=padding.PSS.MAX_LENGTH) -> bytes:
    scheme, _, hash_name = algorithm.rpartition("-")
    chosen = _HASHES[hash_name]()
    if scheme == "ECDSA":
        return key.sign(data, ec.ECDSA(chosen))
    if scheme == "RSA-PSS":
        return key.sign(data, padding.PSS(mgf=padding.MGF1(chosen), salt_length=salt), chosen)
    return key.sign(data, padding.PKCS1v15(), chosen)


def pem(key) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def hashed(data: bytes = DATA, *algorithms: str) -> verify.Hasher:
    hasher = verify.Hasher(*algorithms)
    for chunk in verify.read_chunks(io.BytesIO(data)):
        hasher.update(chunk)
    return hasher


def keys_of(**keys) -> verify.TrustedKeys:
    return verify.TrustedKeys({name: key.public_key() for name, key in keys.items()})


# -- sizes and hashes -------------------------------------------------------------------------


def test_hasher_streams_size_and_sha256_and_other_algorithms():
    hasher = verify.hash_stream(io.BytesIO(DATA), "sha512", "SHA3-256", "md5")
    assert hasher.size == len(DATA)
    assert hasher.sha256 == hashlib.sha256(DATA).hexdigest()
    assert hasher.hexdigest("SHA-512") == hashlib.sha512(DATA).hexdigest()
    assert hasher.hexdigest("sha3_256") == hashlib.sha3_256(DATA).hexdigest()
    assert hasher.hexdigest("md5") == hashlib.md5(DATA).hexdigest()
    assert hasher.algorithms == {"sha256", "sha512", "sha3_256", "md5"}


def test_unknown_hash_algorithm_is_a_value_error():
    with pytest.raises(ValueError, match="unknown hash algorithm 'whirlpool-9'"):
        verify.Hasher("whirlpool-9")


def test_read_chunks_stops_at_the_limit():
    chunks = list(verify.read_chunks(io.BytesIO(DATA), chunk_size=1000, limit=2500))
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert b"".join(chunks) == DATA[:2500]


def test_check_accepts_the_right_size_and_digests_in_any_case():
    hasher = hashed(DATA, "sha512")
    verify.check(
        hasher,
        size=len(DATA),
        sha256=hashlib.sha256(DATA).hexdigest().upper(),
        hashes={"sha512": hashlib.sha512(DATA).hexdigest()},
    )
    verify.check(hasher)  # nothing expected, nothing checked


@pytest.mark.parametrize(
    ("expected", "what"),
    [
        ({"size": len(DATA) - 1}, "size"),
        ({"sha256": "0" * 64}, "sha256"),
        ({"hashes": {"sha512": "f" * 128}}, "sha512"),
    ],
    ids=["size", "sha256", "sha512"],
)
def test_check_names_what_does_not_match(expected, what):
    with pytest.raises(verify.Mismatch) as caught:
        verify.check(hashed(DATA, "sha512"), **expected)
    assert caught.value.what == what
    assert f"its {what} is " in str(caught.value)


def test_verify_file(tmp_path):
    path = tmp_path / "image.gbs"
    path.write_bytes(DATA)
    hasher = verify.verify_file(
        path, size=len(DATA), hashes={"sha512": hashlib.sha512(DATA).hexdigest()}
    )
    assert hasher.sha256 == hashlib.sha256(DATA).hexdigest()
    with pytest.raises(verify.Mismatch, match=f"its size is {len(DATA)} bytes, not 1 bytes"):
        verify.verify_file(path, size=1)


# -- signatures -------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", [a for a in verify.SIGNATURE_ALGORITHMS if "RSA" in a])
def test_rsa_signatures_verify(rsa_key, algorithm):
    signature = verify.Signature("k1", sign(rsa_key, algorithm), algorithm)
    hasher = hashed(DATA, *verify.required_hashes(signature))
    assert verify.verify_signature(hasher, signature, keys_of(k1=rsa_key), require=True)


@pytest.mark.parametrize("algorithm", [a for a in verify.SIGNATURE_ALGORITHMS if "ECDSA" in a])
def test_ecdsa_signatures_verify(ec_key, algorithm):
    signature = verify.Signature("k1", sign(ec_key, algorithm), algorithm)
    hasher = hashed(DATA, *verify.required_hashes(signature))
    assert verify.verify_signature(hasher, signature, keys_of(k1=ec_key), require=False)


def test_rsa_pss_with_a_digest_length_salt_verifies_too(rsa_key):
    value = sign(rsa_key, "RSA-PSS-SHA256", salt=padding.PSS.DIGEST_LENGTH)
    signature = verify.Signature("k1", value, "RSA-PSS-SHA256")
    assert verify.verify_signature(hashed(), signature, keys_of(k1=rsa_key), require=True)


def test_wrong_signature_is_refused(rsa_key):
    value = sign(rsa_key, "RSA-PSS-SHA256", DATA + b"x")  # a signature of other data
    signature = verify.Signature("k1", value, "RSA-PSS-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="does not verify with key 'k1'"):
        verify.verify_signature(hashed(), signature, keys_of(k1=rsa_key), require=False)


def test_signature_by_another_key_is_refused(rsa_key):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signature = verify.Signature("k1", sign(other, "RSA-PKCS1v15-SHA256"), "RSA-PKCS1v15-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="does not verify"):
        verify.verify_signature(hashed(), signature, keys_of(k1=rsa_key), require=True)


def test_unknown_key_is_refused(rsa_key):
    signature = verify.Signature("nobody", sign(rsa_key, "RSA-PSS-SHA256"), "RSA-PSS-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="names key 'nobody', which is not trusted"):
        verify.verify_signature(hashed(), signature, keys_of(k1=rsa_key), require=False)


def test_missing_signature_is_refused_when_required(rsa_key):
    with pytest.raises(verify.SignatureInvalid, match="is missing"):
        verify.verify_signature(hashed(), None, keys_of(k1=rsa_key), require=True)


def test_missing_signature_is_fine_when_not_required(rsa_key):
    assert verify.verify_signature(hashed(), None, keys_of(k1=rsa_key), require=False) is False


def test_nothing_is_checked_without_trusted_keys_unless_required(rsa_key):
    signature = verify.Signature("k1", b"not a signature", "RSA-PSS-SHA256")
    none = verify.TrustedKeys()
    assert verify.verify_signature(hashed(), signature, none, require=False) is False
    with pytest.raises(verify.SignatureInvalid, match="not trusted .*: none"):
        verify.verify_signature(hashed(), signature, none, require=True)


def test_scheme_and_key_kind_must_agree(rsa_key, ec_key):
    ecdsa = verify.Signature("k1", sign(ec_key, "ECDSA-SHA256"), "ECDSA-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="is ECDSA but key 'k1' is not EC"):
        verify.verify_signature(hashed(), ecdsa, keys_of(k1=rsa_key), require=True)
    pss = verify.Signature("k1", sign(rsa_key, "RSA-PSS-SHA256"), "RSA-PSS-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="is RSA-PSS but key 'k1' is not RSA"):
        verify.verify_signature(hashed(), pss, keys_of(k1=ec_key), require=True)


def test_a_hasher_without_the_signature_hash_is_a_programming_error(rsa_key):
    signature = verify.Signature("k1", sign(rsa_key, "RSA-PSS-SHA512"), "RSA-PSS-SHA512")
    with pytest.raises(ValueError, match="not hashed with sha512"):
        verify.verify_signature(hashed(), signature, keys_of(k1=rsa_key), require=True)


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("rsa-pss-sha256", "RSA-PSS-SHA256"),
        ("RSA-PKCS1v15-SHA-384", "RSA-PKCS1v15-SHA384"),
        ("ecdsa-sha-512", "ECDSA-SHA512"),
    ],
)
def test_algorithm_names_in_any_case(written, canonical):
    assert verify.signature_algorithm(written) == canonical


def test_unsupported_algorithm_and_bad_base64_are_refused():
    with pytest.raises(verify.SignatureInvalid, match="uses algorithm 'DSA-SHA256'"):
        verify.Signature.from_base64("k1", "AAAA", "DSA-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="is not base64"):
        verify.Signature.from_base64("k1", "not base64!", "RSA-PSS-SHA256")
    with pytest.raises(verify.SignatureInvalid, match="is empty"):
        verify.Signature.from_base64("k1", "", "RSA-PSS-SHA256")


def test_signature_from_base64_round_trips(rsa_key):
    value = sign(rsa_key, "RSA-PSS-SHA384")
    signature = verify.Signature.from_base64(
        "k1", base64.b64encode(value).decode(), "rsa-pss-sha384"
    )
    assert signature.value == value and signature.algorithm == "RSA-PSS-SHA384"
    assert base64.b64decode(signature.base64) == value
    assert verify.required_hashes(signature) == ("sha384",)
    assert verify.required_hashes(None) == ()


# -- trusted keys -----------------------------------------------------------------------------


def _certificate(key) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "exosuit images")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_trusted_keys_load_pem_public_keys_and_certificates(tmp_path, rsa_key, ec_key):
    (tmp_path / "rsa.pem").write_bytes(pem(rsa_key))
    (tmp_path / "ec.crt").write_bytes(_certificate(ec_key))
    keys = verify.TrustedKeys.load(
        {"rsa": str(tmp_path / "rsa.pem"), "ec": str(tmp_path / "ec.crt")}
    )
    assert list(keys) == ["ec", "rsa"] and "rsa" in keys and bool(keys)
    signature = verify.Signature("ec", sign(ec_key, "ECDSA-SHA256"), "ECDSA-SHA256")
    assert verify.verify_signature(hashed(), signature, keys, require=True)


def test_trusted_keys_refuse_unusable_files(tmp_path):
    with pytest.raises(ValueError, match=r"trusted key 'gone' \(.*missing.pem\)"):
        verify.TrustedKeys.load({"gone": str(tmp_path / "missing.pem")})
    (tmp_path / "junk.pem").write_bytes(b"not a key")
    with pytest.raises(ValueError, match="trusted key 'junk'"):
        verify.TrustedKeys.load({"junk": str(tmp_path / "junk.pem")})
    (tmp_path / "ed.pem").write_bytes(pem(ed25519.Ed25519PrivateKey.generate()))
    with pytest.raises(ValueError, match="only RSA and EC keys sign images"):
        verify.TrustedKeys.load({"ed": str(tmp_path / "ed.pem")})
