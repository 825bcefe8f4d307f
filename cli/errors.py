"""The exception family users see: a one-line message that names the fix, and an exit status.

`cli.app` is the one place that turns these into exit codes: each exception carries its own
(`exit_code`, an ExitStatus).
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Every exit code `agent` uses: a contract with shell scripts (README "Exit codes")."""

    OK = 0
    FAILURE = 1  # server, model or stream failure; a broken audit chain or change journal
    USAGE = 2  # bad flags, bad config (click's own usage errors exit 2 as well)
    # Work not finished: the model was still calling tools when agent.max_steps ran out, kept
    # repeating a refused call, or its answer was cut by the server's length limit or empty.
    UNFINISHED = 3
    # Ended by a signal: 128 + its number, as a shell reports it.
    HANGUP = 129  # SIGHUP: the terminal closed
    INTERRUPTED = 130  # SIGINT: Ctrl-C
    TERMINATED = 143  # SIGTERM: `timeout`, `kill`

    @classmethod
    def of_signal(cls, signum: int) -> ExitStatus:
        """How the process exits when SIGINT, SIGTERM or SIGHUP ended it: 128 + its number."""
        return cls(128 + signum)


class AgentError(Exception):
    """An expected failure: `cli.app` prints `message` on one line and exits with `exit_code`."""

    exit_code = ExitStatus.FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(AgentError):
    """The command line asks for something that cannot be done."""

    exit_code = ExitStatus.USAGE


class ConfigError(AgentError):
    """The YAML config is unreadable, malformed or holds an unknown key or a wrong type."""

    exit_code = ExitStatus.USAGE


class StateCorrupt(AgentError):
    """A file of the agent's own state (the change journal) is not as the agent writes it:
    edited, cut into or replaced. Exit 1, as `agent audit verify` exits for a broken or
    unreadable log; a session file that cannot be read stays a UsageError (exit 2), as it
    always was."""


class Unrecorded(AgentError):
    """The change store could not record a change (a full disk, a read-only state dir): the
    change is not made, since it could not be taken back. Exit 1."""


class BackendError(AgentError):
    """Anything that went wrong talking to the model server, whichever API it speaks."""


# The name this class had while Ollama was the only backend. Both clients (Ollama's API and
# the OpenAI-compatible one) raise BackendError; the old name stays importable for code
# written against it. Use BackendError.
OllamaError = BackendError


class ServerUnreachable(BackendError):
    """Nothing answers at the configured host."""


class WrongURL(ServerUnreachable):
    """Something answers at the host, but no model server of the kind asked for: the paths
    every such server has are HTTP 404 (a wrong path in the URL, another program on the
    port)."""


class ModelNotFound(BackendError):
    """The server does not have the model (HTTP 404)."""


class ModelUnsupported(BackendError):
    """The model cannot do what was asked: tools, thinking or chat (HTTP 400)."""


class ServerTimeout(BackendError):
    """The server stopped sending for longer than `ollama.timeout`."""


class FormatRefused(BackendError):
    """The server refused the JSON schema an answer was to hold to (ChatRequest.format): it
    is sent no schema again, and the loop asks the same step once more in free text."""


class StreamError(BackendError):
    """The stream broke: an error line, an undecodable line, a dropped connection."""


class ContextTooLong(BackendError):
    """The server refused the prompt as longer than the model's context, instead of cutting
    it (Ollama with `truncate: false`, or an OpenAI-compatible server's context error). Any
    backend raises this one; the loop trims history and retries once. `context` and
    `prompt_tokens` are the numbers the server gave, when it did: the context it runs the
    model with, and how many tokens it counted in the prompt."""

    def __init__(
        self, message: str, *, context: int | None = None, prompt_tokens: int | None = None
    ) -> None:
        super().__init__(message)
        self.context = context
        self.prompt_tokens = prompt_tokens


class MessageTooLong(ContextTooLong):
    """One message that cannot fit the model's context whatever older history is left out
    (a huge piped prompt, a large attachment): refused before it is sent."""


class ToolError(Exception):
    """An expected failure (missing file, too large, …): becomes `{"success": false, ...}`.
    `str(exc)` is what happened, in words for anyone; `hint`, what the model could do next
    (`use list_directory`), goes to the model as the result's `hint` and is not shown to
    the person (cli/loop/outcomes.py)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class Stopped(BaseException):
    """SIGTERM or SIGHUP during `agent run`: the run ends as after Ctrl-C (its `end` line,
    its JSON object, the work saved), then exits 128 + the signal's number. Not a
    KeyboardInterrupt, so that no prompt takes it for a "no" and lets the run go on."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> ExitStatus:
        return ExitStatus.of_signal(self.signum)
