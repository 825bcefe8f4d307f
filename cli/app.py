"""The `agent` command's root: the typer app every command is added to, `main`, and the one
place where errors become exit codes (`exit_codes`: each exception carries its ExitStatus,
see `errors.py`).

The commands live in `cli.commands`, one module per command group, and import nothing from
here: they raise, and the root group runs each of them inside `exit_codes`. Only the module of
the command a command line names is imported (`COMMANDS`, `built_for`), and the core is
imported inside the commands, so `agent --help` and `agent run` start fast.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import typer
import typer.core

from cli import __version__
from cli.errors import AgentError, ExitStatus, Stopped


@contextlib.contextmanager
def exit_codes(ctx: typer.Context) -> Iterator[None]:
    """Expected failures → one line on stderr and their exit code; Ctrl-C → 130; SIGTERM or
    SIGHUP that ended a run → 128 + its number. Anything else is a bug: its traceback."""
    try:
        yield
    except AgentError as exc:
        if ctx.obj and ctx.obj.get("debug"):  # `agent --debug …`: the traceback
            raise
        from cli.ui.text import sanitize  # messages may quote the server or the model

        sys.stderr.write(f"agent: {sanitize(exc.message, multiline=True)}\n")
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        sys.stderr.write("\nagent: interrupted\n")
        raise typer.Exit(ExitStatus.INTERRUPTED) from None
    except Stopped as exc:
        from cli.commands.signals import stopped_line

        sys.stderr.write(f"\nagent: {stopped_line(exc.signum)}\n")
        raise typer.Exit(exc.exit_code) from None


class RootGroup(typer.core.TyperGroup):
    """`agent` itself: every command and group runs inside its `invoke`, so inside
    `exit_codes`, before click would see an error (click takes Ctrl-C for a silent 130)."""

    def invoke(self, ctx: Any) -> Any:  # click's Context (typer.Context is a subclass)
        with exit_codes(ctx):
            return super().invoke(ctx)


# The root: its options and callback. Its commands are added to a copy, those a command line
# needs (with_commands, built_for): `built_for([])` is the whole app.
app = typer.Typer(
    name="agent",
    cls=RootGroup,
    help="metona-agent: let a local Ollama model read, search and change your files, "
    "under a YAML safety policy (see config.example.yaml).",
    # typer's --install-completion / --show-completion (bash, zsh, fish, PowerShell).
    add_completion=True,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"metona-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of errors.", hidden=True)
    ] = False,
) -> None:
    ctx.obj = {"debug": debug}
    if ctx.invoked_subcommand is None:
        # `agent` alone: the help, and exit 0 (it is not a usage error to ask what it does).
        typer.echo(ctx.get_help())
        raise typer.Exit(ExitStatus.OK)


# Every command of `agent`, in the order its help lists them, and the module of cli.commands
# that declares it (on that module's `commands` Typer). A module is imported only when the
# command line needs one of its commands (`built_for`).
COMMANDS = {
    "run": "run",
    "chat": "chat",
    "models": "models",
    "eval": "eval",
    "history": "changes",
    "undo": "changes",
    "redo": "changes",
    "init": "config",
    "audit": "audit",
    "sessions": "sessions",
    "mcp": "mcp",
    "policy": "policy",
    "config": "config",
}


def tolerate_any_encoding(*streams: object) -> None:
    """A character the stream's encoding cannot hold (`—` on a Latin-1 or ASCII terminal) is
    written as `?`, never raised. UTF-8 holds every character, so there nothing changes:
    piped UTF-8 output stays byte-exact (a lone surrogate, which is not text, becomes `?`)."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):
            pass  # closed, or not a text stream we can change: left as it is


def main() -> None:
    """Console-script entry point."""
    tolerate_any_encoding(sys.stdout, sys.stderr)
    refusal = windows_refusal(sys.argv[1:])
    if refusal:
        sys.stderr.write(f"agent: {refusal}\n")
        raise SystemExit(ExitStatus.USAGE)
    # also under `python -m cli`: help and completion name `agent`
    built_for(sys.argv[1:])(prog_name="agent")


