"""`agent sessions`: the saved chats and unfinished runs, listed and removed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.commands.complete import session_names
from cli.commands.frame import Terminal

if TYPE_CHECKING:
    from cli.records.sessions import Session, SessionStore, UnreadableSession

sessions_app = typer.Typer(
    name="sessions",
    help="Saved chats and unfinished runs ($XDG_DATA_HOME/metona-agent/sessions): list them, "
    "or remove one. `agent chat --resume NAME` reopens one.",
    invoke_without_command=True,
    rich_markup_mode=None,
)

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()
commands.add_typer(sessions_app)


@sessions_app.callback()
def sessions_list(
    ctx: typer.Context,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list: name, kind, last_used, turns, model, cwd (all null, and an "
            "error saying why, for a session that cannot be read).",
        ),
    ] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from cli.ui.text import sanitize

    terminal = Terminal.from_process()
    rows = [_row(entry) for entry in _store(terminal.environ).listing()]
    if as_json:
        terminal.stdout.write(json.dumps(rows, ensure_ascii=False) + "\n")
        return
    if not rows:
        terminal.stderr.write("no saved sessions yet: `agent chat` saves one per chat\n")
        return
    for row in rows:
        if "error" in row:
            terminal.stdout.write(
                f"{sanitize(str(row['name'])):<24} unreadable: {sanitize(str(row['error']))}"
                f" (agent sessions rm {sanitize(str(row['name']))} removes it)\n"
            )
            continue
        when = str(row["last_used"]).replace("T", " ").removesuffix("+00:00")
        terminal.stdout.write(
            f"{sanitize(str(row['name'])):<24} {row['kind']:<4} {when} UTC  "
            f"{row['turns']:>3} {'turn ' if row['turns'] == 1 else 'turns'}  "
            f"{sanitize(str(row['model']))}  "
            f"{sanitize(str(row['cwd']))}\n"
        )


@sessions_app.command("rm", help="Remove the saved session NAME.")
def sessions_rm(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", help="The session to remove.", autocompletion=session_names),
    ],
) -> None:
    terminal = Terminal.from_process()
    path = _store(terminal.environ).remove(name)
    terminal.stderr.write(f"removed {path}\n")


def _row(entry: Session | UnreadableSession) -> dict[str, Any]:
    """One session as `--json` lists it; one that cannot be read has every field null and an
    `error` saying why (the readable ones have no `error`)."""
    from cli.records.sessions import UnreadableSession

    if isinstance(entry, UnreadableSession):
        empty = dict.fromkeys(("kind", "last_used", "turns", "model", "cwd"))
        return {"name": entry.name, **empty, "error": entry.reason}
    return {
        "name": entry.name,
        "kind": entry.kind,
        "last_used": entry.saved,
        "turns": entry.turns,
        "model": entry.model,
        "cwd": entry.cwd,
    }


def _store(environ: Mapping[str, str]) -> SessionStore:
    from cli.config.settings import data_dir
    from cli.records.sessions import SessionStore

    return SessionStore(data_dir(environ) / "sessions")
