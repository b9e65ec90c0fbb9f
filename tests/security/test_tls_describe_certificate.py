"""describe_certificate (the subject and expiry a certificate reload logs) reads the certificate with the
cryptography package: the first certificate of a key store PEM (key first, then the chain), its subject
printed as a peer's principal is (RFC 2253, most specific first, Java's OID form for e-mail), its expiry
in ISO 8601 UTC; nothing for a file without a readable certificate."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kraftpy.security.tls import describe_certificate, distinguished_name
from tests.security.tls_support import Pki

NOT_AFTER = datetime.datetime(2031, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)


def test_subject_and_expiry_of_a_key_store_with_an_unusual_subject(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc.")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                                        x509.NameAttribute(NameOID.USER_ID, "u7")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "ops@acme.example")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "broker-1")]),
    ])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(7).not_valid_before(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC))
            .not_valid_after(NOT_AFTER).sign(key, hashes.SHA256()))
    path = tmp_path / "store.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
                     + cert.public_bytes(serialization.Encoding.PEM))
    described = describe_certificate(str(path))
    assert described == {
        "subject": "CN=broker-1,1.2.840.113549.1.9.1=#16106f70734061636d652e6578616d706c65,OU=eng+UID=u7,"
                   "O=Acme\\, Inc.,C=DE",
        "not_after": "2031-05-06T07:08:09+00:00",
    }


def test_the_subject_is_the_principal_a_peer_with_that_certificate_gets(tmp_path):
    pki = Pki(tmp_path)
    store = pki.issue("client", "client.example", common_name="alice", organization_unit_name="ops")
    described = describe_certificate(str(store))
    assert described["subject"] == "CN=alice,OU=ops,O=acme"
    assert datetime.datetime.fromisoformat(described["not_after"]) > datetime.datetime.now(datetime.UTC)
    # The subject as the ssl module shows a peer's (what peer_principal names).
    peer_subject = ((("organizationName", "acme"),), (("organizationalUnitName", "ops"),),
                    (("commonName", "alice"),))
    assert distinguished_name(peer_subject) == described["subject"]


def test_a_file_without_a_readable_certificate_describes_nothing(tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\ntruncated\n-----END CERTIFICATE-----\n")
    assert describe_certificate(str(garbage)) == {}
    assert describe_certificate(str(tmp_path / "missing.pem")) == {}
