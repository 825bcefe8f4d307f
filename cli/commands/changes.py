"""`agent history`, `agent undo` and `agent redo`: the changes the agent made, taken back
and brought back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.frame import Terminal, print_json

if TYPE_CHECKING:
    from cli.journal.changes import ChangeStore

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()


@commands.command(
    "history",
    help="The changes the agent made (writes, deletes, new directories, undos and redos), "
    "oldest first: id, time (UTC), tool (undo or redo for those), action, path, size; an "
    "undone one says by which undo. `agent undo ID` takes one back; in chat: /history.",
)
def history(
    count: Annotated[
        int, typer.Option("-n", min=1, metavar="N", help="How many of the latest.")
    ] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON record a line.")] = False,
) -> None:
    from dataclasses import asdict

    from cli.ui.changes_view import history_rows

    terminal = Terminal.from_process()
    changes = _change_store(terminal).history()[-count:]
    if not changes:
        terminal.stderr.write("no changes recorded yet\n")
    elif as_json:
        for change in changes:
            print_json(terminal.stdout, asdict(change))
    else:
        terminal.stdout.write("\n".join(history_rows(changes, terminal.cwd)) + "\n")


NeverAskOpt = Annotated[
    bool,
    typer.Option("-y", "--yes", help="Never ask: a conflict (the file changed since) is refused."),
]


@commands.command(
    "undo",
    help="Take back the newest change the agent made under this directory that is not undone "
    "yet (again: the one before it, and so on), or change ID from `agent history`: a write "
    "gets its old content back, a delete comes back from the trash, a new file or directory "
    "goes. `agent redo` brings back what the last undo took back. A file that changed since "
    "is never overwritten without asking. Exit codes: 0 undone, 1 not undone.",
)
def undo(
    change: Annotated[
        int | None,
        typer.Argument(help="The change to undo (default: the newest not undone here)."),
    ] = None,
    turn: Annotated[
        bool,
        typer.Option(
            "--turn",
            help="Take back every change of the last turn (or of change ID's turn), newest "
            "first, in one step: one `agent redo` brings them all back.",
        ),
    ] = False,
    everywhere: Annotated[
        bool,
        typer.Option("--all", help="Not only the changes under this directory."),
    ] = False,
    yes: NeverAskOpt = False,
) -> None:
    _undo_command(change, turn=turn, everywhere=everywhere, yes=yes, redo=False)


@commands.command(
    "redo",
    help="Bring back what the last `agent undo` under this directory took back (a whole turn "
    "if it took one); again: the undo before it. A new change by the agent clears what can "
    "be redone, as in an editor. Exit codes: 0 redone, 1 not redone.",
)
def redo(
    everywhere: Annotated[
        bool,
        typer.Option("--all", help="Not only the undos of changes under this directory."),
    ] = False,
    yes: NeverAskOpt = False,
) -> None:
    _undo_command(None, turn=False, everywhere=everywhere, yes=yes, redo=True)


def _undo_command(
    change: int | None, *, turn: bool, everywhere: bool, yes: bool, redo: bool
) -> None:
    """`agent undo` and `agent redo`: the conversation on stderr, a conflict asked on a tty."""
    from cli.safety.policy import Policy
    from cli.ui.changes_view import undo_flow
    from cli.wiring import Choices, load

    terminal = Terminal.from_process()

    def say(line: str) -> None:
        terminal.stderr.write(line + "\n")

    def ask(question: str) -> bool:
        from cli.ui.keys import read_fresh_line

        terminal.stderr.write(f"{question} [y/N] ")
        terminal.stderr.flush()
        return read_fresh_line(terminal.stdin).strip().lower() in ("y", "yes")

    config = load(Choices(), terminal.environ)
    undo_flow(
        _change_store(terminal),
        change,
        cwd=terminal.cwd,
        say=say,
        ask=None if yes or not terminal.interactive() else ask,
        policy=Policy(config.policy, terminal.cwd, terminal.home, config.source),
        turn=turn,
        everywhere=everywhere,
        redo=redo,
    )


def _change_store(terminal: Terminal) -> ChangeStore:
    from cli.wiring import Choices, change_store, load

    return change_store(load(Choices(), terminal.environ), terminal.environ)
