"""Shell completion of values, as bash asks the real program for it (the script that
`agent --install-completion bash` installs sets these variables): session names after
`agent chat --resume` and `agent sessions rm`, model names after `-m`, from the server the
command line names. Nothing (and no error) when the server is down or does not answer: the
shell then completes nothing rather than file names."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.records.sessions import SessionStore
from tests.fakes.fake_ollama import FakeOllama

CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def complete(line: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """What the program answers bash's completion for `line` (the cursor at its end)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    return subprocess.run(
        [sys.executable, "-m", "cli"],
        env={
            **os.environ,
            **(env or {}),
            "_AGENT_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(cword),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def sessions(home: Path) -> SessionStore:
    store = SessionStore(home / ".local/share/metona-agent/sessions")
    store.save("alpha", "qwen3:8b", CHAT)
    store.save("beta", "qwen3:8b", CHAT)
    return store


def test_tab_after_resume_completes_saved_session_names(
    sessions: SessionStore, workspace: Path
) -> None:
    (workspace / "alpine.txt").write_text("a file, not a session")
    every = complete("agent chat --resume ")
    assert every.returncode == 0 and every.stderr == ""
    assert sorted(every.stdout.split()) == ["alpha", "beta"]
    some = complete("agent chat --resume al")
    assert some.stdout.split() == ["alpha"]
    removing = complete("agent sessions rm b")
    assert removing.stdout.split() == ["beta"]


def test_tab_after_m_completes_the_servers_model_names(ollama: FakeOllama) -> None:
    ollama.add_model("llama3.2:3b")
    every = complete("agent chat -m ", {"OLLAMA_HOST": ollama.url})
    assert every.returncode == 0 and every.stderr == ""
    assert sorted(every.stdout.split()) == ["llama3.2:3b", "qwen3:8b"]
    # The server the command line names so far, not the default one.
    some = complete(f"agent run --host {ollama.url} -m ll")
    assert some.stdout.split() == ["llama3.2:3b"]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_tab_after_m_with_no_server_or_a_silent_one_completes_nothing_quietly(
    silent_server: str, home: Path
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for host in (closed, silent_server):
        done = complete("agent chat -m ", {"OLLAMA_HOST": host})
        assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "", "")


def test_tab_after_m_gives_up_on_a_server_that_trickles_its_answer() -> None:
    """The read timeout is per read: a server sending its model list a byte at a time would
    hold Tab for as long as it likes. The whole ask has a deadline: the completion is over,
    offering nothing, while the server is still sending."""
    import threading

    body = b'{"models": [{"name": "trickled:1b"}]}'
    done = threading.Event()
    stop = threading.Event()

    def serve(listener: socket.socket) -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            connection.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
            for byte in body:  # a byte every half second: 19 s for the whole list
                if stop.wait(0.5):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:  # the completion gave up and hung up first, as it should
                    return
            done.set()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        server = threading.Thread(target=serve, args=(listener,), daemon=True)
        server.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        answered = complete(f"agent run --host {url} -m tr")
        finished_first = not done.is_set()
        stop.set()
        server.join(10)
    assert answered.returncode == 0 and answered.stdout.split() == [] and answered.stderr == ""
    assert finished_first  # over before the server had sent its list