# What works on native Windows, by the words after `agent`: reading and writing the config.
# Every other command reaches files through directory fds (openat, O_NOFOLLOW, flock), runs
# commands in a POSIX sandbox, or is built by cli.wiring, which imports the change store and
# the tools (`models` too, though it only asks the server): WSL2 until then.
WINDOWS_READY = frozenset({"config", "config path", "init"})
_GROUPS = frozenset({"sessions", "audit", "mcp", "policy", "config"})  # commands with subcommands


def windows_refusal(argv: Sequence[str]) -> str | None:
    """On native Windows, the one line a command that needs POSIX ends with, before anything
    of it is imported; None elsewhere, and for help, --version, completion and the config
    commands (`agent run --help` still shows what run would do)."""
    options = argv[: argv.index("--")] if "--" in argv else argv  # after --: arguments
    if "_AGENT_COMPLETE" in os.environ or any(a in ("-h", "--help") for a in options):
        return None
    at = next((i for i, a in enumerate(argv) if a == "--" or not a.startswith("-")), len(argv))
    if at >= len(argv) or argv[at] not in COMMANDS:
        return None  # no command (--version), or a word click will call unknown
    from cli.fs import _platform

    if not _platform.WINDOWS:
        return None
    words = [argv[at]]
    if argv[at] in _GROUPS:  # the subcommand: its first word that is not an option
        words += [a for a in argv[at + 1 :] if not a.startswith("-")][:1]
    name = " ".join(words)
    if name in WINDOWS_READY or words[0] == "config":
        return None
    return f"`agent {name}`: {_platform.WINDOWS_LINE}"


def built_for(argv: Sequence[str]) -> typer.Typer:
    """The root app with the commands `argv` needs: the one it names (`agent run …`: run
    alone), its module the only one imported. typer builds the parser of every command it
    holds, reading signatures and evaluating annotations, before it runs one: for the twenty
    of ours, a tenth of `agent --version`'s time, and importing their modules costs more. The
    top level takes only flags, so the command is the first word that is not one; with none
    named (`agent`, `agent --help`, completion) or a word that names none, every command, so
    help, suggestions and errors are what they always were; and so with any top-level flag but
    --debug and --version (--help, completion). `--version` with no command needs none."""
    return with_commands(_needed(argv))


def _needed(argv: Sequence[str]) -> list[str]:
    """The commands `argv` needs (see built_for)."""
    every = list(COMMANDS)
    if "_AGENT_COMPLETE" in os.environ:
        return every  # shell completion: it may be asked about any command
    at = next((i for i, a in enumerate(argv) if a == "--" or not a.startswith("-")), len(argv))
    if any(a not in ("--debug", "--version") for a in argv[:at]):
        return every  # --help, completion: what they show or do is about the whole app
    word = argv[at] if at < len(argv) else None
    if word is None:
        return [] if "--version" in argv else every
    return [word] if word in COMMANDS else every


def with_commands(names: Sequence[str]) -> typer.Typer:
    """The root app holding the commands `names` (of COMMANDS), as declared in their modules."""
    root = copy.copy(app)  # `app` itself stays as it is: the root, its callback, no commands
    root.registered_commands, root.registered_groups = [], []
    for name in names:
        module = f"cli.commands.{COMMANDS[name]}"
        __import__(module)  # not importlib.import_module, which `python -X importtime` misses
        declared = sys.modules[module].commands
        root.registered_commands += [c for c in declared.registered_commands if _name_of(c) == name]
        root.registered_groups += [g for g in declared.registered_groups if _name_of(g) == name]
    return root


def _name_of(info: Any) -> str | None:
    """The name a command or a group is invoked by (typer.main's rule: a group's own name when
    add_typer gave it none, a command's function name in kebab case when its decorator did not)."""
    name = getattr(info, "name", None)
    if isinstance(name, str):
        return name
    inner = getattr(getattr(info, "typer_instance", None), "info", None)
    name = getattr(inner, "name", None)
    if isinstance(name, str):
        return name
    callback = getattr(info, "callback", None)
    if callback is not None and getattr(info, "typer_instance", None) is None:
        return typer.main.get_command_name(callback.__name__)
    return None


__all__ = ["app", "main"]
