"""The accounts of the Kubernetes hub: a password per user, set by the instructor before the workshop.

``python -m rocmlab.hub.accounts --passwords FILE NAME ...`` prints the Secret ``rocmlab-accounts``
(the JSON file read by the hub's ``rocmlab-accounts.py`` authenticator in
env/jupyterhub/helm/values.yaml: each name with a salted PBKDF2-SHA256 hash) and writes the
passwords to hand out to FILE (owner-only). Nobody can claim an account by logging in first.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
from pathlib import Path

import yaml

from ..errors import InputError

SECRET_NAME = "rocmlab-accounts"
ACCOUNTS_KEY = "accounts.json"  # custom.rocmlab.accountsFile is <mount>/accounts.json
ROUNDS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256
SCHEME = "pbkdf2-sha256"
USER_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # the same rule as rocmlab-roles.py's exchange folders


def hash_password(password: str, rounds: int = ROUNDS, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, rounds)
    return f"{SCHEME}${rounds}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    scheme, rounds, salt, digest = stored.split("$")
    given = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), int(rounds))
    return scheme == SCHEME and hmac.compare_digest(given.hex(), digest)


def check_names(names) -> list[str]:
    bad = [name for name in names if not USER_NAME.fullmatch(name)]
    if bad:
        raise InputError(
            f"user names {bad}: expected lower-case letters, digits, '.', '_' or '-', starting "
            "with a letter or digit, 64 characters at most (each names an exchange folder)"
        )
    if len(set(names)) != len(names):
        raise InputError("a user name is given twice")
    return list(names)


def make_accounts(names, rounds: int = ROUNDS) -> tuple[dict, dict]:
    """New passwords for ``names``: (name -> password, the accounts file's content)."""
    passwords = {name: secrets.token_urlsafe(9) for name in check_names(names)}
    return passwords, {"users": {name: hash_password(password, rounds) for name, password in passwords.items()}}


def secret_manifest(accounts: dict, name: str = SECRET_NAME) -> str:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": {ACCOUNTS_KEY: json.dumps(accounts, indent=1, sort_keys=True)},
    }
    return yaml.safe_dump(secret, sort_keys=False)


def write_passwords(path: Path, passwords: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["user", "password"])
        writer.writerows(passwords.items())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rocmlab.hub.accounts",
        description="Print the Secret rocmlab-accounts for the Kubernetes hub (apply it with kubectl) "
        "and write each user's new password to a CSV file only you can read.",
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help="hub user names (instructors too)")
    parser.add_argument("--passwords", required=True, metavar="FILE", help="CSV file of the passwords (must not exist)")
    args = parser.parse_args(argv)
    try:
        passwords, accounts = make_accounts(args.names)
        write_passwords(Path(args.passwords), passwords)
    except (InputError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(secret_manifest(accounts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
