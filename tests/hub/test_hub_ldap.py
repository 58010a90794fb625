"""LDAP sign-on against a real directory (issue 52): Debian's slapd, started by the test on
loopback with the fixture directory below (users under ou=people, groupOfNames groups under
ou=groups: the layout of an OpenLDAP or FreeIPA university directory; slapd.conf(5),
https://www.openldap.org/doc/admin25/slapdconfig.html), and the hub's authenticator
(``ROCMLAB_HUB_AUTH=ldap`` through ``rocmlab.hub.auth.configure``: ldapauthenticator binding as
the user, looking the user up in each group). A learner and an instructor sign in with the right
role, an outsider and a wrong password are refused, and the roster lets its people in.

Costs about 1 s: slapadd loads the directory offline, slapd answers in well under a second.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from traitlets.config import Config

pytestmark = [pytest.mark.slow]
pytest.importorskip("ldapauthenticator", reason="ldapauthenticator is not installed (hub extra)")

from rocmlab.hub.settings import LEARNERS_HUB_GROUP  # noqa: E402

SUFFIX = "dc=uni,dc=example,dc=edu"
LEARNERS, STAFF = f"cn=gpu-course,ou=groups,{SUFFIX}", f"cn=gpu-course-staff,ou=groups,{SUFFIX}"
PASSWORDS = {"ada": "ada-pass-1", "li": "li-pass-1", "eve": "eve-pass-1", "dee": "dee-pass-1"}
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


def person(uid: str, number: int) -> str:
    return (
        f"dn: uid={uid},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        f"uid: {uid}\ncn: {uid}\nsn: {uid}\nuidNumber: {20000 + number}\ngidNumber: 20000\n"
        f"homeDirectory: /home/{uid}\nuserPassword: {PASSWORDS[uid]}\n"
    )


def group(dn: str, *uids: str) -> str:
    cn = dn.split(",")[0].split("=")[1]
    members = "".join(f"member: uid={uid},ou=people,{SUFFIX}\n" for uid in uids)
    return f"dn: {dn}\nobjectClass: groupOfNames\ncn: {cn}\n{members}"


DIRECTORY = "\n".join(
    [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: University\ndc: uni\n",
        f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n",
        *(person(uid, n) for n, uid in enumerate(PASSWORDS)),
        group(LEARNERS, "ada"),
        group(STAFF, "li"),
        group(f"cn=another-course,ou=groups,{SUFFIX}", "eve"),
    ]
)


def slapd_conf(folder: Path) -> str:
    includes = "".join(f"include /etc/ldap/schema/{name}.schema\n" for name in SCHEMAS)
    return (
        f"{includes}pidfile {folder / 'slapd.pid'}\nmodulepath /usr/lib/ldap\nmoduleload back_mdb\n"
        f'database mdb\nsuffix "{SUFFIX}"\nrootdn "cn=admin,{SUFFIX}"\ndirectory {folder / "db"}\n'
        # users bind with their password and may read the directory (groups); nobody reads passwords
        "access to attrs=userPassword by anonymous auth by * none\naccess to * by users read by * none\n"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    slapd = shutil.which("slapd") or "/usr/sbin/slapd"
    if not Path(slapd).is_file():
        pytest.skip("slapd is not installed (make system-deps installs it)")
    folder = tmp_path_factory.mktemp("slapd")
    (folder / "db").mkdir()
    (folder / "slapd.conf").write_text(slapd_conf(folder), encoding="utf-8")
    (folder / "directory.ldif").write_text(DIRECTORY, encoding="utf-8")
    conf = str(folder / "slapd.conf")
    subprocess.run(["/usr/sbin/slapadd", "-f", conf, "-l", str(folder / "directory.ldif")], check=True, timeout=60)
    port = free_port()
    log = (folder / "slapd.log").open("w")
    # -d: stay in the foreground (this process ends it); its log goes to slapd.log
    process = subprocess.Popen(
        [slapd, "-d", "256", "-f", conf, "-h", f"ldap://127.0.0.1:{port}/"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"slapd did not start: {(folder / 'slapd.log').read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield f"ldap://127.0.0.1:{port}", folder
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def authenticator(directory, tmp_path_factory):
    from rocmlab.hub import auth
    from rocmlab.hub.roster import import_roster

    url, _ = directory
    data = tmp_path_factory.mktemp("hub-data")
    roster_csv = data / "roster.csv"
    roster_csv.write_text("login,name_zh,name_en,email,group\ndee,丁一,Dee Ding,,learner\n", encoding="utf-8")
    import_roster(roster_csv, data)
    env = {
        "ROCMLAB_HUB_AUTH": "ldap",
        "ROCMLAB_LDAP_URL": url,
        "ROCMLAB_LDAP_TLS": "insecure",  # loopback only; a real directory gets StartTLS or ldaps://
        "ROCMLAB_LDAP_BIND_DN_TEMPLATE": f"uid={{username}},ou=people,{SUFFIX}",
        "ROCMLAB_LDAP_LEARNER_GROUP": LEARNERS,
        "ROCMLAB_LDAP_INSTRUCTOR_GROUP": STAFF,
    }
    config = Config()
    assert auth.configure(config, env, "instructors", data, server_mode=False) == "ldap"
    return config.JupyterHub.authenticator_class(config=config)


def sign_in(authenticator, login: str, password: str | None = None):
    data = {"username": login, "password": PASSWORDS[login] if password is None else password}
    return asyncio.run(authenticator.get_authenticated_user(None, data))


def test_a_learner_signs_in_as_a_learner(authenticator):
    model = sign_in(authenticator, "ada")
    assert model["name"] == "ada" and model["groups"] == [LEARNERS_HUB_GROUP] and model["admin"] is False
    assert model["auth_state"]["ldap_groups"] == [LEARNERS]


def test_an_instructor_signs_in_in_the_instructor_group(authenticator):
    model = sign_in(authenticator, "li")
    assert model["groups"] == ["instructors"] and model["admin"] is False


def test_someone_outside_the_groups_is_refused(authenticator):
    assert sign_in(authenticator, "eve") is None


def test_a_wrong_password_is_refused(authenticator):
    assert sign_in(authenticator, "ada", "not-her-password") is None


def test_the_roster_lets_its_people_in(authenticator):
    model = sign_in(authenticator, "dee")  # in no course group, listed as a learner
    assert model["name"] == "dee" and model["groups"] == [LEARNERS_HUB_GROUP]
