"""`agent chat`: the interactive session."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.commands.complete import session_names
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
    isatty,
    model_note,
    think_choice,
)
from cli.commands.signals import stopped_by_signals
from cli.errors import UsageError

if TYPE_CHECKING:
    from rich.text import Text

    from cli.backends.messages import ModelInfo
    from cli.loop.agent import Agent
    from cli.ui.layout import FittedConsole
    from cli.wiring import Choices

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()


@commands.command(
    "chat",
    help="An interactive session: the model works on your files turn by turn, every risky "
    "call is confirmed, and the conversation is kept (and saved) across turns. /help inside "
    "lists the commands and keys.",
)
def chat(
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    think: ThinkOpt = None,
    think_level: ThinkLevelOpt = None,
    api: ApiOpt = None,
    no_instructions: NoInstructionsOpt = False,
    mcp_config: McpConfigOpt = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Reopen a saved session: NAME, or the latest chat of this directory when NAME "
            "is left out.",
        ),
    ] = False,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Start in plan mode: only the tools that change nothing are offered, and the "
            "model is asked for a plan (/go leaves it, /plan toggles it).",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", help="The session --resume reopens.", autocompletion=session_names
        ),
    ] = None,
) -> None:
    terminal = Terminal.from_process()
    if name is not None and not resume:
        raise UsageError(
            f"a session name ({name}) only goes with --resume: agent chat --resume {name}"
        )
    from cli.wiring import Choices

    thinking = think_choice(think, think_level)
    choices = Choices(
        model,
        host,
        config,
        thinking,
        api=api,
        instructions=False if no_instructions else None,
        mcp_config=mcp_config,
        plan=plan,
    )
    code = _chat(terminal, choices, resume, name)
    raise typer.Exit(code)


def _chat(terminal: Terminal, choices: Choices, resume: bool, name: str | None) -> int:
    from rich.markup import escape

    from cli.config.settings import data_dir, state_dir
    from cli.records.audit_events import session_log
    from cli.records.sessions import SessionStore
    from cli.ui.approval_card import Consequences
    from cli.ui.approve import ChatApprover
    from cli.ui.keys import PromptKeys, TypeAhead
    from cli.ui.layout import FittedConsole
    from cli.ui.render import ChatRenderer
    from cli.ui.repl import ChatSession
    from cli.ui.text import sanitize
    from cli.wiring import build_agent, load

    if not (isatty(terminal.stdin) and isatty(terminal.stdout)):
        # prompt-toolkit would warn, repaint into the pipe and read answers from it.
        raise UsageError(
            "agent chat needs a terminal (stdin and stdout); for scripts and pipes use "
            'agent run: echo "…" | agent run -'
        )
    config = load(choices, terminal.environ)
    console = FittedConsole(file=terminal.stdout, highlight=False)  # TERM=dumb too
    consequences = Consequences(config.policy.trash, config.policy.commands.sandbox)
    typeahead = TypeAhead(terminal.stdin, terminal.stdout)
    keys = PromptKeys(typeahead=typeahead)
    approver = ChatApprover(
        console, keys, cwd=terminal.cwd, consequences=consequences, bell=config.agent.bell
    )
    agent = build_agent(
        choices,
        config,
        environ=terminal.environ,
        cwd=terminal.cwd,
        home=terminal.home,
        approver=lambda _policy: approver,
    )
    with contextlib.closing(agent), stopped_by_signals(agent.mcp is not None):
        info = agent.model_info()  # fails here, with exit 1, if the server or model is missing
        settings = agent.settings
        _say_header(terminal, agent, info, console)
        from cli.config.settings import config_dir
        from cli.loop.custom_commands import Seen, load_commands, project_hooks

        catalogue = load_commands(
            agent.policy.cwd, str(config_dir(terminal.environ)), agent.policy.hides
        )
        for line in [*project_hooks(agent.policy.cwd), *catalogue.notes]:
            console.print(f"[yellow]note:[/] {escape(sanitize(line))}", highlight=False)
        if not _whole_tree_agreed(agent, console, keys):
            return 0
        renderer = ChatRenderer(
            console,
            cwd=agent.policy.cwd,
            show_thinking=bool(agent.think),
            model=settings.model,
            keys=typeahead,
            waited=lambda: approver.waited,
        )
        store = SessionStore(data_dir(terminal.environ) / "sessions")
        session = ChatSession(
            agent,
            console,
            renderer,
            approver,
            store,
            history_file=state_dir(terminal.environ) / "history",
            audit_log=session_log(terminal.environ, agent.policy.cwd),
            max_sessions=config.agent.max_sessions,
            catalogue=catalogue,
            seen=Seen(state_dir(terminal.environ) / "commands-seen"),
        )
        if resume:
            session.load(name)
        if config.agent.prewarm:  # while the user types the first message
            agent.start_prewarm(session.conversation)
        return session.run()


def _say_header(terminal: Terminal, agent: Agent, info: ModelInfo, console: FittedConsole) -> None:
    """The session's header: model, server, directory, modes, then the notes on them (plan
    mode, confirm: none, the model, the instruction files)."""
    from rich.markup import escape
    from rich.text import Text

    from cli.ui.chat_commands import think_state
    from cli.ui.text import sanitize

    settings = agent.settings
    parts = [
        Text("metona-agent", style="bold"),
        Text(sanitize(settings.model)),
        Text(sanitize(agent.backend.host)),
        Text(sanitize(agent.policy.cwd)),
        *([Text("plan", style="bold cyan")] if agent.plan_mode else []),
        Text(f"tools {'on' if agent.tools_on() else 'off'}"),
        Text(f"confirm: {agent.policy.config.confirm}"),
        Text(f"think {think_state(agent.think) if info.supports_thinking else 'off'}"),
        Text("/help", style="dim"),
    ]
    for row in header_lines(parts, console.width):
        console.print(row, highlight=False)
    if agent.plan_mode:
        console.print(f"[cyan]{escape(PLAN_ON)}[/]", highlight=False)
    if agent.policy.config.confirm == "none":  # nothing but deletes is asked: said apart
        console.print(f"[yellow]{escape(CONFIRM_NONE)}[/]", highlight=False)
    note = model_note(info, agent.backend.host, terminal.environ, always=False)
    if note:  # what the backend had to assume about the model: said the first time
        console.print(f"[yellow]note:[/] {escape(sanitize(note))}", highlight=False)
    read = agent.instructions.summary()
    if read:
        console.print(f"[dim]instructions: {escape(sanitize(read))}[/]", highlight=False)
    for note in agent.instructions.notes:
        console.print(f"[yellow]instructions:[/] {escape(sanitize(note))}", highlight=False)


PLAN_ON = (
    "plan mode: only the tools that change nothing are offered; /go leaves it (the plan stays "
    "in the conversation)"
)
CONFIRM_NONE = (
    "confirm: none — writes, edits and moves run without asking; deletes still ask "
    "(/tools lists each tool)"
)


def _whole_tree_agreed(agent: Agent, console: Any, keys: Any) -> bool:
    """Chat started in / or the home directory: said, and asked once whether to go on."""
    from rich.text import Text

    from cli.safety.policy import whole_trees
    from cli.ui.text import sanitize

    trees = whole_trees(agent.policy)
    for tree in trees:
        line = f"⚠ the allowed directory is {sanitize(tree)}: the model may read and change "
        console.print(Text(line + "files anywhere under it", "yellow"))
    if not trees:
        return True
    if keys.read_key("work here anyway?  [y] yes  [n] no, quit  ", "yn") == "y":
        return True
    console.print(Text("cd into your project, then: agent chat", "dim"))
    return False


def header_lines(parts: Sequence[Text], width: int) -> list[Text]:
    """The header's parts joined by ` · `, as many on a line as fit in `width`: a line breaks
    between two parts, never inside one (`confirm: write-only` stays whole); a part wider
    than a line has lines of its own, folded by the console. The ` ·` between two lines ends
    the first, or starts the second where the first is full (it would wrap alone)."""
    from rich.text import Text

    lines: list[Text] = []
    line = Text()
    for index, part in enumerate(parts):
        more = 2 if index < len(parts) - 1 else 0  # the ` ·` that ends a line with more after
        if line.plain and line.cell_len + 3 + part.cell_len + more > width:
            full = line.cell_len + 2 > width
            if not full:
                line.append(" ·")
            lines.append(line)
            line = Text("· " if full else "")
        if line.plain and line.plain != "· ":
            line.append(" · ", style="dim" if part.style == "dim" else "")
        line.append_text(part)
    lines.append(line)
    return lines
