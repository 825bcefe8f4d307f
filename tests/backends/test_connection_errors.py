"""When a request gets no useful answer, the one line says which of the ways it failed and the
fix for that one: a name that does not resolve, TLS to a plain-http server, a server that
accepts and then says nothing, a machine that never accepts, a URL where no model server
answers. Real servers and sockets on 127.0.0.1 only: `.invalid` never resolves (RFC 6761)
and fails without asking the network."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

import pytest
import requests

from cli.backends.messages import ChatRequest
from cli.backends.ollama import OllamaClient
from cli.backends.openai import OpenAIClient
from cli.errors import BackendError, ExitStatus, ModelNotFound, ServerTimeout, ServerUnreachable
from tests.conftest import MESSAGES, RunCli
from tests.fakes.fake_ollama import FakeOllama
from tests.fakes.fake_openai import FakeOpenAI

MODEL = "qwen3:8b"
Client = OllamaClient | OpenAIClient
Attempt = Callable[[Client], object]

# Every way a command reaches the server first: the model check, the model list, a chat.
ATTEMPTS: list[Attempt] = [
    lambda c: c.model_info(MODEL),
    lambda c: c.list_models(),
    lambda c: list(c.chat(ChatRequest(model=MODEL, messages=MESSAGES))),
]
ATTEMPT_IDS = ["model_info", "list_models", "chat"]


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@pytest.fixture
def sessions() -> Iterator[list[requests.Session]]:
    made: list[requests.Session] = []
    yield made
    for session in made:
        session.close()


@pytest.fixture
def ollama_client(sessions: list[requests.Session]) -> Callable[..., OllamaClient]:
    def make(host: str, timeout: float = 10.0) -> OllamaClient:
        sessions.append(requests.Session())
        return OllamaClient(host, session=sessions[-1], timeout=timeout)

    return make


@pytest.fixture
def openai_client(sessions: list[requests.Session]) -> Callable[..., OpenAIClient]:
    def make(base: str, timeout: float = 10.0) -> OpenAIClient:
        sessions.append(requests.Session())
        return OpenAIClient(base, session=sessions[-1], timeout=timeout, sleep=lambda _s: None)

    return make


def failure(attempt: Attempt, client: Client) -> BackendError:
    with pytest.raises(BackendError) as info:
        attempt(client)
    error = info.value
    assert error.message == str(error) and "\n" not in error.message, error.message
    assert "connection refused" not in error.message
    return error


def one_line_failure(result: object) -> str:
    """`agent run`'s stderr for an expected failure: exit 1, one line, no traceback."""
    code, stderr = result.code, result.stderr  # type: ignore[attr-defined]
    assert code == ExitStatus.FAILURE, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("agent: ") and stderr.count("\n") == 1, stderr
    return str(stderr)


def config_file(tmp_path: Path, timeout: float) -> str:
    path = tmp_path / "timeout.yaml"
    path.write_text(f"ollama:\n  timeout: {timeout:g}\n")
    return str(path)


# -- servers that misbehave in one way each ----------------------------------------------------


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that accepts connections (the kernel does it) and never reads or writes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def answering(answer: bytes, *, hang_up: bool) -> Iterator[str]:
    """A server on 127.0.0.1 that reads each request and sends `answer`, then hangs up
    (`hang_up`) or holds the connection open, saying no more, until the test ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.sendall(answer)
            if hang_up:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def headers_only() -> Iterator[str]:
    """A server that answers the status line and headers, then never sends the body it
    announced: the read timeout strikes while the body is read, not before it."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    with answering(head, hang_up=False) as url:
        yield url


