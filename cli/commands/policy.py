"""`agent policy explain`: what the policy decides for one path, command or tool, and why.

The policy, tools and context are built by cli/wiring.py as `agent run` builds them (no MCP
server is started, no model server contacted); the decision and its sources come from
cli/loop/explain.py, which runs cli/loop/decision.py's stages. An answer, whatever it is,
exits 0; bad usage or a bad config exits 2.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.commands.frame import ConfigOpt, Terminal, print_json
from cli.errors import UsageError

if TYPE_CHECKING:
    from cli.loop.explain import Explanation

policy_app = typer.Typer(
    name="policy",
    help="The safety policy: what it decides for a call, and why.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

# What this module adds to `agent`: cli.app's COMMANDS names it, and imports this module
# only when the command line needs it.
commands = typer.Typer()
commands.add_typer(policy_app)

# A host no one listens on: explaining never talks to a model server, and a server setting
# that does not parse (OLLAMA_HOST) must not keep the policy from being explained.
_NO_SERVER = "http://127.0.0.1:9"


@policy_app.command(
    "explain",
    help="Decide one call as `agent run` would, without running it: the decision (allow, ask, "
    "deny), the rule and where it is written (a built-in list entry, a config key with its "
    "file and line, a dot-entry, an allowed dir), what --yes does with it and, for a command, "
    "the sandbox it would run in. PATH goes to --tool (default read_file); --command 'LINE' "
    "to run_command; --tool mcp__SERVER__TOOL alone for an MCP tool. Exit 0 whatever the "
    "decision; 2 for bad usage or config.",
)
def policy_explain(
    path: Annotated[
        str | None, typer.Argument(metavar="[PATH]", help="The path the call names.")
    ] = None,
    tool: Annotated[
        str | None,
        typer.Option(
            "-t", "--tool", metavar="TOOL", help="The tool (default: read_file for a PATH)."
        ),
    ] = None,
    command: Annotated[
        str | None,
        typer.Option("--command", metavar="LINE", help="A shell line for run_command."),
    ] = None,
    arguments: Annotated[
        str | None,
        typer.Option(
            "--arguments",
            metavar="JSON",
            help="More of the call's arguments, as a JSON object (content, destination…).",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("-y", "--yes", help="Say what `agent run --yes` would do with it."),
    ] = False,
    plan: Annotated[
        bool, typer.Option("--plan", help="Decide it as plan mode does (`agent run --plan`).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    config_path: ConfigOpt = None,
) -> None:
    from cli.loop.explain import as_json as explained_json
    from cli.loop.explain import lines

    terminal = Terminal.from_process()
    explanation = explained(
        terminal,
        path=path,
        command=command,
        tool=tool,
        extra=_arguments(arguments),
        yes=yes,
        config_path=config_path,
        plan=plan,
    )
    if as_json:
        print_json(terminal.stdout, explained_json(explanation))
        return
    from cli.ui.text import sanitize

    pairs = lines(explanation)
    width = max(len(label) for label, _ in pairs) + 1
    for label, text in pairs:
        terminal.stdout.write(f"{label + ':':<{width}} {sanitize(text)}\n")


def explained(
    terminal: Terminal,
    *,
    path: str | None = None,
    command: str | None = None,
    tool: str | None = None,
    extra: dict[str, Any] | None = None,
    yes: bool = False,
    config_path: str | None = None,
    sandbox: bool = True,
    plan: bool = False,
) -> Explanation:
    """What `agent policy explain` prints, as data: the agent built as `agent run` builds it
    (its MCP servers left out: none is started), the call decided by cli/loop/explain.py.
    `sandbox`: False leaves out a command's sandbox (tests deciding many lines)."""
    from cli.config.settings import McpConfig
    from cli.loop.approval import NoOneToAsk
    from cli.loop.explain import build_call, explain
    from cli.wiring import Choices, build_agent, load

    choices = Choices(config_path=config_path, host=_NO_SERVER, api="native")
    config = load(choices, terminal.environ)
    agent = build_agent(
        choices,
        dataclasses.replace(config, mcp=McpConfig()),
        environ=terminal.environ,
        cwd=terminal.cwd,
        home=terminal.home,
        approver=lambda _policy: NoOneToAsk(config.policy.unattended, yes=yes),
    )
    agent.plan_mode = plan
    # The tools `agent run` offers, as far as the config says: agent.tool_set auto leaves the
    # set to the model's profile, which needs the server (a note says so); full is assumed.
    tool_set = agent.settings.tool_set
    offered = agent.offered_tools(tool_set if tool_set in ("full", "compact") else "full")
    try:
        call, filled = build_call(agent.policy, path=path, command=command, tool=tool, extra=extra)
        explanation = explain(
            call,
            agent.policy,
            agent.box() if tool_set == "compact" else agent.toolbox,  # box(): no server asked
            agent.context,
            config,
            yes=yes,
            filled=filled,
            with_sandbox=sandbox,
            offered=offered,
            plan=plan,
        )
    finally:
        agent.close()
    from cli.tools import ALL_TOOLS, COMPACT_TOOLS

    if (
        tool_set == "auto"
        and "compact" in agent.settings.aids
        and call.name in ALL_TOOLS
        and call.name not in COMPACT_TOOLS
    ):
        note = (
            f"agent.tool_set is auto: a model whose profile takes the compact set is not offered "
            f"{call.name}, and the loop refuses it there (set agent.tool_set to know)"
        )
        explanation = dataclasses.replace(explanation, notes=(*explanation.notes, note))
    return explanation


def _arguments(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--arguments: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError('--arguments: expected a JSON object, e.g. \'{"content": "hi"}\'')
    return value
