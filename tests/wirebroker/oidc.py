"""An OAuth/OIDC identity provider for the OAUTHBEARER tests, served over HTTP from a thread of
the test (http.server): signing keys made with `cryptography`, the JWKS of their public halves
(GET), tokens signed with PyJWT, and a token endpoint answering the client credentials grant
(POST, HTTP Basic client authentication) as an identity provider does. Given a certificate,
it serves https; `redirects` answers a path with a redirect.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

if TYPE_CHECKING:
    import trustme

ISSUER = "https://issuer.example"
AUDIENCE = "kafka-broker"


class Issuer:
    """An identity provider: signing keys, the JWKS of their public halves, and a token
    endpoint for the `clients` (client id -> secret) issuing tokens of `token_lifetime_s`."""

    def __init__(self, certificate: trustme.LeafCert | None = None) -> None:
        self.private: dict[str, Any] = {}
        self.published: list[str] = []
        self.requests = 0
        #: The client credentials the token endpoint takes, and the tokens it issued to each.
        self.clients: dict[str, str] = {}
        self.issued: Counter[str] = Counter()
        self.token_lifetime_s = 600
        #: Each token request's form (grant type and scope), in order.
        self.forms: list[dict[str, list[str]]] = []
        #: path -> (status, Location): a redirect; each request's method and path, in order.
        self.redirects: dict[str, tuple[int, str]] = {}
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self._redirected():
                    return
                issuer.requests += 1
                if self.path == "/token":
                    self._answer(405, {"error": "invalid_request"})
                    return
                self._answer(200, issuer.jwks())

            def do_POST(self) -> None:  # noqa: N802
                if self._redirected():
                    return
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                status, answer = issuer.token_answer(self.headers.get("Authorization", ""), form)
                self._answer(status, answer)

            def _redirected(self) -> bool:
                issuer.seen.append((self.command, self.path))
                redirect = issuer.redirects.get(self.path)
                if redirect is not None:
                    self.send_response(redirect[0])
                    self.send_header("Location", redirect[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                return redirect is not None

            def _answer(self, status: int, answer: dict[str, Any]) -> None:
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if certificate is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            certificate.configure_cert(context)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.base}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.base}/token"

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def add_key(self, kid: str, *, publish: bool = True, curve: bool = False) -> None:
        self.private[kid] = (
            ec.generate_private_key(ec.SECP256R1())
            if curve
            else rsa.generate_private_key(public_exponent=65537, key_size=2048)
        )
        if publish:
            self.published.append(kid)

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.published:
            algorithm = jwt.algorithms.ECAlgorithm if kid.startswith("ec") else None
            public = self.private[kid].public_key()
            jwk = json.loads(
                algorithm.to_jwk(public)
                if algorithm
                else jwt.algorithms.RSAAlgorithm.to_jwk(public)
            )
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}

    def token(self, sub: str = "alice", kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        payload = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600}
        payload |= claims
        algorithm = "ES256" if kid.startswith("ec") else "RS256"
        return jwt.encode(payload, self.private[kid], algorithm, headers={"kid": kid})

    def token_answer(
        self, authorization: str, form: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        """The token endpoint: a token for the client the Basic authorization names."""
        with self._lock:
            self.forms.append(form)
        scheme, _, encoded = authorization.partition(" ")
        try:
            client, _, secret = base64.b64decode(encoded).decode().partition(":")
        except ValueError:
            client = secret = ""
        if scheme != "Basic" or self.clients.get(client) != secret or not secret:
            return 401, {"error": "invalid_client", "error_description": "bad client credentials"}
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        now = int(time.time())
        scope = {"scope": form["scope"][0]} if "scope" in form else {}
        token = self.token(client, exp=now + self.token_lifetime_s, **scope)
        with self._lock:
            self.issued[client] += 1
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self.token_lifetime_s,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
