"""`agent models`: the server's models, and how the agent would give each its tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

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
    "agent.tool_mode or the policy), the profile it gets (agent.aids, `models:`), "
    "capabilities (tools, thinking, vision) and whether it is loaded now. Exit codes: 0 "
    "listed, 1 server failure, 2 usage or config error.",
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
            "server does not say), profile (what the model's profile sets, or null).",
        ),
    ] = False,
) -> None:
    from cli.backends.catalog import gather
    from cli.config.profiles import Profile, profile_for, tool_mode_setting
    from cli.config.settings import aids_of, tool_mode_for
    from cli.wiring import Choices, build_backend, build_policy, chosen_settings, load

    terminal = Terminal.from_process()
    choices = Choices(host=host, config_path=config, api=api)
    loaded = load(choices, terminal.environ)
    backend = build_backend(choices, loaded, terminal.environ)
    policy = build_policy(loaded, terminal.environ, terminal.cwd, terminal.home)
    enabled = bool(policy.enabled_tools())  # the built-in tools: MCP servers are not started
    aids = aids_of(loaded.agent.aids)
    chosen = chosen_settings(choices, loaded)

    def profile_of(info: ModelInfo) -> Profile | None:
        # As the agent applies it (cli/loop/agent.py): only under the aids that use one.
        if not {"profiles", "compact"} & aids:
            return None
        return profile_for(info.name, info.parameter_size, loaded.models)

    def tools(info: ModelInfo) -> str:
        found = profile_of(info)
        applies = "profiles" in aids and "tool_mode" not in chosen
        setting = tool_mode_setting(
            loaded.agent.tool_mode, found if applies else None, info.supports_tools
        )
        mode = tool_mode_for(setting, info.supports_tools, enabled)
        return "none" if mode == "off" else mode

    def profile(info: ModelInfo) -> dict[str, Any] | None:
        found = profile_of(info)
        if found is None:
            return None
        tool_set = loaded.agent.tool_set
        if tool_set == "auto":
            tool_set = (found.tool_set if "compact" in aids else None) or "full"
        shown: dict[str, Any] = {
            "name": found.name,
            "source": "models" if found.user else "built-in",
        }
        if "profiles" in aids:
            own_num_ctx = loaded.ollama.options.get("num_ctx") is not None
            shown.update(
                tool_mode=None if "tool_mode" in chosen else found.tool_mode,
                temperature=None if "temperature" in chosen else found.temperature,
                think=None if "think" in chosen else found.think,
                num_ctx=None if own_num_ctx else found.num_ctx,
            )
        shown["tool_set"] = tool_set
        return shown

    rows = gather(backend, tools=tools, profile=profile)
    if as_json:
        print_json(terminal.stdout, [row.to_json() for row in rows])
    elif not rows:
        terminal.stderr.write(f"no models on {backend.host} (Ollama: `ollama pull qwen3:8b`)\n")
    else:
        from cli.ui.models_view import model_table

        terminal.stdout.write("\n".join(model_table(rows)) + "\n")
