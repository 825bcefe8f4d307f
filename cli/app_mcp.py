"""`agent mcp`: the configured MCP servers (started, listed, stopped), and the import of other
tools' `{"mcpServers": …}` JSON into our YAML."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cli.app import McpConfigOpt

mcp_app = typer.Typer(
    name="mcp",
    help="MCP servers as tool sources (config: mcp.servers): list them with their tools, or "
    "import another tool's mcpServers JSON.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@mcp_app.command(
    "list",
    help="Start every configured server, list its status, protocol version and tools, and "
    "stop it again. Exit 1 if any enabled server could not be used.",
)
def mcp_list(
    ctx: typer.Context,
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
    from cli.app import command

    with command(ctx) as terminal:
        from cli.wiring import Choices, build_policy, load, sandbox_spec, start_mcp

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
    raise typer.Exit(1 if failed else 0)


@mcp_app.command(
    "import",
    help='Print, as YAML for the config, the MCP servers of a {"mcpServers": …} JSON file '
    "(Claude Desktop, Claude Code, Gemini CLI, ollmcp). Secrets are not copied: they become "
    "${VARIABLE} references, named in comments.",
)
def mcp_import(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(metavar="FILE", help="The JSON file to read.")],
) -> None:
    from cli.app import command

    with command(ctx) as terminal:
        from cli.mcp.importing import to_yaml

        terminal.stdout.write(to_yaml(file))
