"""The serving certificate's reload (``dynamiccertificates``) and the TLS flags' parsing.

The reload tests write real PEM files, serve with them, and read the certificate a real TLS
client is shown: a rotation reaches new connections while open ones keep working, and a
half-written or mismatched pair never replaces a good one.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from ome_scheduler.serving import tls
from ome_scheduler.serving.endpoints import listen_socket
from ome_scheduler.serving.secure_serving import HttpsServer, Request, Response
from ome_scheduler.serving.tls import (
    DynamicServingCert,
    TLSPolicy,
    parse_cipher_suites,
    parse_min_version,
    self_signed_pem,
)


def write_pair(d: Path, host: str) -> tuple[bytes, bytes]:
    cert, key = self_signed_pem(host)
    (d / "tls.crt").write_bytes(cert)
    (d / "tls.key").write_bytes(key)
    return cert, key


def served_cn(ctx: ssl.SSLContext) -> str:
    """The common name a client sees when it handshakes with ``ctx`` (memory BIOs)."""
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.check_hostname = False
    cctx.verify_mode = ssl.CERT_NONE
    si, so, ci, co = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    s, c = ctx.wrap_bio(si, so, server_side=True), cctx.wrap_bio(ci, co, server_side=False)
    for _ in range(5):
        for side, bio_out, peer_in in ((c, co, si), (s, so, ci)):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
            peer_in.write(bio_out.read())
    der = c.getpeercert(binary_form=True)
    assert der is not None
    return _cn(der)


def _cn(der: bytes) -> str:
    name = x509.load_der_x509_certificate(der).subject
    return str(name.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value).split("@")[0]


def test_a_rotated_pair_is_served_and_a_broken_one_never_is(tmp_path: Path) -> None:
    write_pair(tmp_path, "first")
    certs = DynamicServingCert(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert certs.dynamic and certs.generation == 1 and served_cn(certs.context) == "first"
    assert certs.check() is False  # nothing changed

    write_pair(tmp_path, "second")
    assert certs.check() is True and served_cn(certs.context) == "second"

    # A rotation caught half-way: the new certificate with the old key does not load.
    cert3, key3 = self_signed_pem("third")
    (tmp_path / "tls.crt").write_bytes(cert3)
    assert certs.check() is False and served_cn(certs.context) == "second"
    (tmp_path / "tls.key").write_bytes(key3)
    assert certs.check() is True and served_cn(certs.context) == "third"

    (tmp_path / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n")
    assert certs.check() is False and served_cn(certs.context) == "third"
    (tmp_path / "tls.crt").unlink()
    assert certs.check() is False and served_cn(certs.context) == "third"
    assert certs.generation == 3


def test_a_secret_volume_style_symlink_swap_is_picked_up(tmp_path: Path) -> None:
    # kubelet updates a Secret volume by pointing the ..data symlink at a new directory.
    for name in ("v1", "v2"):
        (tmp_path / name).mkdir()
        write_pair(tmp_path / name, name)
    os.symlink("v1", tmp_path / "..data")
    for f in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{f}", tmp_path / f)
    certs = DynamicServingCert(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert served_cn(certs.context) == "v1"
    os.symlink("v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert certs.check() is True and served_cn(certs.context) == "v2"


def test_the_endpoint_serves_a_rotated_certificate_to_new_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "RELOAD_INTERVAL", 0.1)
    write_pair(tmp_path, "before")
    certs = DynamicServingCert(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))

    async def ok(req: Request) -> Response:
        return Response(200, "text/plain", b"ok")

    async def peer_cn(port: int) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        return _cn(w.get_extra_info("ssl_object").getpeercert(binary_form=True)), r, w

    async def main() -> None:
        sock = listen_socket("127.0.0.1", 0)
        port = sock.getsockname()[1]
        stop = asyncio.Event()
        srv = HttpsServer(ok, lambda: certs.context)
        tasks = [asyncio.create_task(srv.serve(sock, stop)), asyncio.create_task(certs.run(stop))]
        await asyncio.sleep(0.1)
        cn, r_old, w_old = await peer_cn(port)
        assert cn == "before"
        write_pair(tmp_path, "after")
        for _ in range(50):
            cn, _, w = await peer_cn(port)
            w.close()
            if cn == "after":
                break
            await asyncio.sleep(0.05)
        assert cn == "after"
        w_old.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # the old connection still works
        assert (await r_old.readline()).startswith(b"HTTP/1.1 200")
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)

    asyncio.run(main())


def test_without_files_a_self_signed_pair_is_kept_in_memory() -> None:
    certs = DynamicServingCert(None, None)
    assert not certs.dynamic and certs.check() is False
    assert served_cn(certs.context) == "localhost"


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        ("/nonexistent.pem", "/nonexistent.key", "--tls-cert-file /nonexistent.pem: no such file"),
        ("/etc/hostname", None, "must be given together"),
        ("/etc/hostname", "/etc/hostname", "are not a PEM certificate and its private key"),
    ],
)
def test_bad_files_name_the_flag(cert: str, key: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DynamicServingCert(cert, key)


def test_tls_flags_serve_only_modern_versions_and_aead_suites() -> None:
    assert parse_min_version(None) is ssl.TLSVersion.TLSv1_2
    assert parse_min_version("VersionTLS13") is ssl.TLSVersion.TLSv1_3
    with pytest.raises(ValueError, match='"--tls-min-version" flag: TLS 1.0 and 1.1 are not served'):
        parse_min_version("VersionTLS11")
    with pytest.raises(ValueError, match="supported values: VersionTLS12, VersionTLS13"):
        parse_min_version("TLS1.2")
    assert parse_cipher_suites(None) == (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
    assert parse_cipher_suites(
        ["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
    ) == ("ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-ECDSA-AES256-GCM-SHA384")
    for insecure in (
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",  # in Go's default list, CBC
        "TLS_RSA_WITH_AES_128_GCM_SHA256",  # RSA key exchange
        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
        "NOT_A_SUITE",
    ):
        with pytest.raises(ValueError, match=f'invalid argument "{insecure}" for "--tls-cipher-suites" flag'):
            parse_cipher_suites([insecure])
    with pytest.raises(ValueError, match="name at least one TLS 1.2 suite"):
        parse_cipher_suites(["TLS_AES_128_GCM_SHA256"])
    ctx = TLSPolicy.from_flags("VersionTLS12", ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]).context()
    names = {c["name"] for c in ctx.get_ciphers()}
    assert names == {
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    }
    assert all(c["aead"] for c in TLSPolicy().context().get_ciphers())
