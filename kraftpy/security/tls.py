"""TLS with Kafka's ``ssl.*`` keys, PEM form: building `ssl.SSLContext` objects, reloading them when
their files change, and naming the principal of a client certificate.

What is read, per listener (``listener.name.<listener>.ssl.*`` wins over ``ssl.*``):

* the key store — ``ssl.keystore.location`` (one PEM file: the private key and the certificate
  chain), or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` inline; ``ssl.key.password``
  decrypts an encrypted key. ``ssl.keystore.type`` must be PEM: JKS and PKCS12 are refused.
* the trust store — ``ssl.truststore.location`` or ``ssl.truststore.certificates`` (PEM CA
  certificates); a client without one trusts the system's CAs.
* ``ssl.client.auth`` (none, requested, required), ``ssl.enabled.protocols``, ``ssl.protocol``,
  ``ssl.cipher.suites`` (OpenSSL or IANA names, TLSv1.2 only: Python cannot choose TLSv1.3 suites),
  and on the client side ``ssl.endpoint.identification.algorithm`` (``https`` checks the host name).

A problem with any of it is a `TlsConfigError` naming the key, what it holds and why; the config
loader turns it into one configuration error line.

Reload: a `ServerTls` remembers the size, mtime and content digest of its files; `check_reload`
(run by `watch` every ``ssl.reload.check.interval.ms``) builds a new context when they changed, so
new connections get the new certificate while open ones keep theirs. A new file that does not load
is logged once and the old context stays.

The principal of a connection with a verified client certificate is Kafka's default one:
``User:`` + the subject's distinguished name as Java's ``X500Principal.getName()`` prints it (RFC
2253: the most specific attribute first, ``CN=alice,OU=eng,O=acme``).
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from kraftpy.fatal import describe_os_error

ANONYMOUS = "User:ANONYMOUS"

#: Kafka's security protocols that run over TLS.
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})

#: The ssl.* keys a listener reads (each may be prefixed by listener.name.<listener>.).
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
)

#: Keys whose values are secrets or whole PEM blocks: never printed.
HIDDEN_KEYS = frozenset({"ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                         "ssl.truststore.certificates"})

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """A TLS setting kraftpy cannot use: ``key`` (as set, maybe listener-prefixed) and why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@attrs.frozen
class TlsSettings:
    """The ssl.* values of one listener (or one client), and the key each came from."""

    keystore_type: str = "PEM"
    keystore_location: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    key_password: str | None = None
    truststore_type: str = "PEM"
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    protocol: str = "TLSv1.3"
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str = "https"
    #: The listener these are for (None: a client's own settings), for log lines.
    listener: str | None = None
    #: ssl.* key -> the key it was read from (``listener.name.ssl.ssl.keystore.location``).
    keys: Mapping[str, str] = attrs.field(factory=dict)

    def key(self, name: str) -> str:
        return self.keys.get(name, name)

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain or self.keystore_key)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)

    def files(self) -> tuple[str, ...]:
        return tuple(p for p in (self.keystore_location, self.truststore_location) if p)


