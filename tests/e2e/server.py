"""Start llama-cpp-python's OpenAI-compatible server on a free loopback port, and always stop it.

    with llama_server() as base_url:      # "http://127.0.0.1:PORT/v1", once GET /v1/models answers
        ...

The server runs in its own process group (so Ctrl-C in the terminal reaches only us) and is
stopped on the way out, whatever happens: SIGTERM to the group, then SIGKILL after a grace period.
SIGTERM and SIGHUP sent to us are turned into SystemExit so that the cleanup runs for them too,
and if we are killed outright the kernel sends the server SIGTERM (PR_SET_PDEATHSIG).

As a CLI, `python tests/e2e/server.py` serves until Ctrl-C (for poking at it by hand).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))
import setup_env


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM to the server's process group, SIGKILL if it is still there after `grace`."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers in the group, if any


def _die_with_parent() -> None:
    """In the child: SIGTERM when our process dies, even by SIGKILL (Linux; best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_exit() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise SystemExit (main thread only) so cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _exit_on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def llama_server(
    model: Path | None = None,
    python: Path | None = None,
    *,
    n_ctx: int = 2048,
    timeout: float = 120.0,
    log_path: Path | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Yield the base URL of a running server; stop it on exit. Its output goes to `log_path`."""
    model = model or setup_env.model_path()
    python = python or setup_env.venv_python()
    for path, what in ((python, "e2e venv"), (model, "model")):
        if not path.exists():
            raise ServerError(f"{what} missing: {path} (run tests/e2e/setup_env.py first)")
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="metona-e2e-")) / "server.log"
    port = free_port()
    cmd = [
        str(python), "-m", "llama_cpp.server", "--model", str(model),
        "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(os.cpu_count() or 1), *extra_args,
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    # The server's settings also come from the environment (pydantic-settings): not these.
    env = {k: v for k, v in os.environ.items() if k.upper() not in ("CONFIG_FILE", "API_KEY")}
    with _signals_exit(), log_path.open("wb") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        try:
            _wait_ready(proc, base_url, log_path, timeout)
            print(
                f"[e2e server] {base_url} up in {time.monotonic() - start:.1f}s "
                f"(pid {proc.pid}, log {log_path})",
                flush=True,
            )
            yield base_url
            if proc.poll() is not None:  # died while in use: say so, the client saw only resets
                print(
                    f"[e2e server] died with {proc.returncode} while in use; "
                    f"last lines of {log_path}:\n{log_tail(log_path)}",
                    file=sys.stderr,
                )
        finally:
            stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise ServerError(
                f"llama server exited with {proc.returncode} before answering; "
                f"last lines of {log}:\n{log_tail(log)}"
            )
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=2) as resp:
                if resp.status == 200 and json.load(resp).get("data"):
                    return
        except (OSError, ValueError):
            pass  # not listening yet (URLError, ConnectionRefused, reset) or a partial answer
        if time.monotonic() > deadline:
            raise ServerError(
                f"llama server did not answer GET {base_url}/models within {timeout:g}s; "
                f"last lines of {log}:\n{log_tail(log)}"
            )
        time.sleep(0.2)


def main() -> int:
    try:
        with llama_server() as base_url:
            print(f"serving at {base_url}; Ctrl-C stops", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 130
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
