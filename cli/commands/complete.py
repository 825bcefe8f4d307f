"""Shell completion of values (`agent --install-completion`): session names after
`agent chat --resume` and `agent sessions rm`, model names after `-m`. Each is asked for at
every Tab, so it is cheap or nothing: sessions come from the store's directory listing; models
from the server, with a short timeout. Whatever goes wrong completes nothing, silently: a
completion must never print an error into the person's command line."""

from __future__ import annotations

import contextlib
import io
import os
import threading
from dataclasses import replace
from typing import Any

MODEL_TIMEOUT = 1.0  # seconds for the server to list its models: Tab must not hang


def session_names(incomplete: str) -> list[str]:
    """The saved sessions whose names start with `incomplete`, the most recent first."""
    try:
        from cli.config.settings import data_dir
        from cli.records.sessions import SessionStore

        names = SessionStore(data_dir(os.environ) / "sessions").names()
    except Exception:
        return []
    return [name for name in names if name.startswith(incomplete)]


def model_names(ctx: Any, incomplete: str) -> list[str]:
    """The server's models whose names start with `incomplete`: the server the command line
    so far names (--host, --api, --config), or the config's, asked with a short timeout."""
    params = getattr(ctx, "params", None) or {}
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            from cli.wiring import Choices, build_backend, load

            choices = Choices(
                host=_text(params.get("host")),
                config_path=_text(params.get("config")),
                api=_text(params.get("api")),
            )
            config = load(choices, os.environ)
            config = replace(config, ollama=replace(config.ollama, timeout=MODEL_TIMEOUT))
            backend = build_backend(choices, config, os.environ)
    except Exception:
        return []
    # The timeout is per read: a server that trickles its answer, or retries on "busy",
    # could hold Tab far longer. The whole ask gets MODEL_TIMEOUT, in a thread left behind
    # (a daemon: the completion process exits without it).
    found: list[str] = []

    def ask() -> None:
        try:
            found.extend(backend.list_models())
        except Exception:  # anything: completion offers nothing, and says nothing
            return

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(MODEL_TIMEOUT)
    if asking.is_alive():
        return []
    return [name for name in found if name.startswith(incomplete)]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
