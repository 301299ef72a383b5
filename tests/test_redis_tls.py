"""``rediss://`` with a password and an ACL user, against a real redis-server speaking TLS only,
on certificates this test makes (a CA of its own, a server certificate for 127.0.0.1)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlpace import StoreUnreachable, Throttler
from crawlpace.stores import reach

from .redis_server import RedisServer, redis_binary

pytestmark = pytest.mark.redis

PASSWORD = "tls-" + uuid.uuid4().hex


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, and a server certificate it signed for the IP address 127.0.0.1; PEM files in ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("crawlpace test CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, encipher_only=False,
                                       decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    files = {"ca": folder / "ca.pem", "cert": folder / "server.pem", "key": folder / "server.key"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, dict[str, Path]]]:
    """A redis-server with only a TLS port, a password, and an ACL user ``crawler``."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH (scripts/test installs one)")
    files = make_certificates(tmp_path_factory.mktemp("tls"))
    server = RedisServer(binary, tls=True, extra=(
        "--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
        "--tls-ca-cert-file", str(files["ca"]), "--tls-auth-clients", "no",
        "--requirepass", PASSWORD, "--user", "crawler", "on", f">{PASSWORD}x", "~*", "&*", "+@all"))
    try:
        server.start()
    except RuntimeError as exc:  # a redis-server built without TLS exits at once
        server.close()
        pytest.skip(f"this redis-server does not speak TLS ({exc})")
    try:
        yield server, files
    finally:
        server.close()


async def admit_twice(url: str) -> int:
    """Two requests through a throttler on ``url``; returns the sends the scope has counted in all."""
    settings = {"DOWNLOAD_DELAY": 0.2, "RANDOMIZE_DOWNLOAD_DELAY": False, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
    async with Throttler(settings, store=url) as throttler:
        await reach(throttler.store)
        for _ in range(2):
            async with throttler.slot("https://tls.example/") as permit:
                permit.feedback(status=200)
        stats = await throttler.scope_stats("tls.example")
    assert stats is not None
    return int(stats.sends)


TLSServer = tuple[RedisServer, dict[str, Path]]


async def test_rediss_with_a_password_and_an_acl_user(tls_server: TLSServer) -> None:
    server, files = tls_server
    base = f"127.0.0.1:{server.port}/0?ssl_ca_certs={files['ca']}&namespace=tls-{uuid.uuid4().hex[:6]}"
    assert await admit_twice(f"rediss://:{PASSWORD}@{base}") == 2
    # The ACL user reaches the same state: the scope now counts four sends.
    assert await admit_twice(f"rediss://crawler:{PASSWORD}x@{base}") == 4


async def test_tls_mistakes_are_named_at_start_up(tls_server: TLSServer) -> None:
    server, files = tls_server
    where = f"127.0.0.1:{server.port}/0"
    cases = [
        (f"rediss://:{PASSWORD}@{where}", "check the TLS options"),  # the system CAs do not know ours
        (f"redis://:{PASSWORD}@{where}", "check that the server runs"),  # plain text to a TLS port
        (f"rediss://crawler:wrong@{where}?ssl_ca_certs={files['ca']}", "check the user name and password"),
    ]
    for url, hint in cases:
        async with Throttler(store=url) as throttler:
            with pytest.raises(StoreUnreachable, match=hint) as caught:
                await reach(throttler.store, within=5.0)
        assert PASSWORD not in str(caught.value)