@pytest.fixture
def cut_short() -> Iterator[str]:
    """A server that announces a body of 1000 bytes, sends 13 and hangs up."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    with answering(head + b'{"data": [{"i', hang_up=True) as url:
        yield url


@pytest.fixture
def never_accepts() -> Iterator[str]:
    """A port whose accept queue is full: the kernel drops further SYNs, so a connect waits
    as it does for a machine that is down or behind a firewall that drops packets."""
    with ExitStack() as stack:
        server = stack.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = server.getsockname()
        for _ in range(4):  # fill the queue; the first connects that fail show it is full
            filler = stack.enter_context(closing(socket.socket()))
            filler.settimeout(0.2)
            try:
                filler.connect(address)
            except OSError:
                break
        else:
            pytest.skip("this kernel does not drop connections to a full accept queue")
        yield f"http://127.0.0.1:{address[1]}"


# -- a name that does not resolve ---------------------------------------------------------------


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=ATTEMPT_IDS)
def test_ollama_unknown_host_name(attempt: Attempt, ollama_client: Callable[..., Client]) -> None:
    error = failure(attempt, ollama_client("http://nonexistent.invalid:11434"))
    assert isinstance(error, ServerUnreachable)
    assert error.message.startswith("cannot resolve host 'nonexistent.invalid'")
    assert "check OLLAMA_HOST / --host" in error.message


def test_openai_unknown_host_name(openai_client: Callable[..., Client]) -> None:
    for attempt in ATTEMPTS:
        error = failure(attempt, openai_client("http://nonexistent.invalid:1234/v1"))
        assert error.message.startswith("cannot resolve host 'nonexistent.invalid'")
        assert "check --host / ollama.host" in error.message
        assert "OLLAMA_HOST" not in error.message  # not read with --api openai


def test_run_with_an_unknown_host_name(run_cli: RunCli) -> None:
    r = run_cli("run", "hi", env={"OLLAMA_HOST": "nonexistent.invalid"})
    line = one_line_failure(r)
    assert "cannot resolve host 'nonexistent.invalid'" in line and "OLLAMA_HOST" in line


# -- TLS to a server that speaks plain http -----------------------------------------------------


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=ATTEMPT_IDS)
def test_ollama_https_to_plain_http(
    attempt: Attempt, ollama: FakeOllama, ollama_client: Callable[..., Client]
) -> None:
    https = ollama.url.replace("http://", "https://")
    error = failure(attempt, ollama_client(https))
    assert isinstance(error, ServerUnreachable)
    assert error.message == (
        f"TLS handshake failed with {https}: the server speaks plain http: use {ollama.url}"
    )
    assert ollama.requests == []  # nothing was sent in the clear


def test_openai_https_to_plain_http(
    openai: FakeOpenAI, openai_client: Callable[..., Client]
) -> None:
    https = openai.url.replace("http://", "https://")
    error = failure(ATTEMPTS[0], openai_client(https))
    assert error.message == (
        f"TLS handshake failed with {https}: the server speaks plain http: use {openai.url}"
    )


def test_run_with_https_to_plain_http(run_cli: RunCli, ollama: FakeOllama) -> None:
    https = ollama.url.replace("http://", "https://")
    line = one_line_failure(run_cli("run", "hi", "--host", https))
    assert "TLS handshake failed" in line and f"use {ollama.url}" in line


def test_openai_body_cut_short_is_a_dropped_connection_not_bad_json(
    cut_short: str, openai_client: Callable[..., Client]
) -> None:
    error = failure(lambda c: c.list_models(), openai_client(cut_short + "/v1", timeout=2))
    assert "dropped while the answer was read; try again" in error.message


# -- a server that accepts and says nothing -----------------------------------------------------


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=ATTEMPT_IDS)
@pytest.mark.parametrize("server", ["silent", "headers_only"])
def test_ollama_server_that_sends_nothing(
    attempt: Attempt,
    server: str,
    request: pytest.FixtureRequest,
    ollama_client: Callable[..., Client],
) -> None:
    url = request.getfixturevalue(server)
    started = time.monotonic()
    error = failure(attempt, ollama_client(url, timeout=0.5))
    assert time.monotonic() - started < 5
    assert isinstance(error, ServerTimeout)
    assert f"{url} sent nothing for 0.5 s (ollama.timeout)" in error.message


@pytest.mark.parametrize("server", ["silent", "headers_only"])
def test_openai_server_that_sends_nothing(
    server: str, request: pytest.FixtureRequest, openai_client: Callable[..., Client]
) -> None:
    url = request.getfixturevalue(server) + "/v1"
    for attempt in ATTEMPTS:
        error = failure(attempt, openai_client(url, timeout=0.5))
        assert isinstance(error, ServerTimeout)
        assert "sent nothing for 0.5 s (ollama.timeout)" in error.message


@pytest.mark.parametrize("server", ["silent", "headers_only"])
def test_run_with_a_server_that_sends_nothing(
    server: str, request: pytest.FixtureRequest, run_cli: RunCli, tmp_path: Path
) -> None:
    url = request.getfixturevalue(server)
    r = run_cli("run", "hi", "-c", config_file(tmp_path, 1), env={"OLLAMA_HOST": url})
    line = one_line_failure(r)
    assert f"{url} sent nothing for 1 s (ollama.timeout)" in line


# -- a machine that never accepts the connection ------------------------------------------------


def test_ollama_connection_that_is_never_accepted(
    never_accepts: str, ollama_client: Callable[..., Client]
) -> None:
    started = time.monotonic()
    error = failure(ATTEMPTS[0], ollama_client(never_accepts, timeout=0.5))
    assert time.monotonic() - started < 5  # the connect waits no longer than ollama.timeout
    assert isinstance(error, ServerUnreachable)
    hostport = never_accepts.removeprefix("http://")
    assert error.message.startswith(f"{hostport} did not accept a connection within 0.5 s")
    assert "firewall" in error.message and "OLLAMA_HOST / --host" in error.message
    assert "ollama serve" not in error.message  # a stopped server refuses; this one is not


def test_openai_connection_that_is_never_accepted(
    never_accepts: str, openai_client: Callable[..., Client]
) -> None:
    error = failure(ATTEMPTS[0], openai_client(never_accepts + "/v1", timeout=0.5))
    assert "did not accept a connection within 0.5 s" in error.message
    assert "--host / ollama.host" in error.message


# -- a URL where no model server answers --------------------------------------------------------


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=ATTEMPT_IDS)
def test_ollama_wrong_path_in_the_host(
    attempt: Attempt, ollama: FakeOllama, ollama_client: Callable[..., Client]
) -> None:
    url = ollama.url + "/wrong/path"
    error = failure(attempt, ollama_client(url))
    assert not isinstance(error, ModelNotFound)
    assert error.message.startswith(f"no Ollama answers at {url} (GET ")
    assert "(GET /api/tags: HTTP 404)" in error.message
    assert "OLLAMA_HOST / --host" in error.message and "ollama pull" not in error.message


def test_ollama_pointed_at_another_kind_of_server(
    openai: FakeOpenAI, ollama_client: Callable[..., Client]
) -> None:
    # LM Studio's port, say, given to the native client: every /api/… is a 404.
    error = failure(ATTEMPTS[0], ollama_client(openai.root))
    assert error.message.startswith(f"no Ollama answers at {openai.root} (GET ")
    assert "another program on that port" in error.message


def test_an_unknown_model_is_still_named_as_such(
    ollama: FakeOllama, ollama_client: Callable[..., Client]
) -> None:
    with pytest.raises(ModelNotFound, match=r"ollama pull ghost:1b"):
        ollama_client(ollama.url).model_info("ghost:1b")


def test_run_with_a_wrong_path_in_the_host(run_cli: RunCli, ollama: FakeOllama) -> None:
    url = ollama.url + "/wrong/path"
    line = one_line_failure(run_cli("run", "hi", "--host", url))
    assert f"no Ollama answers at {url}" in line and "ollama pull" not in line


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=ATTEMPT_IDS)
def test_openai_wrong_path_before_v1(
    attempt: Attempt, openai: FakeOpenAI, openai_client: Callable[..., Client]
) -> None:
    base = openai.root + "/wrong/v1"
    error = failure(attempt, openai_client(base))
    assert not isinstance(error, ModelNotFound)
    assert error.message.startswith(f"no OpenAI-compatible server answers at {base}: ")
    assert "check the base URL" in error.message


def test_openai_wrong_path_without_v1(
    openai: FakeOpenAI, openai_client: Callable[..., Client]
) -> None:
    base = openai.root + "/wrong"
    error = failure(ATTEMPTS[0], openai_client(base))
    assert error.message.startswith(f"no OpenAI-compatible server answers at {base}: ")
    assert "usually ends in /v1" in error.message


def test_openai_server_without_a_model_list_is_still_trusted(
    openai: FakeOpenAI, openai_client: Callable[..., Client]
) -> None:
    # It has /chat/completions (an empty request gets its own error, not a 404 for the path).
    openai.models_endpoint = False
    info = openai_client(openai.url).model_info("anything")
    assert info.supports_tools


def test_run_openai_with_a_wrong_base_url(run_cli: RunCli, openai: FakeOpenAI) -> None:
    base = openai.root + "/wrong/v1"
    line = one_line_failure(run_cli("run", "hi", "--api", "openai", "--host", base))
    assert f"no OpenAI-compatible server answers at {base}" in line
