"""Issue 11: TLS, mutual TLS and bearer-token authentication of the service.

Certificates are generated per test session (a throwaway CA, a server
certificate for 127.0.0.1 / localhost, a client certificate) with the
``cryptography`` package that grpcio's dependencies already bring.
"""

from __future__ import annotations

import datetime
import ipaddress

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rankmap.cli import main
from rankmap.client import AsyncRankmapClient, RankmapClient, RankmapRpcError
from rankmap.server.auth import TokenAuth, read_tokens
from rankmap.server.service import serve
from service_helpers import served, two_hosts

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def _cert(subject: str, issuer_key, issuer_name, key, *, ca: bool, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Paths of ca.pem, server.pem/server.key, client.pem/client.key, token."""
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("rankmap test CA", ca_key, None, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert("localhost", ca_key, ca.subject, server_key, ca=False,
                   sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("client", ca_key, ca.subject, client_key, ca=False)
    files = {
        "ca": ca.public_bytes(serialization.Encoding.PEM),
        "server_cert": server.public_bytes(serialization.Encoding.PEM),
        "server_key": _pem_key(server_key),
        "client_cert": client.public_bytes(serialization.Encoding.PEM),
        "client_key": _pem_key(client_key),
        "token": b"s3cret-token\nnext-token\n",
    }
    out = {}
    for name, data in files.items():
        p = d / name
        p.write_bytes(data)
        out[name] = str(p)
    return out


def assert_refused(address, **client_kwargs):
    """A client built with ``client_kwargs`` (3 s, no retries) cannot call: the handshake fails, UNAVAILABLE."""
    with RankmapClient(address, timeout=3, retries=0, **client_kwargs) as client:
        with pytest.raises(RankmapRpcError) as info:
            client.get_groups(8, tp=2)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE


def test_tls_server_and_client(pki):
    with served(workers=1, tls_cert=pki["server_cert"], tls_key=pki["server_key"]) as srv:
        assert srv.tls
        with RankmapClient(srv.address, tls_ca=pki["ca"], timeout=30) as client:
            assert client.health() == "SERVING"
            assert client.get_groups(8, tp=2)["TENSOR_MODEL_PARALLEL_GROUP"].shape == (4, 2)
        assert_refused(srv.address)  # plaintext against TLS


def test_mutual_tls_requires_a_client_certificate(pki):
    with served(workers=1, tls_cert=pki["server_cert"], tls_key=pki["server_key"],
                tls_client_ca=pki["ca"]) as srv:
        with RankmapClient(srv.address, tls_ca=pki["ca"], tls_cert=pki["client_cert"], tls_key=pki["client_key"],
                     timeout=30) as client:
            assert client.get_groups(8, tp=4)["TENSOR_MODEL_PARALLEL_GROUP"].shape == (2, 4)
        assert_refused(srv.address, tls_ca=pki["ca"])  # no client certificate


def test_bearer_token(pki):
    with served(workers=1, auth_tokens=read_tokens(pki["token"])) as srv:
        for kwargs in ({}, {"token": "wrong"}, {"token": "s3cret-token-and-more"}):
            with RankmapClient(srv.address, timeout=10, **kwargs) as client:
                with pytest.raises(RankmapRpcError) as info:
                    client.get_groups(8, tp=2)
                assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
                assert "Bearer" in info.value.details
                assert client.health() == "SERVING"  # probes need no token
        for kwargs in ({"token": "s3cret-token"}, {"token": "next-token"}, {"token_file": pki["token"]}):
            with RankmapClient(srv.address, timeout=30, **kwargs) as client:
                assert client.solve(two_hosts(), tp=2).status in ("OPTIMAL", "FEASIBLE")
        channel = grpc.insecure_channel(srv.address)
        try:
            refl = reflection_pb2_grpc.ServerReflectionStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                               timeout=10))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            channel.close()


def test_token_and_tls_through_the_async_client(pki):
    import asyncio

    with served(workers=1, tls_cert=pki["server_cert"], tls_key=pki["server_key"],
                auth_tokens=["tok"]) as srv:

        async def go():
            async with AsyncRankmapClient(srv.address, tls_ca=pki["ca"], token="tok", timeout=30) as client:
                groups = await client.get_groups(8, tp=2)
            async with AsyncRankmapClient(srv.address, tls_ca=pki["ca"], timeout=10) as client:
                with pytest.raises(RankmapRpcError) as info:
                    await client.get_groups(8, tp=2)
            return groups, info.value.code

        groups, code = asyncio.run(go())
        assert groups["TENSOR_MODEL_PARALLEL_GROUP"].shape == (4, 2)
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_cli_server_flags_tls_ca_and_token_file(pki, tmp_path, capsys):
    import json

    import networkx as nx

    with served(workers=1, tls_cert=pki["server_cert"], tls_key=pki["server_key"],
                auth_tokens=read_tokens(pki["token"])) as srv:
        cluster = tmp_path / "cluster.json"
        cluster.write_text(json.dumps(nx.node_link_data(two_hosts(), edges="links")))
        rc = main(["solve", str(cluster), "--tp", "2", "--server", srv.address,
                   "--tls-ca", pki["ca"], "--token-file", pki["token"]])
        out = capsys.readouterr()
        assert rc == 0, out.err
        assert json.loads(out.out)["status"] in ("OPTIMAL", "FEASIBLE")
        rc = main(["solve", str(cluster), "--tp", "2", "--server", srv.address, "--tls-ca", pki["ca"]])
        out = capsys.readouterr()
        assert rc == 1 and "UNAUTHENTICATED" in out.err and out.out == ""


def test_token_comparison():
    auth = TokenAuth(["abc"])
    assert auth.authorized([("authorization", "Bearer abc")])
    assert auth.authorized([("authorization", "bearer abc")])
    for md in ([], [("authorization", "Bearer abd")], [("authorization", "Basic abc")], [("authorization", "abc")],
               [("authorization", "Bearer ")], [("x", "Bearer abc")]):
        assert not auth.authorized(md), md


def test_serve_refuses_inconsistent_tls(pki, tmp_path):
    with pytest.raises(ValueError):
        serve(host="127.0.0.1", port=0, tls_cert=pki["server_cert"])
    with pytest.raises(ValueError):
        serve(host="127.0.0.1", port=0, tls_client_ca=pki["ca"])
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate")
    with pytest.raises(ValueError):
        serve(host="127.0.0.1", port=0, tls_cert=str(bogus), tls_key=pki["server_key"])
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(ValueError):
        read_tokens(empty)
