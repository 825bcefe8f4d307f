"""`agent run`'s signal handlers (cli/commands/signals.py) last as long as the run: a caller
in the same process finds its own handlers again after it, however the run ended."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cli.commands.signals import run_signals
from cli.errors import Stopped
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply

NUMBERS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def handlers() -> dict[int, object]:
    return {number: signal.getsignal(number) for number in NUMBERS}


@pytest.fixture
def own_handlers() -> dict[int, object]:
    """Handlers of the caller's own, put back after the test."""

    def mine(_signum: int, _frame: object) -> None:
        raise AssertionError("the caller's handler ran")

    previous = {number: signal.signal(number, mine) for number in NUMBERS}
    try:
        yield handlers()
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def test_a_run_that_ends_by_itself_puts_the_handlers_back(
    run_cli_in_process: RunCli, ollama: FakeOllama, own_handlers: dict[int, object]
) -> None:
    ollama.enqueue(reply("done"))
    assert run_cli_in_process("run", "hello").code == 0
    assert handlers() == own_handlers


def test_a_run_that_winds_down_quietly_puts_the_handlers_back(
    own_handlers: dict[int, object],
) -> None:
    """Its output written whole, the run is quiet (a signal then is ignored); once it has
    returned, the caller's handlers are back (they were left ignored before)."""
    with run_signals() as handler:
        assert handler is not None
        handler.quiet = True  # what the run does as it writes its end (run_drive.py)
        handler(signal.SIGINT, None)  # ignored: raises nothing
    assert handler.received is None
    assert handlers() == own_handlers


@pytest.mark.parametrize("number", NUMBERS, ids=lambda n: signal.Signals(n).name)
def test_a_run_a_signal_ended_leaves_the_signals_ignored_for_the_exit(
    own_handlers: dict[int, object], number: int
) -> None:
    """The first signal ends the run, a second during its wind-down is ignored, and so are
    the ones after it: the process exits with 128 + the first one's number."""
    ended = KeyboardInterrupt if number == signal.SIGINT else Stopped
    with pytest.raises(ended), run_signals() as handler:
        assert handler is not None
        os.kill(os.getpid(), number)
        time.sleep(5)  # the handler raises at once
    assert handler.received == number and handler.quiet
    handler(number, None)  # one more while winding down: ignored, raises nothing
    assert handlers() == dict.fromkeys(NUMBERS, signal.SIG_IGN)