def _listify(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return tuple(value)


def settings_from_values(get: Callable[[str], Any], key_of: Callable[[str], str] = lambda k: k,
                         listener: str | None = None) -> TlsSettings:
    """Settings from a lookup of ssl.* keys (None or absent: the default)."""
    defaults = TlsSettings()

    def value(name: str, default: Any) -> Any:
        v = get(name)
        return default if v is None else v

    return TlsSettings(
        keystore_type=str(value("ssl.keystore.type", defaults.keystore_type)).upper(),
        keystore_location=get("ssl.keystore.location") or None,
        keystore_certificate_chain=get("ssl.keystore.certificate.chain") or None,
        keystore_key=get("ssl.keystore.key") or None,
        key_password=get("ssl.key.password") or None,
        truststore_type=str(value("ssl.truststore.type", defaults.truststore_type)).upper(),
        truststore_location=get("ssl.truststore.location") or None,
        truststore_certificates=get("ssl.truststore.certificates") or None,
        client_auth=str(value("ssl.client.auth", defaults.client_auth)).lower(),
        enabled_protocols=_listify(value("ssl.enabled.protocols", defaults.enabled_protocols)),
        protocol=str(value("ssl.protocol", defaults.protocol)),
        cipher_suites=_listify(get("ssl.cipher.suites")),
        endpoint_identification_algorithm=str(value("ssl.endpoint.identification.algorithm",
                                                    defaults.endpoint_identification_algorithm)).strip().lower(),
        listener=listener,
        keys={name: key_of(name) for name in SSL_KEYS},
    )


def listener_settings(config: Any, listener: str) -> TlsSettings:
    """The TLS settings of ``listener`` in a validated `KraftConfig` (per-listener keys first). As in
    Kafka (KIP-684), a SASL_SSL listener asks for client certificates only when its own
    ``listener.name.<listener>.ssl.client.auth`` says so: SASL authenticates its clients."""
    settings = settings_from_values(lambda k: config.listener_value(listener, k),
                                    lambda k: config.listener_key(listener, k), listener=listener)
    if config.security_protocol(listener) == "SASL_SSL" and settings.key("ssl.client.auth") == "ssl.client.auth":
        settings = attrs.evolve(settings, client_auth="none")
    return settings


def client_settings(properties: Mapping[str, str]) -> TlsSettings:
    """The TLS settings of a client's properties (``--command-config``: plain ssl.* keys)."""
    return settings_from_values(lambda k: properties.get(k))


# -- building contexts -----------------------------------------------------------------------------


def _check_types(s: TlsSettings) -> None:
    for name, value in (("ssl.keystore.type", s.keystore_type), ("ssl.truststore.type", s.truststore_type)):
        if value != "PEM":
            raise TlsConfigError(s.key(name), f"{value} stores are not supported; kraftpy reads PEM "
                                 "(convert with openssl pkcs12 -nodes, or keytool -exportcert -rfc)")


def _versions(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    enabled = [v for v in s.enabled_protocols]
    unknown = [v for v in enabled if v not in _VERSIONS]
    if unknown or not enabled:
        raise TlsConfigError(s.key("ssl.enabled.protocols"),
                             f"{','.join(enabled) or '(empty)'}: only TLSv1.2 and TLSv1.3 are supported")
    if s.protocol not in ("TLS", *_VERSIONS):
        raise TlsConfigError(s.key("ssl.protocol"), f"{s.protocol} is not TLS, TLSv1.2 or TLSv1.3")
    versions = sorted(_VERSIONS[v] for v in enabled)
    highest = versions[-1]
    if s.protocol in _VERSIONS:
        highest = min(highest, _VERSIONS[s.protocol])
    if highest < versions[0]:
        raise TlsConfigError(s.key("ssl.protocol"), f"{s.protocol} is below every version in ssl.enabled.protocols")
    ctx.minimum_version = versions[0]
    ctx.maximum_version = highest


def openssl_cipher_name(name: str) -> str:
    """An IANA suite name (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) as OpenSSL names it
    (ECDHE-RSA-AES128-GCM-SHA256); an OpenSSL name as it is."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    rest = rest.replace("AES_128_", "AES128_").replace("AES_256_", "AES256_").replace("_CBC", "")
    parts = [] if kx == "RSA" else [kx.replace("_", "-")]
    return "-".join([*parts, rest.replace("_", "-")])


def _ciphers(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if not s.cipher_suites:
        return
    tls12 = [openssl_cipher_name(n) for n in s.cipher_suites if not n.startswith(("TLS_AES_", "TLS_CHACHA20_"))]
    if not tls12:
        return  # TLSv1.3 suites only: OpenSSL's TLSv1.3 suites stay (Python cannot narrow them)
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise TlsConfigError(s.key("ssl.cipher.suites"),
                             f"{','.join(s.cipher_suites)}: no cipher suite OpenSSL knows") from None


def _read_error(key: str, path: str, exc: OSError) -> TlsConfigError:
    return TlsConfigError(key, f"{path}: cannot read: {describe_os_error(exc)}")


def _ssl_reason(exc: ssl.SSLError) -> str:
    return exc.reason or str(exc)


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    password = s.key_password
    if s.keystore_location:
        key = s.key("ssl.keystore.location")
        path = s.keystore_location
        try:
            with open(path, "rb"):
                pass
            ctx.load_cert_chain(path, password=_password(password))
        except ssl.SSLError as exc:
            raise TlsConfigError(key, f"{path}: not a PEM private key and certificate chain that load "
                                 f"({_ssl_reason(exc)})") from None
        except OSError as exc:
            raise _read_error(key, path, exc) from None
        return
    chain, private_key = s.keystore_certificate_chain, s.keystore_key
    if not chain or not private_key:
        missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
        raise TlsConfigError(s.key(missing), "an inline key store needs both ssl.keystore.certificate.chain "
                             "and ssl.keystore.key")
    with tempfile.TemporaryDirectory(prefix="kraftpy-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(private_key.strip() + "\n" + chain.strip() + "\n")
        try:
            ctx.load_cert_chain(path, password=_password(password))
        except ssl.SSLError as exc:
            raise TlsConfigError(s.key("ssl.keystore.key"), "the inline key and certificate chain do not load "
                                 f"({_ssl_reason(exc)})") from None


def _password(password: str | None) -> Callable[[], bytes]:
    # A callable, so that an encrypted key without a password fails instead of prompting on a terminal.
    return lambda: (password or "").encode()


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if s.truststore_location:
        key, path = s.key("ssl.truststore.location"), s.truststore_location
        try:
            with open(path, "rb"):
                pass
            ctx.load_verify_locations(cafile=path)
        except ssl.SSLError as exc:
            raise TlsConfigError(key, f"{path}: not PEM CA certificates ({_ssl_reason(exc)})") from None
        except OSError as exc:
            raise _read_error(key, path, exc) from None
    elif s.truststore_certificates:
        try:
            ctx.load_verify_locations(cadata=s.truststore_certificates)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(s.key("ssl.truststore.certificates"),
                                 f"not PEM CA certificates ({exc})") from None


def server_context(s: TlsSettings) -> ssl.SSLContext:
    """The context of a TLS listener."""
    _check_types(s)
    if s.client_auth not in ("none", "requested", "required"):
        raise TlsConfigError(s.key("ssl.client.auth"), f"{s.client_auth} is not none, requested or required")
    if not s.has_keystore:
        raise TlsConfigError(s.key("ssl.keystore.location"),
                             f"listener {s.listener} uses TLS and needs a key store (ssl.keystore.location, or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, s)
    _ciphers(ctx, s)
    _load_keystore(ctx, s)
    if s.client_auth == "none":
        ctx.verify_mode = ssl.CERT_NONE
    else:
        if not s.has_truststore:
            raise TlsConfigError(s.key("ssl.truststore.location"),
                                 f"ssl.client.auth={s.client_auth} needs a trust store to verify client certificates")
        _load_truststore(ctx, s)
        ctx.verify_mode = ssl.CERT_REQUIRED if s.client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def client_context(s: TlsSettings) -> ssl.SSLContext:
    """The context of a client connecting to a TLS listener (its own certificate when it has one)."""
    _check_types(s)
    algorithm = s.endpoint_identification_algorithm
    if algorithm not in ("", "https"):
        raise TlsConfigError(s.key("ssl.endpoint.identification.algorithm"), f"{algorithm} is not https or empty")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, s)
    _ciphers(ctx, s)
    if s.has_truststore:
        _load_truststore(ctx, s)
    else:
        ctx.load_default_certs()
    if s.has_keystore:
        _load_keystore(ctx, s)
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


# -- certificates: subject, expiry, principal ---------------------------------------------------------

#: RFC 2253 keywords of the attribute names Python's ssl module uses; Java prints others by OID.
_RFC2253 = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12",
    "surname": "2.5.4.4", "givenName": "2.5.4.42", "initials": "2.5.4.43", "generationQualifier": "2.5.4.44",
    "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65", "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _ia5_hex(value: str) -> str:
    """Java prints an attribute it has no keyword for as OID=#<DER hex> (IA5String for e-mail)."""
    data = value.encode()
    if len(data) < 128:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    tag = 0x16 if value.isascii() else 0x0C
    return "#" + (bytes([tag]) + length + data).hex()


def distinguished_name(subject: Any) -> str:
    """The subject of ``SSLObject.getpeercert()`` as RFC 2253 prints it, most specific RDN first."""
    rdns = []
    for rdn in reversed(subject or ()):
        atoms = []
        for name, value in rdn:
            if name in _RFC2253:
                atoms.append(f"{_RFC2253[name]}={_escape(value)}")
            else:
                atoms.append(f"{_OIDS.get(name, name)}={_ia5_hex(value)}")
        rdns.append("+".join(atoms))
    return ",".join(rdns)


def peer_principal(ssl_object: ssl.SSLObject | None) -> str:
    """``User:<subject DN>`` of a verified peer certificate, else ``User:ANONYMOUS``."""
    if ssl_object is None:
        return ANONYMOUS
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return ANONYMOUS
    if not cert:  # none given, or not verified (ssl.client.auth=none)
        return ANONYMOUS
    return "User:" + distinguished_name(cert.get("subject"))


def _ssl_attribute_names() -> dict[Any, str]:
    """cryptography's name OIDs -> the attribute names ``getpeercert()`` uses (OpenSSL's long names)."""
    from cryptography.x509.oid import NameOID

    return {
        NameOID.COMMON_NAME: "commonName", NameOID.COUNTRY_NAME: "countryName",
        NameOID.LOCALITY_NAME: "localityName", NameOID.STATE_OR_PROVINCE_NAME: "stateOrProvinceName",
        NameOID.ORGANIZATION_NAME: "organizationName", NameOID.ORGANIZATIONAL_UNIT_NAME: "organizationalUnitName",
        NameOID.STREET_ADDRESS: "streetAddress", NameOID.DOMAIN_COMPONENT: "domainComponent",
        NameOID.USER_ID: "userId", NameOID.EMAIL_ADDRESS: "emailAddress", NameOID.SERIAL_NUMBER: "serialNumber",
        NameOID.TITLE: "title", NameOID.SURNAME: "surname", NameOID.GIVEN_NAME: "givenName",
        NameOID.INITIALS: "initials", NameOID.GENERATION_QUALIFIER: "generationQualifier",
        NameOID.DN_QUALIFIER: "dnQualifier", NameOID.PSEUDONYM: "pseudonym",
        NameOID.BUSINESS_CATEGORY: "businessCategory", NameOID.POSTAL_CODE: "postalCode",
    }


def describe_certificate(pem_path: str) -> dict[str, str]:
    """Subject (as ``distinguished_name`` prints a peer's) and expiry (ISO 8601, UTC) of the first
    certificate in a PEM file, for log lines; empty if there is none or it cannot be read."""
    from cryptography import x509

    try:
        with open(pem_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):
        return {}
    names = _ssl_attribute_names()
    subject = tuple(
        tuple((names.get(attr.oid, attr.oid.dotted_string), str(attr.value)) for attr in rdn)
        for rdn in cert.subject.rdns)
    return {"subject": distinguished_name(subject), "not_after": cert.not_valid_after_utc.isoformat()}


def _keystore_description(s: TlsSettings) -> dict[str, str]:
    if s.keystore_location:
        return describe_certificate(s.keystore_location)
    if s.keystore_certificate_chain:
        with tempfile.TemporaryDirectory(prefix="kraftpy-tls-") as tmp:
            path = os.path.join(tmp, "chain.pem")
            Path(path).write_text(s.keystore_certificate_chain)
            return describe_certificate(path)
    return {}


# -- reloading -------------------------------------------------------------------------------------------


def _stamp(paths: tuple[str, ...]) -> tuple:
    """What tells a changed file: size, mtime and a digest of the content, for each path."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out.append((path, st.st_size, st.st_mtime_ns, digest))
        except OSError as exc:
            out.append((path, "error", exc.errno))
    return tuple(out)


class _Reloadable:
    """A context built from files, rebuilt by `check_reload` when they change."""

    #: "server" (a listener's side) or "client" (connections this process opens), for log lines.
    side = ""

    def __init__(self, settings: TlsSettings, build: Callable[[TlsSettings], ssl.SSLContext]) -> None:
        self.settings = settings
        self._build = build
        self.context = build(settings)
        self._stamp = _stamp(settings.files())
        #: Times the context was rebuilt from changed files.
        self.reloads = 0
        #: Set (and replaced) each time `watch` put a new context in use.
        self.reloaded = trio.Event()

    def check_reload(self, log: Any = None) -> bool:
        """Rebuild the context if its files changed (blocking: run it in a worker thread). True when
        a new context is in use; a broken new file is logged once and the old context kept."""
        stamp = _stamp(self.settings.files())
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            context = self._build(self.settings)
        except TlsConfigError as exc:
            if log is not None:
                log.error("ssl certificates not reloaded, keeping the old ones", listener=self.settings.listener,
                          side=self.side, key=exc.key, reason=exc.reason)
            return False
        self.context = context
        self.reloads += 1
        if log is not None:
            log.info("ssl certificates reloaded", listener=self.settings.listener, side=self.side,
                     **_keystore_description(self.settings))
        return True

    async def watch(self, interval_s: float, log: Any, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Check the files every ``interval_s`` seconds until cancelled."""
        task_status.started()
        if not self.settings.files():
            return
        while True:
            await trio.sleep(interval_s)
            if await trio.to_thread.run_sync(self.check_reload, log):
                event, self.reloaded = self.reloaded, trio.Event()
                event.set()


class ServerTls(_Reloadable):
    """The TLS side of a listener: `wrap` gives an accepted stream's TLS stream (handshake not yet done)."""

    side = "server"

    def __init__(self, settings: TlsSettings) -> None:
        super().__init__(settings, server_context)

    def wrap(self, stream: trio.abc.Stream) -> trio.SSLStream:
        # https_compatible: close without waiting to send a close_notify (a peer that reads nothing
        # would hold a shielded close forever); Kafka's frames carry their own lengths, so a cut
        # stream is noticed without one.
        return trio.SSLStream(stream, self.context, server_side=True, https_compatible=True)

    def describe(self) -> dict[str, str]:
        return _keystore_description(self.settings)


class ClientTls(_Reloadable):
    """The TLS side of connections this process opens to a TLS listener."""

    side = "client"

    def __init__(self, settings: TlsSettings) -> None:
        super().__init__(settings, client_context)

    async def connect(self, stream: trio.abc.Stream, host: str) -> trio.SSLStream:
        """Wrap ``stream`` and do the handshake (checking ``host`` when endpoint identification is on);
        raises `trio.BrokenResourceError` when it fails."""
        ssl_stream = trio.SSLStream(stream, self.context, server_hostname=host or None, https_compatible=True)
        await ssl_stream.do_handshake()
        return ssl_stream


def handshake_failure(exc: BaseException) -> str:
    """One line saying why a TLS handshake failed."""
    cause = exc.__cause__ or exc.__context__ or exc
    if isinstance(cause, ssl.SSLCertVerificationError) and cause.verify_message:
        return f"{cause.reason or 'CERTIFICATE_VERIFY_FAILED'}: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        return cause.reason or str(cause)
    return str(cause) or type(cause).__name__


def listener_tls(config: Any, listener: str) -> ServerTls | None:
    """The `ServerTls` of a listener of ``config`` if its protocol runs over TLS (raises TlsConfigError)."""
    if config.security_protocol(listener) not in TLS_PROTOCOLS:
        return None
    return ServerTls(listener_settings(config, listener))


def connecting_tls(config: Any, listener: str) -> ClientTls | None:
    """The `ClientTls` this process uses to connect to ``listener`` of its peers (the inter-broker or
    the controller listener), if that listener runs over TLS."""
    if config.security_protocol(listener) not in TLS_PROTOCOLS:
        return None
    return ClientTls(listener_settings(config, listener))
