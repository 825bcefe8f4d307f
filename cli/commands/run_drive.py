"""`agent run`'s run itself, once its agent is built: the trace on stderr and stream-json on
stdout wired to the loop's events, the audit log they go to, the events consumed, and how the
run ends — the answer or the JSON object written, the exit status by why it stopped, and on a
failure, Ctrl-C, SIGTERM or SIGHUP what the model had written kept and the work saved to
resume."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cli.commands.frame import Terminal, isatty, model_note, print_json
from cli.commands.signals import RunSignals, stopped_line
from cli.errors import AgentError, ExitStatus, Stopped, UsageError

if TYPE_CHECKING:
    from cli.config.settings import Config
    from cli.loop.agent import Agent
    from cli.loop.events import Event
    from cli.loop.images import Image
    from cli.loop.instructions import Instructions
    from cli.records.audit_events import AuditLog
    from cli.ui.stream_json import StreamJson
    from cli.ui.trace import LazyConsole, RunRecord, RunTrace


def drive(
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

    as_json = output == "json"
    record, trace, stream = _trace(terminal, agent, console, output, verbose)

    def said(event: Event) -> None:
        if stream is not None:
            stream.handle(event)
        trace.handle(event)

    # the run's audit records and, if its work is kept, its session: one name
    audit_log = session_log(terminal.environ, agent.policy.cwd, run_name(terminal))
    if agent.context.changes is not None:  # and its changes, for undo to say where they came from
        agent.context.changes.name = audit_log.session_id
    conversation: list[dict[str, Any]] = []

    def save() -> str:
        return _save_unfinished(
            terminal,
            agent.settings.model,
            conversation,
            config.agent.max_sessions,
            name=audit_log.session_id,
        )

    try:
        if stream is not None:
            early = agent.mcp_tools()  # the MCP servers' tools belong in the start line
            stream.start(agent, yes=yes, images=images)
            for line in early:
                said(Notice(line))
        for event in reads:  # a command's @files, read before the run, and hooks on them
            record_read(audit_log, event, said)
        seen = _attached_images(agent, images, said, audit_log) if images else []
        if seen:
            from cli.loop.images import image_note

            text = f"{text}\n\n{image_note(seen)}"
        # closing(): on Ctrl-C the audit wrapper records the call that was cut short.
        run = agent.run(conversation, text, [image.data for image in seen])
        with contextlib.closing(audited(run, audit_log)) as events:
            _say_first(terminal, agent, verbose, said)
            trace.consume(events if stream is None else stream.tee(events))
    except (AgentError, KeyboardInterrupt, Stopped, OSError) as exc:
        if signals is not None:
            signals.quiet = True  # winding down: a second Ctrl-C cannot cut it short
        received = signals.received if signals is not None else None
        if isinstance(exc, OSError) and received is None:
            # stdout or the terminal gone with no signal (`| head -1`): the work is kept,
            # and the error goes on to be reported as any other
            save()
            raise
        if stream is not None and not isinstance(exc, OSError):
            # if the failure came first: the stream has its start
            stream.start(agent, yes=yes, images=images)
        if not isinstance(exc, AgentError):
            return _stopped(terminal, trace, output, stream, exc, received, save)
        _failed(terminal, record, trace, stream, as_json, exc, save)
        raise
    if signals is not None:
        signals.quiet = True  # the run is over: its output is written whole
    return _answered(terminal, record, trace, output)


def _answered(terminal: Terminal, record: RunRecord, trace: RunTrace, output: str) -> ExitStatus:
    """The run ended without an error: the JSON object, or the answer if it did not stream;
    the exit status by why it ended."""
    as_json = output == "json"
    if as_json:
        print_json(terminal.stdout, record.to_json())
    elif record.answer and output == "text" and not trace.streams_answer:
        terminal.stdout.write(shown_answer(record.answer, isatty(terminal.stdout)) + "\n")
        terminal.stdout.flush()
    return exit_status(record.stop_reason)


def _trace(
    terminal: Terminal, agent: Agent, console: LazyConsole, output: str, verbose: bool
) -> tuple[RunRecord, RunTrace, StreamJson | None]:
    """The run's record and its trace on stderr; with stream-json, the stream on stdout."""
    from cli.ui.trace import RunRecord, RunTrace

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
    return record, trace, stream


def _say_first(
    terminal: Terminal, agent: Agent, verbose: bool, said: Callable[[Event], None]
) -> None:
    """What is said as the run starts: the backend's note on the model, the instructions."""
    from cli.loop.events import Notice

    note = model_note(agent.model_info(), agent.backend.host, terminal.environ, always=verbose)
    if note:  # what the backend had to assume: said the first time (and with -v)
        said(Notice(note))
    for line in _instruction_lines(agent.instructions, verbose):
        said(Notice(line))


def _stopped(
    terminal: Terminal,
    trace: RunTrace,
    output: str,
    stream: StreamJson | None,
    exc: BaseException,
    received: int | None,
    save: Callable[[], str],
) -> ExitStatus:
    """Ctrl-C, SIGTERM or SIGHUP ended the run: what it had written kept, its work saved,
    the ending said on stderr; 128 + the signal's number."""
    import signal

    # An OSError here came from writing to a terminal the same signal closed (a
    # window shut: SIGHUP, then EIO): it is that signal's ending.
    signum = exc.signum if isinstance(exc, Stopped) else received or int(signal.SIGINT)
    try:
        _interrupted(terminal, trace, output, stream, signum)
    except OSError:
        pass  # stdout gone (the reader had the same SIGHUP): nothing more to write
    finally:
        saved = save()
    kept = f"; the work so far is saved: agent chat --resume {saved}" if saved else ""
    with contextlib.suppress(OSError):  # stderr may be the closed terminal too
        terminal.stderr.write(f"agent: {stopped_line(signum)}{kept}\n")
        terminal.stderr.flush()
    return ExitStatus.of_signal(signum)


def _failed(
    terminal: Terminal,
    record: RunRecord,
    trace: RunTrace,
    stream: StreamJson | None,
    as_json: bool,
    exc: AgentError,
    save: Callable[[], str],
) -> None:
    """An expected failure ended the run: its work saved (the message says where), and in
    the JSON object or stream-json's `end` line; the caller raises it on."""
    saved = save()
    if saved:
        exc.message += f" (the work so far is saved: agent chat --resume {saved})"
    if as_json:
        trace.cut_short()  # the steps and the time it took, as far as it got
        record.stop_reason = "error"
        record.error = exc.message
        print_json(terminal.stdout, record.to_json())
    elif stream is not None:
        stream.end("error", error=exc.message)


def record_read(audit_log: AuditLog, event: Event, said: Callable[[Event], None]) -> None:
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


def run_name(terminal: Terminal) -> str:
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
