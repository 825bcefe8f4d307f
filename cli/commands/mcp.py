"""`agent mcp`: the configured MCP servers (started, listed, stopped), and the import of other
tools' `{"mcpServers": …}` JSON into our YAML."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cli.commands.frame import McpConfigOpt, Terminal
from cli.errors import ExitStatus

mcp_app = typer.Typer(
    name="mcp",
    help="MCP servers as tool sources (config: mcp.servers): list them with their tools, or "
    "import another tool's mcpServers JSON.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()
commands.add_typer(mcp_app)


@mcp_app.command(
    "list",
    help="Start every configured server, list its status, protocol version and tools, and "
    "stop it again. Exit 1 if any enabled server could not be used.",
)
def mcp_list(
    config: Annotated[
        str | None,
        typer.Option("-c", "--config", metavar="PATH", help="YAML config to read."),
    ] = None,
    mcp_config: McpConfigOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list: name, transport, status, protocol_version, error, tools.",
        ),
    ] = False,
) -> None:
    from cli.wiring import Choices, build_policy, load, sandbox_spec, start_mcp

    terminal = Terminal.from_process()
    choices = Choices(config_path=config, mcp_config=mcp_config)
    loaded = load(choices, terminal.environ)
    policy = build_policy(loaded, terminal.environ, terminal.cwd, terminal.home)
    spec = sandbox_spec(loaded, policy, terminal.home)
    servers = start_mcp(choices, loaded, terminal.environ, policy, spec)
    rows: list[dict[str, Any]] = []
    notices: list[str] = []
    if servers is not None:
        try:
            servers.wait()  # its lines are the rows' errors
            rows, notices = servers.status(), servers.notices()
        finally:
            servers.close()
    if notices:
        from cli.ui.text import sanitize

        terminal.stderr.write("".join(f"note: {sanitize(n)}\n" for n in notices))
    if as_json:
        terminal.stdout.write(json.dumps(rows, ensure_ascii=False) + "\n")
    elif not rows:
        terminal.stderr.write(
            "no MCP servers configured: add them under mcp.servers in the config, or "
            "import them with agent mcp import FILE\n"
        )
    else:
        from cli.ui.mcp_view import status_lines

        for line in status_lines(rows):
            terminal.stdout.write(line + "\n")
    failed = any(r["status"] == "failed" for r in rows)
    raise typer.Exit(ExitStatus.FAILURE if failed else ExitStatus.OK)


@mcp_app.command(
    "import",
    help='Print, as YAML for the config, the MCP servers of a {"mcpServers": …} JSON file '
    "(Claude Desktop, Claude Code, Gemini CLI, ollmcp); with --into, add them to a config "
    "file instead. Secrets are not copied: they become ${VARIABLE} references, named in "
    "comments. Exit codes: 0 done, 2 usage error (a name already configured: nothing written).",
)
def mcp_import(
    file: Annotated[str, typer.Argument(metavar="FILE", help="The JSON file to read.")],
    into: Annotated[
        str | None,
        typer.Option(
            "--into",
            metavar="CONFIG",
            help="Add the servers to this YAML config (e.g. the one `agent init` wrote: "
            "`agent config path`) under mcp.servers, keeping its comments and other keys; "
            "written atomically. A server name it already has is refused, and nothing is "
            "written. Created if missing.",
        ),
    ] = None,
    allow_env: Annotated[
        bool,
        typer.Option(
            "--allow-env",
            help="With --into: add servers whose url or headers hold ${VARIABLE}s, which the "
            "agent fills in from your environment and sends to that server's host (without "
            "it they are refused, naming each; every ${VARIABLE} is listed either way).",
        ),
    ] = False,
) -> None:
    from cli.mcp.importing import environment_reads, imported
    from cli.ui.text import sanitize

    terminal = Terminal.from_process()
    if into is None:
        from cli.mcp.importing import to_yaml

        terminal.stdout.write(to_yaml(file))
        reads = environment_reads(imported(file)[0])
        terminal.stderr.write("".join(f"note: {sanitize(r.note())}\n" for r in reads))
        if not terminal.stdout.isatty():  # `>> config.yaml`: a second mcp: if it has one
            terminal.stderr.write(
                "note: --into CONFIG adds them to a config file that has an mcp: section "
                "already (as `agent init` writes it), comments kept\n"
            )
        return
    import os

    from cli.errors import UsageError
    from cli.fs.paths import expand_user
    from cli.mcp.importing import sent_away
    from cli.mcp.merging import merge_servers, read_config_text, write_config

    target = os.path.join(terminal.cwd, expand_user(into, terminal.home))
    servers, comments = imported(file)
    reads = environment_reads(servers)
    refusal = "" if allow_env else sent_away(reads)
    if refusal:
        raise UsageError(f"{file}: {refusal}")
    merged = merge_servers(read_config_text(target), servers, comments, into)
    if not merged.added:
        nothing = f"no MCP servers in {sanitize(file)}: {sanitize(into)} is unchanged"
        terminal.stderr.write(nothing + "\n")
        return
    write_config(target, merged.text)
    for line in comments[1:]:
        terminal.stderr.write(f"note: {sanitize(line.removeprefix('# '))}\n")
    terminal.stderr.write("".join(f"note: {sanitize(r.note())}\n" for r in reads))
    names = ", ".join(merged.added)
    terminal.stderr.write(
        f"added to {sanitize(into)} under mcp.servers: {sanitize(names)} "
        "(`agent mcp list` starts them and lists their tools)\n"
    )
