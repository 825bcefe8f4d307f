"""`agent config`, `agent config path` and `agent init`: the configuration you can see."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.commands.frame import Terminal

config_app = typer.Typer(
    name="config",
    help="The configuration in force, as YAML, each key saying where its value came from "
    "(default, the config file and line, the environment, a flag). `agent config path`: the "
    "file it is read from.",
    invoke_without_command=True,
    rich_markup_mode=None,
)

ConfigPathOpt = Annotated[
    str | None, typer.Option("-c", "--config", metavar="PATH", help="The config file to read.")
]


@config_app.callback()
def config_show(
    ctx: typer.Context,
    config: ConfigPathOpt = None,
    model: Annotated[
        str | None, typer.Option("-m", "--model", metavar="NAME", help="As `agent run -m`.")
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", metavar="HOST", help="As `agent run --host`.")
    ] = None,
    api: Annotated[
        str | None, typer.Option("--api", metavar="native|openai", help="As `agent run --api`.")
    ] = None,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from cli.config.loading import load_config
    from cli.config.settings import find_config
    from cli.config.view import effective, render

    terminal = Terminal.from_process()
    loaded = load_config(find_config(config, terminal.environ))
    flags: dict[tuple[str, ...], tuple[str, Any]] = {}
    for key, flag, value in (("model", "-m", model), ("host", "--host", host)):
        if value is not None:
            flags[("ollama", key)] = (flag, value)
    if api is not None:
        flags[("ollama", "api")] = ("--api", api)
    terminal.stdout.write(render(effective(loaded, terminal.environ, flags)))


@config_app.command("path", help="The config file agent reads (or where it would read one).")
def config_path(config: ConfigPathOpt = None) -> None:
    from cli.config.settings import config_dir, find_config

    terminal = Terminal.from_process()
    found = find_config(config, terminal.environ)
    if found is not None:
        terminal.stdout.write(f"{found}\n")
        return
    default = config_dir(terminal.environ) / "config.yaml"
    terminal.stdout.write(f"{default}\n")
    terminal.stderr.write(
        "(it does not exist yet: the built-in defaults are in force; `agent init` writes "
        "one to edit)\n"
    )


# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()
commands.add_typer(config_app)


@commands.command(
    "init",
    help="Write a commented config (every key at its default) to the file `agent config "
    "path` names, for you to edit. Never overwrites one.",
)
def init(
    config: Annotated[
        str | None,
        typer.Option(
            "-c",
            "--config",
            metavar="PATH",
            help="Where to write it (default: `agent config path`).",
        ),
    ] = None,
) -> None:
    from cli.config.settings import config_dir
    from cli.errors import UsageError

    terminal = Terminal.from_process()
    target = Path(config).expanduser() if config else config_dir(terminal.environ) / "config.yaml"
    template = (Path(__file__).parent.parent / "config.example.yaml").read_bytes()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        # O_EXCL: never over an existing config, not even one made a moment ago.
        # O_NOFOLLOW and O_BINARY: where the OS has them (POSIX; native Windows).
        flags = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o600)
    except FileExistsError:
        raise UsageError(
            f"{target} exists; it is not overwritten (edit it, or move it away first)"
        ) from None
    with os.fdopen(fd, "wb") as out:
        out.write(template)
    terminal.stdout.write(f"{target}\n")
    terminal.stderr.write(
        "wrote a config with every key at its default, each explained: edit what you need\n"
    )
