"""Service-account key and OAuth token handling for the emulator.

The emulator plays Google's OAuth token endpoint for exactly one service account: the one in its
own key file. google-auth signs a JWT assertion with that key and posts it to ``token_uri``; we
verify it with the key's public half and hand back an opaque access token that we remember.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


class InvalidAssertion(Exception):
    """The JWT assertion posted to /token is not acceptable (bad signature, audience, expiry...)."""


def _new_key_info(project_id: str, token_uri: str) -> dict[str, Any]:
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    ).decode()
    email = f"emulator@{project_id}.iam.gserviceaccount.com"
    return {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": pem,
        "client_email": email,
        "client_id": str(100000000000000000000 + secrets.randbelow(10**20)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": "",
        "universe_domain": "googleapis.com",
    }


def _write_private(path: Path, info: dict[str, Any]) -> None:
    # The key is a secret: write it 0600 and atomically, so a reader never sees half a file.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(info, fh, indent=2)
    os.replace(tmp, path)


def load_or_create_key(path: Path, project_id: str, token_uri: str) -> dict[str, Any]:
    """Reuse the key at ``path`` (trusted as is) or create a fresh one there.

    A reused key keeps its private key and email; only ``token_uri`` is rewritten when it differs,
    because google-auth posts to (and puts as audience) whatever the file says, and the emulator's
    port may change between runs.
    """
    if path.exists():
        info = json.loads(path.read_text())
        if info.get("type") != "service_account" or "private_key" not in info:
            raise ValueError(f"{path} is not a service-account key file")
        if info.get("token_uri") != token_uri:
            info["token_uri"] = token_uri
            _write_private(path, info)
        return info
    info = _new_key_info(project_id, token_uri)
    _write_private(path, info)
    return info


def public_key_pem(info: dict[str, Any]) -> bytes:
    private_key = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
    return private_key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )


GOOGLE_TOKEN_ENDPOINT = "https://oauth2.googleapis.com/token"


def verify_assertion(assertion: str, public_pem: bytes, audience: str, client_email: str) -> str:
    """Check an RS256 JWT-bearer assertion and return the principal (its ``iss``)."""
    from google.auth import exceptions, jwt  # local import: google-auth is slow to import

    try:
        # google-auth always names Google's token endpoint as audience, whatever token_uri says.
        claims = jwt.decode(
            assertion, certs=public_pem, audience=[audience, GOOGLE_TOKEN_ENDPOINT], clock_skew_in_seconds=30
        )
    except (ValueError, exceptions.GoogleAuthError) as exc:
        raise InvalidAssertion(str(exc)) from exc
    issuer = claims.get("iss")
    if issuer != client_email:
        raise InvalidAssertion("assertion issuer is not the emulator's service account")
    return str(issuer)


@dataclass(frozen=True)
class IssuedToken:
    principal: str
    expires_at: float


class TokenStore:
    """Opaque bearer tokens the emulator issued, with their principal and expiry.

    Used from the server's event loop and from test threads (``Emulator.issue_token``), hence the lock.
    """

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.issued = 0  # how many tokens were handed out, e.g. to see that a client refreshed
        self.history: list[str] = []  # every token handed out, so tests can look for leaks
        self._tokens: dict[str, IssuedToken] = {}
        self._lock = threading.Lock()

    def issue(self, principal: str, lifetime: float | None = None) -> str:
        token = "emu." + secrets.token_urlsafe(32)
        expires_at = time.time() + (self.lifetime if lifetime is None else lifetime)
        with self._lock:
            self._tokens[token] = IssuedToken(principal, expires_at)
            self.issued += 1
            self.history.append(token)
        return token

    def principal_for(self, token: str) -> str | None:
        """The principal of a valid token; None when unknown or expired."""
        with self._lock:
            issued = self._tokens.get(token)
            if issued is None:
                return None
            if time.time() >= issued.expires_at:
                del self._tokens[token]
                return None
            return issued.principal
