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
from concurrent.futures import Future
from typing import IO, Any, TypeVar

import requests

from cli.mcp.protocol import McpError, encode

OnMessage = Callable[[dict[str, Any]], "dict[str, Any] | None"]
MAX_LINE = 16 * 1024 * 1024  # one message; beyond, the server is not one we can talk to
MAX_BODY = 16 * 1024 * 1024  # one HTTP answer (an event stream: one event)
MAX_LOG = 10 * 1024 * 1024  # of a server's stderr and stray stdout kept each time it starts
KILL_AFTER = 2.0  # seconds between SIGTERM and SIGKILL at shutdown
MAX_RESUMES = 5  # times an event stream that ended early is resumed

T = TypeVar("T")
_spawns: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def from_a_lasting_thread(start: Callable[[], T]) -> T:
    """`start()` (which forks a server) run by a thread that lives as long as the agent.

    A sandboxed server dies with its parent (bwrap's --die-with-parent, landlock.py's
    PR_SET_PDEATHSIG), and to the kernel its parent is the *thread* that forked it, not our
    process: each server is started by a thread of its own (McpServers.start), which ends
    after the handshake, and the server was SIGKILLed then. So a thread that ends forks no
    server: the main thread (it ends only with the process; Ctrl-C reaches it there, with no
    fork handed over and lost) forks for itself, any other hands the fork to one daemon
    thread that never ends before the process does."""
    if threading.current_thread() is threading.main_thread():
        return start()
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_spawn_forever, daemon=True, name="mcp-spawner")
            _spawner.start()
    done: Future[T] = Future()
    _spawns.put((start, done))
    return done.result()


