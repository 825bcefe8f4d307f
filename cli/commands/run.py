"""`agent run`: one prompt to completion; the answer on stdout, a trace of tool calls on stderr
(or JSON, or a stream of JSON lines), and an exit code that says how the run ended.

Here: the command, its options, and the agent built for the run (who is asked, the notes said
before it starts); `run_drive.py` drives the run, `run_command_prompt.py` builds the prompt of
`--command`, `run_input.py` reads the prompt and where answers are typed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from cli.commands.frame import (
    ApiOpt,
    ConfigOpt,
    HostOpt,
    McpConfigOpt,
    ModelOpt,
    NoInstructionsOpt,
    Terminal,
    ThinkLevelOpt,
    ThinkOpt,
    think_choice,
)
from cli.commands.run_command_prompt import command_prompt
from cli.commands.run_drive import drive
from cli.commands.run_input import controlling_terminal, in_foreground, read_prompt
from cli.commands.signals import run_signals
from cli.errors import ExitStatus, UsageError

if TYPE_CHECKING:
    from cli.config.settings import Config
    from cli.loop.agent import Agent
    from cli.ui.confirm import LineApprover
    from cli.ui.trace import LazyConsole
    from cli.wiring import Choices

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()

# `agent run`'s own options (those it shares with chat are in frame.py).
PromptArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="PROMPT",
        help="What to ask; '-' reads it from stdin. With --command: the command's arguments.",
        show_default=False,
    ),
]
YesOpt = Annotated[
    bool,
    typer.Option(
        "-y",
        "--yes",
        help="Approve, without asking, the tools listed in policy.unattended (never for "
        "paths outside the allowed dirs). Other confirmations are still asked on the "
        "terminal, or denied when there is none.",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON object on stdout instead of the answer: answer, model, steps, "
        "stop_reason, tool_calls, stats (the same as --output-format json).",
    ),
]
OutputFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--output-format",
        metavar="text|json|stream-json",
        help="What stdout carries: text (the answer), json (one object at the end, as "
        "--json) or stream-json (one JSON object a line as the run goes: start, text, "
        "thinking, tool_call, tool_result, step_end, notice, end; see docs/chat-and-run.md).",
    ),
]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-steps",
        min=1,
        metavar="N",
        help="At most this many model calls (default: agent.max_steps).",
    ),
]
AttachOpt = Annotated[
    list[str] | None,
    typer.Option(
        "-a",
        "--attach",
        metavar="FILE",
        help="Attach this image (PNG, JPEG, GIF, WebP, BMP; at most 20 MB) for a vision "
        "model; repeatable. Read through the same policy as read_file.",
    ),
]
PrewarmOpt = Annotated[
    bool,
    typer.Option(
        "--prewarm",
        help="Send the prompt's fixed start (system prompt, our tools, context) to the "
        "server as the run starts, while its MCP servers start (chat does it by default: "
        "agent.prewarm; see docs/context-and-servers.md).",
    ),
]
PlanOpt = Annotated[
    bool,
    typer.Option(
        "--plan",
        help="Plan mode: offer only the tools that change nothing (read_file, "
        "list_directory, search_files, git_status, git_diff) and ask for a plan.",
    ),
]
CommandOpt = Annotated[
    str | None,
    typer.Option(
        "--command",
        metavar="NAME",
        help="Send the command NAME.md of the project's .metona/commands/ (or "
        "~/.config/metona-agent/commands/), with the PROMPT words as its arguments.",
    ),
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "-v",
        "--verbose",
        help="Also say on stderr which instruction files were read, and show what MCP "
        "servers write on their stderr (otherwise only in their logs).",
    ),
]


@commands.command(
    "run",
    help="Run one prompt to completion and print the answer on stdout; a trace of tool calls "
    "goes to stderr. Piped stdin is appended to the prompt; a prompt of '-' is read from "
    "stdin. Exit codes: 0 answered, 1 server/model/stream failure, 2 usage or config error, "
    "3 step limit reached, answer cut short or empty, 130 interrupted.",
)
def run(
    ctx: typer.Context,
    prompt: PromptArg = None,
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    output_format: OutputFormatOpt = None,
    max_steps: MaxStepsOpt = None,
    think: ThinkOpt = None,
    think_level: ThinkLevelOpt = None,
    api: ApiOpt = None,
    no_instructions: NoInstructionsOpt = False,
    mcp_config: McpConfigOpt = None,
    attach: AttachOpt = None,
    prewarm: PrewarmOpt = False,
    plan: PlanOpt = False,
    command: CommandOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    from cli.wiring import Choices

    words = prompt or []
    if command is None and not words:
        ctx.fail("Missing argument 'PROMPT'.")
    if command is None and len(words) > 1:
        ctx.fail(f"Got unexpected extra argument(s) ({' '.join(words[1:])})")
    terminal = Terminal.from_process()
    thinking = think_choice(think, think_level)
    choices = Choices(
        model,
        host,
        config,
        thinking,
        max_steps,
        api=api,
        instructions=False if no_instructions else None,
        mcp_config=mcp_config,
        mcp_stderr=_server_stderr(terminal.stderr) if verbose else None,
        plan=plan,
    )
    output = output_choice(output_format, as_json)
    code = _run(
        terminal,
        words[0] if command is None else "",
        yes,
        output,
        choices,
        verbose=verbose,
        images=attach or [],
        prewarm=prewarm,
        command=(command, words) if command is not None else None,
    )
    raise typer.Exit(code)


OUTPUT_FORMATS = ("text", "json", "stream-json")


def output_choice(output_format: str | None, as_json: bool) -> str:
    """--output-format and --json as one choice: text, json or stream-json."""
    if output_format is None:
        return "json" if as_json else "text"
    if output_format not in OUTPUT_FORMATS:
        raise UsageError(
            f"--output-format {output_format}: expected one of {', '.join(OUTPUT_FORMATS)}"
        )
    if as_json and output_format != "json":
        raise UsageError(f"--json and --output-format {output_format} contradict: give one")
    return output_format


def _run(
    terminal: Terminal,
    prompt: str,
    yes: bool,
    output: str,
    choices: Choices,
    *,
    verbose: bool = False,
    images: Sequence[str] = (),
    prewarm: bool = False,
    command: tuple[str, Sequence[str]] | None = None,
) -> ExitStatus:
    from cli.loop.approval import Approver, NoOneToAsk, UnattendedApprover
    from cli.safety.policy import Policy
    from cli.ui.trace import LazyConsole
    from cli.wiring import build_agent, load

    config = load(choices, terminal.environ)
    text = ""
    if command is None:
        text = read_prompt(prompt, terminal.stdin, config.policy.limits.max_read_bytes)
    console = LazyConsole(terminal.stderr, highlight=False, soft_wrap=True)
    # Questions are read where a person types: stdin, or when stdin is a pipe (`cat x |
    # agent run …` at a terminal) the controlling terminal, as the question is shown on it;
    # nowhere for a run in the background (`agent run … &`): no one is asked, as with no
    # terminal, rather than the run stopped on SIGTTIN at its first question.
    if terminal.interactive() and in_foreground(terminal.stdin):
        answers: TextIO | None = terminal.stdin
    else:
        answers = controlling_terminal(terminal)
    asker = _line_approver(terminal, config, console, answers)

    def approver(_policy: Policy) -> Approver:
        fallback: Approver = asker or NoOneToAsk(config.policy.unattended, yes=yes)
        return UnattendedApprover(config.policy.unattended, fallback) if yes else fallback

    agent = build_agent(
        choices,
        config,
        environ=terminal.environ,
        cwd=terminal.cwd,
        home=terminal.home,
        approver=approver,
    )
    for line in _project_lines(agent):
        terminal.stderr.write(f"note: {line}\n")
    reads: list[Any] = []  # what a command's @files read, for the run's audit log
    if command is not None:
        try:
            text, reads = command_prompt(terminal, agent, config, choices, command, answers)
        except BaseException:
            agent.close()
            raise
    if prewarm:
        agent.start_prewarm()
    _whole_tree_notes(terminal, agent)
    with run_signals() as signals:
        try:
            return drive(
                terminal,
                agent,
                config,
                text,
                console,
                output,
                verbose,
                yes=yes,
                images=images,
                signals=signals,
                reads=reads,
            )
        finally:
            agent.close()  # its MCP servers: stopped, whatever happened
            if answers is not None and answers is not terminal.stdin:
                answers.close()


def _line_approver(
    terminal: Terminal, config: Config, console: LazyConsole, answers: TextIO | None
) -> LineApprover | None:
    """Who asks the questions, on stderr, when there is somewhere to read answers from."""
    if answers is None:
        return None
    from cli.ui.approval_card import Consequences
    from cli.ui.confirm import LineApprover

    consequences = Consequences(
        config.policy.trash, config.policy.commands.sandbox, undo="agent undo"
    )
    return LineApprover(
        console.get(),
        answers,
        cwd=terminal.cwd,
        consequences=consequences,
        bell=config.agent.bell,
    )


def _whole_tree_notes(terminal: Terminal, agent: Agent) -> None:
    """Run from / or ~: said on stderr, not asked."""
    from cli.safety.policy import whole_trees
    from cli.ui.text import sanitize

    for tree in whole_trees(agent.policy):  # run from / or ~: said, not asked
        terminal.stderr.write(
            f"note: the allowed directory is {sanitize(tree)}: the model may read and change files "
            "anywhere under it\n"
        )


def _project_lines(agent: Agent) -> list[str]:
    """What the project's .metona/ would set and cannot (hooks), one line each."""
    from cli.loop.custom_commands import project_hooks
    from cli.ui.text import sanitize

    return [sanitize(line) for line in project_hooks(agent.policy.cwd)]


def _server_stderr(stream: TextIO) -> Callable[[str, bytes], None]:
    """`-v`: an MCP server's stderr on ours, a line at a time, each naming its server and
    with control characters escaped."""
    from cli.ui.text import sanitize

    def write(server: str, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                stream.write(f"mcp {server}: {sanitize(line)}\n")
        stream.flush()

    return write
