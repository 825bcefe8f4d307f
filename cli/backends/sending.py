"""One request to a model server, with the retries both clients make: a kept-alive
connection the server dropped before answering is tried once more on a new one, and a "busy"
answer (HTTP 503; also 429 from an OpenAI-compatible server) is asked again BUSY_RETRIES times
after a growing pause. What is left is the caller's to word: an HTTP error status, the last
busy answer included, comes back as the response."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import requests

from cli.backends.failures import Wording, connection_error, worth_one_more
from cli.errors import BackendError, ServerTimeout

BUSY_RETRIES = 3  # a busy server's queue clears in seconds: 0.5 + 1 + 2 s of pauses


def send(
    session: requests.Session,
    method: str,
    base: str,
    path: str,
    body: Mapping[str, Any] | None,
    *,
    headers: Mapping[str, str],
    stream: bool,
    timeouts: tuple[float, float],
    says: Wording,
    busy: Collection[int],
    sleep: Callable[[float], None],
) -> requests.Response:
    """The response to `method base+path` with the JSON `body`; `timeouts` are (connect,
    read) in seconds, `busy` the statuses asked again. Raises ServerTimeout, or the
    connection's failure worded as `says` words it."""
    url = base + path
    reset_retried = False
    # One more than the busy retries: a reset connection's retry does not use one up.
    for attempt in range(BUSY_RETRIES + 2):
        try:
            response = session.request(
                method, url, json=body, headers=headers, stream=stream, timeout=timeouts
            )
        except requests.exceptions.ReadTimeout as exc:
            raise ServerTimeout(says.timed_out()) from exc
        except requests.exceptions.ConnectionError as exc:
            # The steps of a turn share a connection (keep_connection): one the server
            # dropped between them is no reason to fail.
            if not reset_retried and worth_one_more(exc):
                reset_retried = True
                session.close()
                continue
            # Also a bad name, TLS, a connect timeout, and a read timeout in the body.
            raise connection_error(exc, base, timeouts[0], says) from exc
        except requests.exceptions.RequestException as exc:
            raise BackendError(f"request to {url} failed: {exc}") from exc
        if response.status_code in busy and attempt < BUSY_RETRIES:
            response.close()
            sleep(0.5 * 2**attempt)
            continue
        return response
    raise AssertionError("unreachable: the last attempt returns or raises")
