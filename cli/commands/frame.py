"""What every command shares: the process's surroundings (`Terminal`), the options `run` and
`chat` (and a few others) take, and how a command writes JSON. Nothing here imports `cli.app`:
the root app imports the commands, never the reverse; errors simply propagate to it, and it
turns them into exit codes."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from cli.commands.complete import model_names
from cli.errors import UsageError

if TYPE_CHECKING:
    from cli.backends.messages import ModelInfo


@dataclass(frozen=True)
class Terminal:
    """The process's surroundings, read once and passed down."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO
    environ: Mapping[str, str]
    cwd: str

    @classmethod
    def from_process(cls) -> Terminal:
        return cls(sys.stdin, sys.stdout, sys.stderr, dict(os.environ), os.getcwd())

    @property
    def home(self) -> str:
        return self.environ.get("HOME") or os.path.expanduser("~")

    def interactive(self) -> bool:
        """Questions need both: stdin to read the answer, stderr to show the question."""
        return isatty(self.stdin) and isatty(self.stderr)


def isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- options shared by run and chat ----------------------------------------------------------

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "-m",
        "--model",
        metavar="NAME",
        help="Model to use (default: ollama.model).",
        autocompletion=model_names,
    ),
]
HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        metavar="HOST",
        help="Ollama server: http(s)://host[:port], host, host:port or :port "
        "(default: $OLLAMA_HOST, then ollama.host, then http://localhost:11434). With --api "
        "openai: the server's base URL, e.g. http://localhost:1234/v1.",
    ),
]
ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api",
        metavar="native|openai",
        help="The server's protocol: native (Ollama's own API) or openai (an OpenAI-compatible "
        "server: LM Studio, llama.cpp's llama-server, vLLM…; --host is then its base URL, e.g. "
        "http://localhost:1234/v1). Default: ollama.api.",
    ),
]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "-c",
        "--config",
        metavar="PATH",
        help="YAML config file (default: $XDG_CONFIG_HOME/metona-agent/config.yaml if it "
        "exists, else built-in defaults).",
    ),
]
ThinkOpt = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="Let a thinking model think, and show its thinking dimmed (default: ollama.think).",
    ),
]
ThinkLevelOpt = Annotated[
    str | None,
    typer.Option(
        "--think-level",
        metavar="LEVEL",
        help="Think at this level: low, medium, high or max (gpt-oss takes low, medium, high); "
        "implies --think.",
    ),
]

McpConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--mcp-config",
        metavar="PATH",
        help='Also use the MCP servers of this {"mcpServers": …} JSON file (Claude Desktop, '
        "Gemini CLI, ollmcp) for this session.",
    ),
]

NoInstructionsOpt = Annotated[
    bool,
    typer.Option(
        "--no-instructions",
        help="Leave out the project's AGENTS.md / CLAUDE.md files (default: "
        "agent.project_instructions).",
    ),
]


def think_choice(think: bool | None, level: str | None) -> bool | str | None:
    """--think/--no-think and --think-level as one choice: a level, a boolean, or None."""
    from cli.config.settings import THINK_LEVELS

    if level is None:
        return think
    if level not in THINK_LEVELS:
        raise UsageError(f"--think-level {level}: expected one of {', '.join(THINK_LEVELS)}")
    if think is False:
        raise UsageError(f"--no-think and --think-level {level} contradict: give one")
    return level


# -- output ----------------------------------------------------------------------------------


def print_json(stream: TextIO, data: object) -> None:
    """One JSON object a line. Piped, it is `json.dumps` of the data, non-ASCII as is (UTF-8);
    on a terminal, what JSON leaves raw and a terminal would interpret (DEL, C1, bidi) is
    written as \\uXXXX, the same JSON value; an output encoding other than UTF-8 gets ASCII
    JSON, so nothing is lost to replacement characters."""
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
    # NaN and infinities (an MCP server's result may hold them) are not JSON: null instead.
    # U+2028, U+2029 and U+0085 are escaped: valid JSON either way, but a reader splitting
    # lines the way Python's str.splitlines() does would cut the object in two.
    text = json.dumps(_finite(data), ensure_ascii=encoding not in ("utf-8", "utf8"))
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    text = text.replace("\x85", "\\u0085")
    if isatty(stream):
        from cli.ui.text import sanitize

        text = sanitize(text, json=True)
    stream.write(text + "\n")
    stream.flush()


def _finite(data: object) -> object:
    """`data` with every NaN or infinite float as None (JSON has no such numbers)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value) for value in data]
    return data


def model_note(info: ModelInfo, host: str, environ: Mapping[str, str], *, always: bool) -> str:
    """What the user is told of the model at the model check: the backend's note of how the
    server takes it (at every start), and what it had to assume because the server does not
    say what the model can do, which is said the first time with this server and model, not
    at every start (`always`: -v)."""
    said = [info.note] if info.note else []
    if info.assumed_note:
        from cli.config.settings import state_dir
        from cli.config.shown import ShownOnce

        shown = ShownOnce(state_dir(environ) / "notes-shown")
        first = shown.first_time("\0".join((host, info.name, info.assumed_note)))
        if first or always:
            said.append(info.assumed_note)
    return "; ".join(said)
