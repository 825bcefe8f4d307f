"""The two ways to reach an MCP server (spec basic/transports): a child process spoken to
over stdin/stdout, one JSON message a line, and streamable HTTP with `requests`.

Both offer the same small, synchronous interface to cli/mcp/client.py: `call(message,
timeout)` sends a request and returns its response, `notify(message)` sends a notification,
`close()` ends it. Messages the server sends on its own — a `ping` to answer, a
`notifications/tools/list_changed` — go to `on_message`, which may return a response to
send back.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

import requests

from cli.mcp.protocol import McpError, encode

OnMessage = Callable[[dict[str, Any]], "dict[str, Any] | None"]
MAX_LINE = 16 * 1024 * 1024  # one message; beyond, the server is not one we can talk to
KILL_AFTER = 2.0  # seconds between SIGTERM and SIGKILL at shutdown
MAX_RESUMES = 5  # times an event stream that ended early is resumed


class Transport:
    on_message: OnMessage | None = None

    def call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        raise NotImplementedError

    def notify(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return True


class Stdio(Transport):
    """A server as a child process: its own session (so Ctrl-C in our terminal does not
    reach it, and shutdown can signal its whole group), a reader thread that matches
    responses to requests by id, stderr drained to `log` (never to the terminal). Lines on
    stdout that are not JSON (banners) are skipped and logged."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log: IO[bytes] | None = None,
        popen: Callable[..., subprocess.Popen[bytes]] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.log = log
        self._waiting: dict[Any, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._eof = False  # its stdout ended
        start = popen or subprocess.Popen
        try:
            self.proc = start(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        except OSError as exc:
            raise McpError(f"could not start {argv[0]!r}: {exc.strerror or exc}") from None
        finally:
            for fd in pass_fds:  # the child has its copy
                os.close(fd)
        self._reader = threading.Thread(target=self._read, daemon=True, name="mcp-stdout")
        self._reader.start()
        self._drain = threading.Thread(target=self._stderr, daemon=True, name="mcp-stderr")
        self._drain.start()

    @property
    def alive(self) -> bool:
        return not self._closed and not self._eof and self.proc.poll() is None

    def call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        answer: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        with self._lock:
            self._waiting[message["id"]] = answer
        try:
            self._send(message)
            deadline = time.monotonic() + timeout
            while True:
                try:
                    got = answer.get(timeout=min(0.2, max(deadline - time.monotonic(), 0.01)))
                except queue.Empty:
                    if not self.alive:
                        raise McpError(self._exit_text()) from None
                    if time.monotonic() >= deadline:
                        raise TimeoutError from None
                    continue
                if got.get("_closed"):
                    try:
                        self.proc.wait(timeout=1)
                    except subprocess.TimeoutExpired:
                        pass
                    raise McpError(self._exit_text())
                return got
        finally:
            with self._lock:
                self._waiting.pop(message["id"], None)

    def notify(self, message: dict[str, Any]) -> None:
        self._send(message)

    def _send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        with self._write_lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (OSError, ValueError):
                raise McpError(self._exit_text()) from None

    def _exit_text(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "the server closed its output"
        if code < 0:
            return f"the server was killed by signal {-code}"
        return f"the server exited with status {code}"

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            line = out.readline(MAX_LINE + 1)
            if not line:
                break
            if len(line) > MAX_LINE:
                self._note(b"[a line over 16 MB on stdout; stopped reading]\n")
                break
            try:
                message = json.loads(line)
            except ValueError:
                if line.strip():
                    self._note(b"[not JSON on stdout] " + line)
                continue
            if isinstance(message, dict):
                self._dispatch(message)
        with self._lock:
            waiting = list(self._waiting.values())
        self._eof = True
        for answer in waiting:  # the server is gone: wake whoever waits (they see it)
            if answer.empty():
                answer.put_nowait({"_closed": True})

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" not in message and "id" in message:
            with self._lock:
                answer = self._waiting.get(message["id"])
            if answer is not None and answer.empty():
                answer.put_nowait(message)
            return
        handler = self.on_message
        reply = handler(message) if handler else None
        if reply is not None:
            try:
                self._send(reply)
            except McpError:
                pass

    def _stderr(self) -> None:
        err = self.proc.stderr
        assert err is not None
        try:
            while chunk := os.read(err.fileno(), 65536):
                self._note(chunk)
        except (OSError, ValueError):
            pass

    def _note(self, data: bytes) -> None:
        if self.log is not None:
            try:
                self.log.write(data)
                self.log.flush()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """Close its stdin, then SIGTERM, then SIGKILL after KILL_AFTER seconds (the spec's
        order), to the whole process group; reaped, so no zombie is left."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        for sig, wait in ((None, 0.5), (signal.SIGTERM, KILL_AFTER), (signal.SIGKILL, 5.0)):
            if sig is not None:
                try:
                    os.killpg(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.proc.poll() is not None:
            try:  # what the server left in its group (a child it started) goes too
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._reader.join(timeout=1)
        self._drain.join(timeout=1)
        for pipe in (self.proc.stdout, self.proc.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class Http(Transport):
    """Streamable HTTP: each message POSTed to `url`; the answer is JSON or an event stream
    whose `message` events carry the response (and whatever the server sends first). The
    session id the server gives at initialize goes with every later request, and the
    protocol version once it is agreed."""

    def __init__(self, url: str, headers: Mapping[str, str], session: requests.Session) -> None:
        self.url = url
        self.headers = dict(headers)
        self.session = session
        self.session_id: str | None = None
        self.version: str | None = None
        self.broken = False  # the session is gone: a new one is needed

    @property
    def alive(self) -> bool:
        return not self.broken

    def _headers(self) -> dict[str, str]:
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    def _post(self, message: dict[str, Any], timeout: float) -> requests.Response:
        try:
            response = self.session.post(
                self.url,
                data=encode(message),
                headers=self._headers(),
                timeout=(min(timeout, 10.0), timeout),
                stream=True,
                allow_redirects=False,
            )
        except requests.Timeout:
            raise TimeoutError from None
        except requests.RequestException as exc:
            raise McpError(f"cannot reach {self.url}: {_reason(exc)}") from None
        if response.status_code == 401:
            response.close()
            raise McpError(
                "it asks for OAuth sign-in (401), which this agent does not support; for a "
                "token-based server put the token in `headers` (from an environment variable)"
            )
        if response.status_code in (400, 404) and self.session_id and "id" in message:
            # 404 is the spec's "session expired"; some servers (server-everything) say 400.
            response.close()
            self.broken = True
            raise McpError(
                f"the server ended the session ({response.status_code}); it is opened again on "
                "the next call"
            )
        if response.status_code >= 400:
            status = f"{response.status_code} {response.reason or ''}".strip()
            response.close()
            raise McpError(f"{self.url} answered {status}")
        sid = response.headers.get("Mcp-Session-Id")
        if sid and self.session_id is None:
            self.session_id = sid
        return response

    def call(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        response = self._post(message, timeout)
        with response:
            kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if kind == "text/event-stream":
                return self._from_stream(response, message["id"], deadline)
            try:
                body = response.json()
            except ValueError:
                raise McpError(f"{self.url} answered with something that is not JSON") from None
        for item in body if isinstance(body, list) else [body]:
            if isinstance(item, dict) and item.get("id") == message["id"] and "method" not in item:
                return item
            if isinstance(item, dict):
                self._handle(item)
        raise McpError(f"{self.url} answered without a response to request {message['id']}")

    def _from_stream(
        self, response: requests.Response, id_: Any, deadline: float
    ) -> dict[str, Any]:
        """The response to request `id_` from an event stream. A stream that ends before it
        came, after giving its events ids, is resumed as the spec says: a GET with
        `Last-Event-ID`, after the `retry:` delay the server asked for."""
        stream = _Events()
        for _ in range(MAX_RESUMES + 1):
            try:
                for message in stream.messages(response, deadline):
                    if message.get("id") == id_ and "method" not in message:
                        return message
                    self._handle(message)
            except requests.RequestException as exc:
                raise McpError(f"the event stream from {self.url} broke: {_reason(exc)}") from None
            finally:
                response.close()
            if stream.last_id is None:
                break
            time.sleep(min(stream.retry, max(deadline - time.monotonic(), 0)))
            if time.monotonic() >= deadline:
                raise TimeoutError
            headers = {**self._headers(), "Accept": "text/event-stream"}
            headers["Last-Event-ID"] = stream.last_id
            try:
                response = self.session.get(
                    self.url,
                    headers=headers,
                    stream=True,
                    timeout=(10.0, deadline - time.monotonic()),
                )
            except requests.RequestException as exc:
                raise McpError(f"cannot resume the event stream: {_reason(exc)}") from None
            if response.status_code >= 400:
                response.close()
                raise McpError(
                    f"resuming the event stream: {self.url} answered {response.status_code}"
                )
        raise McpError(f"{self.url}'s event stream ended without a response")

    def _handle(self, message: dict[str, Any]) -> None:
        handler = self.on_message
        reply = handler(message) if handler else None
        if reply is not None:
            try:
                self._post(reply, 10.0).close()
            except (McpError, TimeoutError):
                pass

    def notify(self, message: dict[str, Any]) -> None:
        self._post(message, 10.0).close()

    def close(self) -> None:
        if self.session_id:  # the spec's polite end of a session
            try:
                self.session.delete(self.url, headers=self._headers(), timeout=2)
            except requests.RequestException:
                pass
        self.session.close()


class _Events:
    """Server-sent events as JSON-RPC messages, keeping the last event id and retry delay."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.retry = 1.0  # seconds before resuming, unless the server says otherwise

    def messages(self, response: requests.Response, deadline: float) -> Iterator[dict[str, Any]]:
        data: list[str] = []
        for raw in response.iter_lines(decode_unicode=False):
            if time.monotonic() > deadline:
                raise TimeoutError
            line = raw.decode("utf-8", "replace")
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if line and field == "data":
                data.append(value)
            elif line and field == "id":
                self.last_id = value
            elif line and field == "retry" and value.isdigit():
                self.retry = min(int(value) / 1000, 30.0)
            elif not line and data:
                text, data = "\n".join(data), []
                try:
                    message = json.loads(text)
                except ValueError:
                    continue  # a priming event (empty data) or a comment
                if isinstance(message, dict):
                    yield message


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "Connection refused" in text:
        return "connection refused"
    return text.split("\n")[0][:200]
