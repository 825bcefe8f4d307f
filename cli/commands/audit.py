"""`agent audit verify` and `agent audit show`: the audit log, checked and read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cli.commands.frame import Terminal
from cli.errors import AgentError

audit_app = typer.Typer(
    name="audit",
    help="The audit log: one record per tool call, chained by hashes "
    "($XDG_STATE_HOME/metona-agent/audit.jsonl).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()
commands.add_typer(audit_app)

AuditFileOpt = Annotated[
    str | None,
    typer.Option(
        "--file",
        metavar="PATH",
        help="The log to read (default: $XDG_STATE_HOME/metona-agent/audit.jsonl).",
    ),
]


@audit_app.command(
    "verify",
    help="Check every record's hash and the chain between them. Exit codes: 0 intact, "
    "1 broken (the first broken line is named) or unreadable.",
)
def audit_verify(file: AuditFileOpt = None) -> None:
    from cli.records.audit import verify

    terminal = Terminal.from_process()
    path = _audit_path(terminal, file)
    try:
        check = verify(path)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if not check.intact:
        raise AgentError(f"{path}, line {check.line}: {check.problem}")
    if not check.records:  # a fresh install: nothing recorded is not a broken chain
        why = f"{path} is empty" if check.exists else f"no audit log at {path}: {_FIRST_CALL}"
        terminal.stdout.write(f"no records yet ({why})\n")
        return
    plural = "" if check.records == 1 else "s"
    terminal.stdout.write(f"{check.records} record{plural}, chain intact\n")


@audit_app.command(
    "show",
    help="The last records, one per line: time (UTC), session, tool, key argument, "
    "outcome (allowed by whom, declined, denied and the rule, invalid, failed, interrupted), "
    "duration.",
)
def audit_show(
    count: Annotated[int, typer.Option("-n", min=1, metavar="N", help="How many records.")] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the records as they are stored, one a line.")
    ] = False,
    file: AuditFileOpt = None,
) -> None:
    from cli.records.audit import tail
    from cli.ui.audit_view import NOT_A_RECORD, audit_row
    from cli.ui.layout import terminal_width

    terminal = Terminal.from_process()
    width = terminal_width(terminal.stdout)  # piped: one record a line, as scripts read

    path = _audit_path(terminal, file)
    try:
        rows = tail(path, count)
    except FileNotFoundError:
        terminal.stderr.write(f"no tool calls recorded yet ({path} does not exist)\n")
        rows = []
    except OSError as exc:
        raise _unreadable(path, exc) from None
    for number, record in rows:
        if not as_json:
            terminal.stdout.write(audit_row(number, record, width) + "\n")
        elif record is not None:
            terminal.stdout.write(json.dumps(record) + "\n")
        else:
            terminal.stderr.write(f"line {number}: {NOT_A_RECORD}\n")


def _audit_path(terminal: Terminal, file: str | None) -> Path:
    from cli.records.audit import default_path

    return Path(file).expanduser() if file else default_path(terminal.environ)


_FIRST_CALL = "it is written on the first tool call"


def _unreadable(path: Path, exc: OSError) -> AgentError:
    if isinstance(exc, FileNotFoundError):
        return AgentError(f"no audit log at {path}: {_FIRST_CALL}")
    return AgentError(f"cannot read the audit log {path}: {exc.strerror or exc}")
