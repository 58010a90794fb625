"""TLS of the workshop hub: beyond loopback it serves HTTPS (given or self-signed) or refuses plain HTTP."""

from __future__ import annotations

import subprocess

import pytest
from labsource import REPO
from test_hub import hub_config

from rocmlab.course.course import Course
from rocmlab.errors import InputError
from rocmlab.hub import LocalHub, tls

ROOT_LABS = ("01",)


@pytest.mark.parametrize(
    "ip, loopback",
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("", False), ("0.0.0.0", False), ("10.0.0.5", False)],
)
def test_loopback_addresses(ip, loopback):
    assert tls.is_loopback(ip) is loopback


def test_beyond_loopback_the_hub_makes_a_self_signed_certificate_once(tmp_path):
    cert, key = tls.choose("", tmp_path, None, None, insecure_http=False)
    assert cert.endswith(tls.CERT_NAME) and (tmp_path / "tls" / tls.KEY_NAME).stat().st_mode & 0o077 == 0
    assert tls.choose("0.0.0.0", tmp_path, None, None, insecure_http=False) == (cert, key)  # reused
    shown = subprocess.run(
        ["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", cert],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.strip().split("=", 1)[1] == tls.fingerprint(cert)
    names = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", cert], capture_output=True, text=True, check=True
    ).stdout
    assert "IP Address:127.0.0.1" in names and "DNS:localhost" in names


def test_loopback_or_insecure_http_serve_plain_http(tmp_path):
    assert tls.choose("127.0.0.1", tmp_path, None, None, insecure_http=False) == ("", "")
    assert tls.choose("", tmp_path, None, None, insecure_http=True) == ("", "")
    assert not (tmp_path / "tls").exists()


def test_a_given_certificate_is_used_and_checked(tmp_path):
    cert, key = tls.self_signed(tmp_path / "mine")
    assert tls.choose("", tmp_path, cert, key, insecure_http=True) == (cert, key)  # the pair wins
    with pytest.raises(InputError, match="go together"):
        tls.choose("", tmp_path, cert, None, insecure_http=False)
    with pytest.raises(InputError, match="no such file"):
        tls.choose("", tmp_path, cert, str(tmp_path / "missing.pem"), insecure_http=False)


def test_the_config_refuses_plain_http_beyond_loopback(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="reaches beyond this machine"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_IP="")
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_IP="", ROCMLAB_HUB_INSECURE_HTTP=1)
    assert c.JupyterHub.bind_url == "http://:443"


def test_the_config_serves_https_with_the_pair(monkeypatch, tmp_path):
    cert, key = tls.self_signed(tmp_path / "tls")
    c = hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_IP="", ROCMLAB_HUB_SSL_CERT=cert, ROCMLAB_HUB_SSL_KEY=key)
    assert c.JupyterHub.bind_url == "https://:443"
    assert (c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key) == (cert, key)
    with pytest.raises(ValueError, match="go together"):
        hub_config(monkeypatch, tmp_path, ROCMLAB_HUB_SSL_CERT=cert, ROCMLAB_HUB_SSL_KEY="")


def test_a_server_hub_on_every_address_is_https_and_names_its_fingerprint(tmp_path):
    hub = LocalHub(tmp_path / "hub", demo=False, ip="", labs=ROOT_LABS, course=Course(REPO))
    assert hub.url.startswith("https://127.0.0.1:") and hub.public_url.startswith("https://")
    assert not (tmp_path / "hub").exists()  # nothing written before start (which checks root first)
    hub.prepare_tls()
    assert hub.tls_fingerprint == tls.fingerprint(hub.tls_cert)
    plain = LocalHub(tmp_path / "plain", demo=False, ip="", labs=ROOT_LABS, insecure_http=True, course=Course(REPO))
    assert plain.url.startswith("http://") and not plain.tls_fingerprint


def test_the_command_prints_the_fingerprint_and_warns_on_plain_http(tmp_path, capsys):
    from rocmlab.hub import command

    hub = LocalHub(tmp_path / "hub", demo=False, ip="", labs=ROOT_LABS, course=Course(REPO))
    hub.prepare_tls()
    command._say_ready(hub)
    assert f"SHA-256 fingerprint {hub.tls_fingerprint}" in capsys.readouterr().out
    command._say_ready(
        LocalHub(tmp_path / "plain", demo=False, ip="", labs=ROOT_LABS, insecure_http=True, course=Course(REPO))
    )
    assert "passwords cross the network in clear" in capsys.readouterr().err
