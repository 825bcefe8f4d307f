"""How `agent run` and `agent chat` end on Ctrl-C, SIGTERM and SIGHUP: through their
`finally`s, so that the work is saved and MCP servers are stopped, then with 128 + the
signal's number (ExitStatus)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cli.errors import ExitStatus, Stopped


@contextlib.contextmanager
def stopped_by_signals(active: bool) -> Iterator[None]:
    """While MCP servers run: SIGTERM and SIGHUP end the agent through its `finally`s, as
    Ctrl-C does, so that the servers are stopped too (exit 128 + the signal's number). A
    SIGKILL cannot be caught: servers then outlive the agent (docs/mcp.md says so)."""
    if not active:
        yield
        return
    import signal

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(ExitStatus.of_signal(signum))

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class RunSignals:
    """`agent run`'s handler for SIGINT, SIGTERM and SIGHUP: the first one ends the run
    (KeyboardInterrupt, or Stopped); from then on `quiet` is set and more of them are
    ignored while the run winds down, so that a second Ctrl-C a few ms later (a wrapper
    forwarding it while the terminal sends it too) cannot cut the wind-down short: the `end`
    line, the JSON object, the saved session. When the run returns, the handlers it found are
    put back (a caller in this process is left as it was); when a signal ended it, the
    process exits with 128 + that signal's number, which a late one (a storm of Ctrl-Cs
    from a wrapper) must not change: the three stay ignored."""

    def __init__(self) -> None:
        self.quiet = False
        self.received: int | None = None  # the signal that ended the run, if one did

    def __call__(self, signum: int, _frame: object) -> None:
        import signal

        if self.quiet:
            return
        self.quiet = True
        self.received = signum
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)


@contextlib.contextmanager
def run_signals() -> Iterator[RunSignals | None]:
    """RunSignals, installed while the run lasts (None off the main thread, where Python
    cannot set handlers)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    handler = RunSignals()
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield handler
    finally:
        ended_by_a_signal = handler.received is not None
        for number, old in previous.items():
            signal.signal(number, signal.SIG_IGN if ended_by_a_signal else old)


def stopped_line(signum: int) -> str:
    """stderr's word for how the run was ended: Ctrl-C, or a signal by its name."""
    import signal

    if signum == signal.SIGINT:
        return "interrupted"
    return f"stopped by {signal.Signals(signum).name}"
