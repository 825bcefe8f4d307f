"""`agent run --command NAME ARGS…`: the custom command's prompt, built before the run — the
command found (the project's .metona/commands/ or the user's), shown and confirmed on first
use in a project, its `@files` attached, its model and plan mode set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from cli.commands.frame import Terminal
from cli.commands.run_drive import record_read, run_name
from cli.commands.run_input import read_prompt
from cli.errors import UsageError

if TYPE_CHECKING:
    from cli.config.settings import Config
    from cli.loop.agent import Agent
    from cli.loop.events import Event
    from cli.wiring import Choices


def command_prompt(
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
        audit_log = session_log(terminal.environ, agent.policy.cwd, run_name(terminal))
        for event in attached.events:
            record_read(audit_log, event, lambda e: _note_on(terminal, e))
        raise UsageError(f"--command {found.name}: {sanitize(attached.refused)}; nothing was sent")
    # The prompt is the command's text (a body or arguments of `-` is that text, not stdin);
    # piped stdin is added after it, as after any prompt.
    limit = config.policy.limits.max_read_bytes
    return read_prompt(attached.text, terminal.stdin, limit, dash=False), attached.events


def _note_on(terminal: Terminal, event: Event) -> None:
    from cli.loop.events import Notice
    from cli.ui.text import sanitize

    if isinstance(event, Notice):
        terminal.stderr.write(f"note: {sanitize(event.text)}\n")
