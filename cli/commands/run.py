"""`agent run`: one prompt to completion; the answer on stdout, a trace of tool calls on stderr
(or JSON, or a stream of JSON lines), and an exit code that says how the run ended."""

from __future__ import annotations

import contextlib
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
    isatty,
    print_json,
    think_choice,
)
from cli.commands.run_input import controlling_terminal, read_prompt
from cli.commands.signals import RunSignals, run_signals, stopped_line
from cli.errors import AgentError, ExitStatus, Stopped, UsageError

if TYPE_CHECKING:
    from cli.config.settings import Config
    from cli.loop.agent import Agent
    from cli.loop.events import Event
    from cli.loop.images import Image
    from cli.loop.instructions import Instructions
    from cli.records.audit_events import AuditLog
    from cli.ui.stream_json import StreamJson
    from cli.ui.trace import LazyConsole, RunTrace
    from cli.wiring import Choices

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()


@commands.command(
    "run",
    help="Run one prompt to completion and print the answer on stdout; a trace of tool calls "
    "goes to stderr. Piped stdin is appended to the prompt; a prompt of '-' is read from "
    "stdin. Exit codes: 0 answered, 1 server/model/stream failure, 2 usage or config error, "
    "3 step limit reached, answer cut short or empty, 130 interrupted.",
)
def run(
    ctx: typer.Context,
    prompt: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PROMPT",
            help="What to ask; '-' reads it from stdin. With --command: the command's arguments.",
            show_default=False,
        ),
    ] = None,
    model: ModelOpt = None,
    host: HostOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[
        bool,
        typer.Option(
            "-y",
            "--yes",
            help="Approve, without asking, the tools listed in policy.unattended (never for "
            "paths outside the allowed dirs). Other confirmations are still asked on the "
            "terminal, or denied when there is none.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object on stdout instead of the answer: answer, model, steps, "
            "stop_reason, tool_calls, stats (the same as --output-format json).",
        ),
    ] = False,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            metavar="text|json|stream-json",
            help="What stdout carries: text (the answer), json (one object at the end, as "
            "--json) or stream-json (one JSON object a line as the run goes: start, text, "
            "thinking, tool_call, tool_result, step_end, notice, end; see docs/chat-and-run.md).",
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps",
            min=1,
            metavar="N",
            help="At most this many model calls (default: agent.max_steps).",
        ),
    ] = None,
    think: ThinkOpt = None,
    think_level: ThinkLevelOpt = None,
    api: ApiOpt = None,
    no_instructions: NoInstructionsOpt = False,
    mcp_config: McpConfigOpt = None,
    attach: Annotated[
        list[str] | None,
        typer.Option(
            "-a",
            "--attach",
            metavar="FILE",
            help="Attach this image (PNG, JPEG, GIF, WebP, BMP; at most 20 MB) for a vision "
            "model; repeatable. Read through the same policy as read_file.",
        ),
    ] = None,
    prewarm: Annotated[
        bool,
        typer.Option(
            "--prewarm",
            help="Send the prompt's fixed start (system prompt, our tools, context) to the "
            "server as the run starts, while its MCP servers start (chat does it by default: "
            "agent.prewarm; see docs/context-and-servers.md).",
        ),
    ] = False,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Plan mode: offer only the tools that change nothing (read_file, "
            "list_directory, search_files, git_status, git_diff) and ask for a plan.",
        ),
    ] = False,
    command: Annotated[
        str | None,
        typer.Option(
            "--command",
            metavar="NAME",
            help="Send the command NAME.md of the project's .metona/commands/ (or "
            "~/.config/metona-agent/commands/), with the PROMPT words as its arguments.",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v",
            "--verbose",
            help="Also say on stderr which instruction files were read, and show what MCP "
            "servers write on their stderr (otherwise only in their logs).",
        ),
    ] = False,
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
    asker = None
    # Questions are read where a person types: stdin, or when stdin is a pipe (`cat x |
    # agent run …` at a terminal) the controlling terminal, as the question is shown on it.
    answers = terminal.stdin if terminal.interactive() else controlling_terminal(terminal)
    if answers is not None:
        from cli.ui.approve import Consequences
        from cli.ui.confirm import LineApprover

        consequences = Consequences(
            config.policy.trash, config.policy.commands.sandbox, undo="agent undo"
        )
        asker = LineApprover(
            console.get(),
            answers,
            cwd=terminal.cwd,
            consequences=consequences,
            bell=config.agent.bell,
        )

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
            text, reads = _command_prompt(terminal, agent, config, choices, command, answers)
        except BaseException:
            agent.close()
            raise
    if prewarm:
        agent.start_prewarm()
    from cli.safety.policy import whole_trees
    from cli.ui.text import sanitize

    for tree in whole_trees(agent.policy):  # run from / or ~: said, not asked
        terminal.stderr.write(
            f"note: the allowed directory is {sanitize(tree)}: the model may read and change files "
            "anywhere under it\n"
        )
    with run_signals() as signals:
        try:
            return _drive(
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


def _drive(
    terminal: Terminal,
    agent: Agent,
    config: Config,
    text: str,
    console: LazyConsole,
    output: str,
    verbose: bool,
    *,
    yes: bool = False,
    images: Sequence[str] = (),
    signals: RunSignals | None = None,
    reads: Sequence[Any] = (),
) -> ExitStatus:
    from cli.loop.events import Notice
    from cli.records.audit_events import audited, session_log
    from cli.ui.trace import RunRecord, RunTrace

    as_json = output == "json"
    record = RunRecord(model=agent.settings.model, mode="plan" if agent.plan_mode else "act")
    trace = RunTrace(
        console,
        record,
        show_thinking=bool(agent.think),
        stdin=terminal.stdin,
        # a terminal: the answer streams there, unless stdout carries JSON
        stdout=terminal.stdout if output == "text" else None,
        verbose=verbose,
    )
    stream = None
    if output == "stream-json":
        from cli.ui.stream_json import StreamJson

        stream = StreamJson(lambda line: print_json(terminal.stdout, line), verbose=verbose)

    def said(event: Event) -> None:
        if stream is not None:
            stream.handle(event)
        trace.handle(event)

    # the run's audit records and, if its work is kept, its session: one name
    audit_log = session_log(terminal.environ, agent.policy.cwd, _run_name(terminal))
    if agent.context.changes is not None:  # and its changes, for undo to say where they came from
        agent.context.changes.name = audit_log.session_id
    conversation: list[dict[str, Any]] = []
    try:
        if stream is not None:
            early = agent.mcp_tools()  # the MCP servers' tools belong in the start line
            stream.start(agent, yes=yes, images=images)
            for line in early:
                said(Notice(line))
        for event in reads:  # a command's @files, read before the run, and hooks on them
            _record_read(audit_log, event, said)
        seen = _attached_images(agent, images, said, audit_log) if images else []
        if seen:
            from cli.loop.images import image_note

            text = f"{text}\n\n{image_note(seen)}"
        # closing(): on Ctrl-C the audit wrapper records the call that was cut short.
        run = agent.run(conversation, text, [image.data for image in seen])
        with contextlib.closing(audited(run, audit_log)) as events:
            if agent.model_info().note:  # what the backend had to assume, said once
                said(Notice(agent.model_info().note))
            for line in _instruction_lines(agent.instructions, verbose):
                said(Notice(line))
            trace.consume(events if stream is None else stream.tee(events))
    except (AgentError, KeyboardInterrupt, Stopped, OSError) as exc:
        if signals is not None:
            signals.quiet = True  # winding down: a second Ctrl-C cannot cut it short
        received = signals.received if signals is not None else None
        if isinstance(exc, OSError) and received is None:
            # stdout or the terminal gone with no signal (`| head -1`): the work is kept,
            # and the error goes on to be reported as any other
            _save_unfinished(
                terminal,
                agent.settings.model,
                conversation,
                config.agent.max_sessions,
                name=audit_log.session_id,
            )
            raise
        if stream is not None and not isinstance(exc, OSError):
            # if the failure came first: the stream has its start
            stream.start(agent, yes=yes, images=images)
        if not isinstance(exc, AgentError):
            import signal

            # An OSError here came from writing to a terminal the same signal closed (a
            # window shut: SIGHUP, then EIO): it is that signal's ending.
            signum = exc.signum if isinstance(exc, Stopped) else received or int(signal.SIGINT)
            try:
                _interrupted(terminal, trace, output, stream, signum)
            except OSError:
                pass  # stdout gone (the reader had the same SIGHUP): nothing more to write
            finally:
                saved = _save_unfinished(
                    terminal,
                    agent.settings.model,
                    conversation,
                    config.agent.max_sessions,
                    name=audit_log.session_id,
                )
            kept = f"; the work so far is saved: agent chat --resume {saved}" if saved else ""
            with contextlib.suppress(OSError):  # stderr may be the closed terminal too
                terminal.stderr.write(f"agent: {stopped_line(signum)}{kept}\n")
                terminal.stderr.flush()
            return ExitStatus.of_signal(signum)
        saved = _save_unfinished(
            terminal,
            agent.settings.model,
            conversation,
            config.agent.max_sessions,
            name=audit_log.session_id,
        )
        if saved:
            exc.message += f" (the work so far is saved: agent chat --resume {saved})"
        if as_json:
            trace.cut_short()  # the steps and the time it took, as far as it got
            record.stop_reason = "error"
            record.error = exc.message
            print_json(terminal.stdout, record.to_json())
        elif stream is not None:
            stream.end("error", error=exc.message)
        raise
    if signals is not None:
        signals.quiet = True  # the run is over: its output is written whole
    if as_json:
        print_json(terminal.stdout, record.to_json())
    elif record.answer and output == "text" and not trace.streams_answer:
        terminal.stdout.write(shown_answer(record.answer, isatty(terminal.stdout)) + "\n")
        terminal.stdout.flush()
    return exit_status(record.stop_reason)


def _project_lines(agent: Agent) -> list[str]:
    """What the project's .metona/ would set and cannot (hooks), one line each."""
    from cli.loop.custom_commands import project_hooks
    from cli.ui.text import sanitize

    return [sanitize(line) for line in project_hooks(agent.policy.cwd)]


def _command_prompt(
    terminal: Terminal,
    agent: Agent,
    config: Config,
    choices: Choices,
    command: tuple[str, Sequence[str]],
    answers: TextIO | None,
) -> tuple[str, list[Any]]:
    """`--command NAME ARGS…`: the command's prompt, its `@files` attached; its model (unless
    -m says another) and plan mode set. A project's command not yet seen in this project
    (or changed since) is shown on stderr first, and asked about where a person can answer."""
    import dataclasses

    from cli.config.settings import config_dir, state_dir
    from cli.loop.custom_commands import Seen, load_commands
    from cli.loop.mentions import attach_files
    from cli.ui.text import sanitize

    name, words = command
    catalogue = load_commands(
        agent.policy.cwd, str(config_dir(terminal.environ)), agent.policy.hides
    )
    found = catalogue.get(name)
    if found is None:
        refused = [n for n in catalogue.notes if f"/{name.lower()}" in n or f"{name}.md" in n]
        if refused:
            raise UsageError(sanitize(refused[0]))
        known = ", ".join(sorted(catalogue.commands)) or "none"
        raise UsageError(
            f"no command {sanitize(name)}: commands here: {known} (NAME.md in .metona/commands/ "
            "of the project, or in ~/.config/metona-agent/commands/)"
        )
    prompt = found.expand(" ".join(words), words)
    seen = Seen(state_dir(terminal.environ) / "commands-seen")
    if seen.needs_showing(catalogue.project, found):
        terminal.stderr.write(
            f"project command /{found.name} ({sanitize(found.path)}), first use here; it sends:\n"
        )
        for line in found.settings():
            terminal.stderr.write(f"  {sanitize(line)}\n")
        for line in prompt.splitlines() or [""]:
            terminal.stderr.write(f"  │ {sanitize(line)}\n")
        terminal.stderr.flush()
        if answers is not None:
            terminal.stderr.write("send it? [y/N] ")
            terminal.stderr.flush()
            if answers.readline().strip().lower() not in ("y", "yes"):
                raise UsageError(f"/{found.name} was not sent: its text was not confirmed")
        seen.mark(catalogue.project, found)
    if found.model and choices.model is None:
        agent.settings = dataclasses.replace(agent.settings, model=found.model, model_chosen=True)
    if found.plan:
        agent.plan_mode = True
    attached = attach_files(agent, prompt)
    if attached.refused:
        from cli.records.audit_events import session_log

        # What was read, refused or decided by a hook is recorded though nothing is sent.
        audit_log = session_log(terminal.environ, agent.policy.cwd, _run_name(terminal))
        for event in attached.events:
            _record_read(audit_log, event, lambda e: _note_on(terminal, e))
        raise UsageError(f"--command {found.name}: {sanitize(attached.refused)}; nothing was sent")
    # The prompt is the command's text (a body or arguments of `-` is that text, not stdin);
    # piped stdin is added after it, as after any prompt.
    limit = config.policy.limits.max_read_bytes
    return read_prompt(attached.text, terminal.stdin, limit, dash=False), attached.events


def _record_read(audit_log: AuditLog, event: Event, said: Callable[[Event], None]) -> None:
    """An event of a read done before the run (a command's @file): its result and the hooks
    that ran on it go to the audit log, what the hooks said to the trace."""
    from cli.loop.events import Notice, ToolResult
    from cli.loop.hooks import HookRun

    if isinstance(event, HookRun):
        audit_log.record_hook(event)
    elif isinstance(event, ToolResult):
        audit_log.record(event)
    elif isinstance(event, Notice):
        said(event)


def _note_on(terminal: Terminal, event: Event) -> None:
    from cli.loop.events import Notice
    from cli.ui.text import sanitize

    if isinstance(event, Notice):
        terminal.stderr.write(f"note: {sanitize(event.text)}\n")


def _attached_images(
    agent: Agent, paths: Sequence[str], said: Callable[[Event], None], audit_log: AuditLog
) -> list[Image]:
    """`-a FILE`: each image read as read_file reads (policy, gate, audit); a model that
    cannot see images is sent none (a usage error, before anything is sent)."""
    from cli.loop.events import Notice
    from cli.loop.images import cannot_see, read_image, sees_images, too_many_images, unknown_sight

    model = agent.settings.model
    sight = sees_images(agent.model_info())
    if sight is False:
        raise UsageError(f"-a {paths[0]}: {cannot_see(model)}; nothing was sent")
    if sight is None:
        said(Notice(unknown_sight(model)))
    images: list[Image] = []
    for path in dict.fromkeys(paths):
        attached = read_image(agent, path)
        audit_log.record(attached.record)
        if attached.image is None:
            raise UsageError(f"-a {path}: {attached.error}; nothing was sent")
        too_many = too_many_images(sum(image.size for image in images), attached.image)
        if too_many:  # the run could not be saved to resume (docs/chat-and-run.md, Images)
            raise UsageError(f"-a {path}: {too_many}; nothing was sent")
        images.append(attached.image)
    return images


def exit_status(stop_reason: str | None) -> ExitStatus:
    """How a run that ended without an error exits, by why it ended (README, Exit codes)."""
    # The work is not done: the step limit, a refused call repeated, an answer cut for
    # length, an empty answer.
    if stop_reason in ("max_steps", "repeating", "length", "empty"):
        return ExitStatus.UNFINISHED
    return ExitStatus.OK


def _interrupted(
    terminal: Terminal,
    trace: RunTrace,
    output: str,
    stream: StreamJson | None,
    signum: int,
) -> None:
    """Ctrl-C, SIGTERM or SIGHUP: what the model had written is kept — on stdout (a terminal
    has it already, as it streamed), in the JSON object, or in stream-json's `end` line —
    written before the work is saved (the caller then says on stderr what happened)."""
    if output == "json":
        record = trace.cut_short()  # the steps and the time it took, as far as it got
        record.stop_reason, record.error = "interrupted", stopped_line(signum)
        print_json(terminal.stdout, record.to_json())
    elif stream is not None:
        stream.end("interrupted")
    elif trace.partial_answer.strip() and not trace.streams_answer:
        terminal.stdout.write(shown_answer(trace.partial_answer, isatty(terminal.stdout)) + "\n")
        terminal.stdout.flush()


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


def _instruction_lines(instructions: Instructions, verbose: bool) -> list[str]:
    """What `-v` says of the project's instruction files; what was cut is said always."""
    lines = []
    if verbose:
        read = instructions.summary()
        lines.append(f"instructions: {read}" if read else "instructions: no files")
    return lines + [
        f"instructions: {note}" for note in instructions.notes if verbose or "cut" in note
    ]


def shown_answer(answer: str, on_terminal: bool) -> str:
    """The answer as stdout gets it (the final newline is added by the caller): piped or in
    a file, the model's text exactly as it came; on a terminal, with every control sequence
    escaped (an answer must not retitle the window, write the clipboard or erase the trace)."""
    answer = answer.rstrip("\n")
    if not on_terminal:
        return answer
    from cli.ui.text import sanitize

    return sanitize(answer.replace("\r\n", "\n"), multiline=True)


def _run_name(terminal: Terminal) -> str:
    """`run-<time>`, the name a run's audit records carry and its session, if kept, is saved
    under: one no saved session has and no recent audit record carries (runs a second apart
    are two sessions)."""
    from cli.config.settings import data_dir
    from cli.records.audit import default_path, recent_sessions
    from cli.records.sessions import SessionStore, timestamp_name

    store = SessionStore(data_dir(terminal.environ) / "sessions")
    taken = recent_sessions(default_path(terminal.environ))
    base = name = f"run-{timestamp_name()}"
    number = 2
    while name in taken or store.exists(name):
        name, number = f"{base}-{number}", number + 1
    return name


def _save_unfinished(
    terminal: Terminal,
    model: str,
    conversation: list[dict[str, Any]],
    max_sessions: int = 100,
    *,
    name: str = "",
) -> str:
    """Keep a run that failed after the model had started working, so that nothing is
    lost: `agent chat --resume NAME` continues it. The session's name, or "" if not saved."""
    if not any(m.get("role") in ("assistant", "tool") for m in conversation):
        return ""
    from cli.config.settings import data_dir
    from cli.records.sessions import SessionStore, timestamp_name

    name = name or f"run-{timestamp_name()}"
    store = SessionStore(data_dir(terminal.environ) / "sessions")
    try:
        store.save(name, model, conversation, kind="run", cwd=terminal.cwd)
        store.prune(max_sessions, spare=name)
    except (OSError, AgentError):
        return ""
    return name
