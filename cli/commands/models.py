"""`agent models`: the server's models, and how the agent would give each its tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.commands.frame import ApiOpt, ConfigOpt, HostOpt, Terminal, print_json

if TYPE_CHECKING:
    from cli.backends.messages import ModelInfo

# What this module adds to `agent`: cli.app's COMMANDS names each, and imports this module
# only when the command line needs one of them.
commands = typer.Typer()


@commands.command(
    "models",
    help="The server's models: name, size on disk, parameters, quantisation, trained context "
    "length, how the agent gives it tools (native: the API's tools field; prompt: described "
    "in the system prompt, for a model without tool support; none: no tools, by "
    "agent.tool_mode or the policy), capabilities (tools, thinking, vision) and whether it is "
    "loaded now. Exit codes: 0 listed, 1 server failure, 2 usage or config error.",
)
def models(
    host: HostOpt = None,
    config: ConfigOpt = None,
    api: ApiOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON list of objects: name, size, parameter_size, quantization, "
            "context_length, capabilities, loaded, tools (native|prompt|none; null where the "
            "server does not say).",
        ),
    ] = False,
) -> None:
    from cli.backends.catalog import gather
    from cli.config.settings import tool_mode_for
    from cli.wiring import Choices, build_backend, build_policy, load

    terminal = Terminal.from_process()
    choices = Choices(host=host, config_path=config, api=api)
    loaded = load(choices, terminal.environ)
    backend = build_backend(choices, loaded, terminal.environ)
    policy = build_policy(loaded, terminal.environ, terminal.cwd, terminal.home)
    enabled = bool(policy.enabled_tools())  # the built-in tools: MCP servers are not started

    def tools(info: ModelInfo) -> str:
        mode = tool_mode_for(loaded.agent.tool_mode, info.supports_tools, enabled)
        return "none" if mode == "off" else mode

    rows = gather(backend, tools=tools)
    if as_json:
        print_json(terminal.stdout, [row.to_json() for row in rows])
    elif not rows:
        terminal.stderr.write(f"no models on {backend.host} (Ollama: `ollama pull qwen3:8b`)\n")
    else:
        from cli.ui.models_view import model_table

        terminal.stdout.write("\n".join(model_table(rows)) + "\n")
