"""Why a request got no answer, as one line that names the fix: a name that does not
resolve, TLS to a plain-http server, a refused or reset connection, a connection never
accepted, a server that accepted and then sent nothing.

`requests` raises one ConnectionError for most of these (an SSLError, a name error, a reset,
and a read timeout that strikes while a body is read all look alike at the top); the reason
is further down the chain of causes. Both clients share this; each names its own fix for a
refused connection and its own settings for the host.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.client import HTTPException, RemoteDisconnected
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from cli.errors import BackendError, ServerTimeout, ServerUnreachable

# OpenSSL's reasons when what came back to our ClientHello is not TLS at all: an HTTP answer
# ("HTTP/1.1 400 …") read as a TLS record. OpenSSL 3.0 says WRONG_VERSION_NUMBER, 3.2 and
# later RECORD_LAYER_FAILURE or PACKET_LENGTH_TOO_LONG, 1.0 UNKNOWN_PROTOCOL.
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"}
)


@dataclass(frozen=True)
class Wording:
    """What one client says: `host_fix` names where the host comes from; `cannot_reach`
    turns a short reason into the refused-connection line (with how to start the server);
    `timed_out` is its read-timeout line."""

    host_fix: str
    cannot_reach: Callable[[str], str]
    timed_out: Callable[[], str]


def connection_error(
    exc: requests.exceptions.ConnectionError, base: str, connect_timeout: float, says: Wording
) -> BackendError:
    """The error for a request to `base` that failed with `exc` before an answer."""
    causes = list(causes_of(exc))
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return ServerUnreachable(
            f"{_hostport(base)} did not accept a connection within {connect_timeout:g} s "
            f"({base}): is the machine up, and the port open (a firewall?); check "
            f"{says.host_fix}"
        )
    if any(isinstance(e, ReadTimeoutError) for e in causes):  # while the body was read
        return ServerTimeout(says.timed_out())
    unresolved = next((e for e in causes if isinstance(e, socket.gaierror)), None)
    if unresolved is not None:
        why = f" ({unresolved.strerror})" if unresolved.strerror else ""
        return ServerUnreachable(
            f"cannot resolve host '{urlsplit(base).hostname}'{why}: check {says.host_fix}"
        )
    if isinstance(exc, requests.exceptions.SSLError):
        return ServerUnreachable(_tls_message(base, causes, says.host_fix))
    if any(isinstance(e, ConnectionRefusedError) for e in causes):
        return ServerUnreachable(says.cannot_reach("connection refused"))
    if is_reset(exc):
        return ServerUnreachable(says.cannot_reach("connection reset by the server"))
    return ServerUnreachable(says.cannot_reach("connection failed"))


def is_reset(exc: BaseException) -> bool:
    """The server closed or reset the connection before it answered."""
    return any(isinstance(e, (ConnectionResetError, RemoteDisconnected)) for e in causes_of(exc))


def worth_one_more(exc: requests.exceptions.ConnectionError) -> bool:
    """A request worth sending once more, on a new connection: the server dropped a
    kept-alive one before answering (uvicorn resets the one whose stream failed; a server's
    idle close can race the next request). Not a TLS failure: that would fail again."""
    return not isinstance(exc, requests.exceptions.SSLError) and is_reset(exc)


def _tls_message(base: str, causes: list[BaseException], host_fix: str) -> str:
    failed = f"TLS handshake failed with {base}"
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = cause.verify_message or "certificate verify failed"
            return (
                f"{failed}: its certificate is not trusted ({why}): give its CA certificate "
                "in $REQUESTS_CA_BUNDLE, or fix the server's certificate"
            )
        if isinstance(cause, ssl.SSLError) and cause.reason in _NOT_TLS:
            return f"{failed}: the server speaks plain http: use http://{base.partition('://')[2]}"
    reasons = [c.reason for c in causes if isinstance(c, ssl.SSLError) and c.reason]
    reason = str(reasons[0]).replace("_", " ").lower() if reasons else "no reason given"
    return f"{failed} ({reason}): is it serving https on that port? check {host_fix}"


def _hostport(base: str) -> str:
    return urlsplit(base).netloc.rpartition("@")[2]


def causes_of(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what it wraps (urllib3 keeps the cause in `.reason` and `.args`), and
    their causes: a bounded walk, since such chains can loop."""
    todo: list[Any] = [exc]
    seen: set[int] = set()
    while todo and len(seen) < 32:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]


class BodyTimeout(Exception):
    """Nothing came for the read timeout while a body was read."""


class BodyDropped(Exception):
    """The connection broke while a body was read."""


def body_pieces(response: requests.Response, size: int = 65536) -> Iterator[bytes]:
    """A streamed body as it arrives: `read1` returns what the socket has, so each token
    reaches the user as soon as the server flushes it. An identity-encoded body (Ollama's,
    an OpenAI-compatible server's) is read from http.client's response under urllib3's, a
    layer less for each of thousands of chunks; anything else through urllib3, as before.
    Raises BodyTimeout or BodyDropped (a body cut short included)."""
    raw = response.raw
    plain = response.headers.get("Content-Encoding", "identity").strip().lower()
    direct = getattr(raw, "_fp", None)
    if plain not in ("", "identity") or not callable(getattr(direct, "read1", None)):
        direct = None
    read = direct.read1 if direct is not None else raw.read1
    while True:
        try:
            data = read(size)
        except (ReadTimeoutError, TimeoutError) as exc:
            raise BodyTimeout() from exc
        except (ProtocolError, HTTPException, OSError, ValueError) as exc:
            raise BodyDropped() from exc
        if not data:
            if direct is not None and getattr(direct, "length", None):
                # http.client ends a Content-Length body cut short quietly (urllib3 raises).
                raise BodyDropped()
            return
        yield data