def _spawn_forever() -> None:
    while True:
        start, done = _spawns.get()
        try:
            done.set_result(start())
        except BaseException as exc:  # the caller's to handle, as if it had called start()
            done.set_exception(exc)


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
        echo: Callable[[bytes], None] | None = None,
    ) -> None:
        """`echo`: also given what the server writes on stderr (`agent run -v`)."""
        self.echo = echo
        self.log = log
        self._waiting: dict[Any, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._eof = False  # its stdout ended
        self.why = ""  # why we stopped reading it, when it did not just end
        self._logged = 0
        start = popen or subprocess.Popen
        try:
            self.proc = from_a_lasting_thread(
                lambda: start(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=dict(env),
                    cwd=cwd,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
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
        if self.why:
            return self.why
        code = self.proc.poll()
        if code is None:
            return "the server closed its output"
        if code < 0:
            return f"the server was killed by signal {-code}"
        return f"the server exited with status {code}"

    def _read(self) -> None:
        """Until the server's stdout ends (or it sends what no server may): whatever a line
        holds, this thread goes on or ends cleanly, and whoever waits is woken."""
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                line = out.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE:
                    self.why = "it sent a line over 16 MB on stdout"
                    self._note(b"[a line over 16 MB on stdout; stopped reading]\n")
                    break
                try:
                    message = json.loads(line)
                except (ValueError, RecursionError):
                    if line.strip():
                        self._note(b"[not JSON on stdout] " + line[:4096])
                    continue
                if isinstance(message, dict):
                    self._dispatch(message)
        except Exception as exc:  # a reader that dies silently would leave calls hanging
            self._note(f"[stopped reading stdout: {type(exc).__name__}]\n".encode())
        finally:
            with self._lock:
                waiting = list(self._waiting.values())
            self._eof = True
            for answer in waiting:  # the server is gone: wake whoever waits (they see it)
                if answer.empty():
                    answer.put_nowait({"_closed": True})

    def _dispatch(self, message: dict[str, Any]) -> None:
        mid = message.get("id")
        if mid is not None and not isinstance(mid, (int, str)):
            self._note(b"[a message with an id that is neither a number nor a string]\n")
            return
        if "method" not in message and "id" in message:
            with self._lock:
                answer = self._waiting.get(message["id"])
            if answer is not None and answer.empty():
                answer.put_nowait(message)
            else:  # an id we are not waiting for (late, after a timeout, or made up)
                self._note(f"[a response to no pending request: id {mid!r}]\n".encode()[:300])
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
                if self.echo is not None:
                    self.echo(chunk)
        except (OSError, ValueError):
            pass

    def _note(self, data: bytes) -> None:
        """To the server's log, at most MAX_LOG bytes per start (then one line saying so)."""
        if self.log is None or self._logged > MAX_LOG:
            return
        self._logged += len(data)
        if self._logged > MAX_LOG:
            data = data[: max(0, MAX_LOG - (self._logged - len(data)))]
            data += b"\n[log cut: more than 10 MB since the server started]\n"
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
        # A pipe still read (a detached grandchild holds its other end) is left to the
        # daemon thread: closing it would wait for that read.
        for pipe, reader in ((self.proc.stdout, self._reader), (self.proc.stderr, self._drain)):
            try:
                if pipe is not None and not reader.is_alive():
                    pipe.close()
            except OSError:
                pass


def new_session() -> requests.Session:
    """A fresh HTTP session for one server (this module is the one place outside
    cli/backends that imports requests)."""
    return requests.Session()


class Http(Transport):
    """Streamable HTTP: each message POSTed to `url`; the answer is JSON or an event stream
    whose `message` events carry the response (and whatever the server sends first). The
    session id the server gives at initialize goes with every later request, and the
    protocol version once it is agreed."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        session: requests.Session,
        shown: str | None = None,
    ) -> None:
        """`shown`: the URL as messages name it (the config's, before `${…}` was filled
        in: a token in it stays off the screen)."""
        self.address = url
        self.url = shown or url
        self.headers = dict(headers)
        self.session = session
        self.session_id: str | None = None
        self.version: str | None = None
        self.broken = False  # the session is gone: a new one is needed

    @property
    def alive(self) -> bool:
        return not self.broken

    def _reason(self, exc: Exception) -> str:
        """Why a request failed, without the URL it went to (which may hold a token)."""
        return _reason(exc).replace(self.address, self.url)

    def _headers(self) -> dict[str, str]:
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Accept-Encoding": "identity",  # no gzip: what is read is what came (capped)
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    def _post(self, message: dict[str, Any], timeout: float) -> requests.Response:
        try:
            response = self.session.post(
                self.address,
                data=encode(message),
                headers=self._headers(),
                timeout=(min(timeout, 10.0), timeout),
                stream=True,
                allow_redirects=False,
            )
        except requests.Timeout:
            raise TimeoutError from None
        except requests.RequestException as exc:
            raise McpError(f"cannot reach {self.url}: {self._reason(exc)}") from None
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
        if response.status_code >= 300:  # a redirect is not followed: it could go anywhere
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
                body = json.loads(_body(response, deadline))
            except (ValueError, RecursionError):
                raise McpError(f"{self.url} answered with something that is not JSON") from None
            except requests.RequestException as exc:
                raise McpError(
                    f"the answer from {self.url} broke off: {self._reason(exc)}"
                ) from None
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
                raise McpError(
                    f"the event stream from {self.url} broke: {self._reason(exc)}"
                ) from None
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
                    self.address,
                    headers=headers,
                    stream=True,
                    timeout=(10.0, max(deadline - time.monotonic(), 0.1)),
                    allow_redirects=False,
                )
            except requests.RequestException as exc:
                raise McpError(f"cannot resume the event stream: {self._reason(exc)}") from None
            if response.status_code >= 300:
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
        timeout = 2.0 if message.get("method") == "notifications/cancelled" else 10.0
        self._post(message, timeout).close()

    def close(self) -> None:
        if self.session_id:  # the spec's polite end of a session, once
            headers = self._headers()
            self.session_id = None
            try:
                self.session.delete(self.address, headers=headers, timeout=2, allow_redirects=False)
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
        size = 0
        for raw in _lines(response, deadline):
            size = size + len(raw) if data else len(raw)
            if size > MAX_BODY:
                raise McpError("an event over 16 MB in the event stream")
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


def _chunks(response: requests.Response, deadline: float) -> Iterator[bytes]:
    """The body as it arrives, with the call's deadline checked on every piece (a server
    that sends a byte every few seconds cannot stretch a call past its timeout)."""
    read1 = getattr(response.raw, "read1", None)  # urllib3 2: what has arrived, not more
    if read1 is None:
        source: Iterator[bytes] = response.iter_content(chunk_size=65536)
    else:

        def arrived() -> Iterator[bytes]:
            while data := read1(65536, decode_content=True):
                yield data

        source = arrived()
    for chunk in source:
        if time.monotonic() > deadline:
            raise TimeoutError
        yield chunk


def _body(response: requests.Response, deadline: float) -> bytes:
    parts, size = [], 0
    for chunk in _chunks(response, deadline):
        size += len(chunk)
        if size > MAX_BODY:
            raise McpError("it sent an answer over 16 MB")
        parts.append(chunk)
    return b"".join(parts)


def _lines(response: requests.Response, deadline: float) -> Iterator[bytes]:
    """Lines of an event stream (LF, CRLF or CR ends one), none longer than MAX_BODY."""
    pending = bytearray()
    carry = False  # a chunk ended in CR: it may be the first half of a CRLF
    for chunk in _chunks(response, deadline):
        if carry:
            chunk = b"\r" + chunk
        carry = chunk.endswith(b"\r")
        if carry:
            chunk = chunk[:-1]
        *complete, rest = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if complete:
            complete[0] = bytes(pending) + complete[0]
            pending = bytearray()
            yield from complete
        pending += rest
        if len(pending) > MAX_BODY:
            raise McpError("it sent a line over 16 MB in its event stream")
    if carry or pending:
        yield bytes(pending)


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "Connection refused" in text:
        return "connection refused"
    return text.split("\n")[0][:200]
