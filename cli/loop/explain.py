"""`agent policy explain`: one call decided as the loop decides it, and why (pure: never prints).

The decision is `cli/loop/decision.py`'s `decide` over the very policy, tools and context
`agent run` builds (the command builds them through cli/wiring.py), with no offered list and
no repeat guard, as for a call the loop decides on its own (an attachment). What follows it
is what `agent run` does with an "ask" when there is no terminal: the approvers of
cli/loop/approval.py themselves (`UnattendedApprover` under --yes, else `NoOneToAsk`). The
rule's source is re-derived by cli/safety/sources.py; a config key's file and line come from
the loader's own line index (cli/config/view.py `set_at`). For a command, what its sandbox
would be on this machine and what the command would see (cli/safety/sandbox/).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cli.backends.messages import ToolCall
from cli.config.settings import TOOL_NAMES, Config, is_mcp_name, read_yaml
from cli.config.view import set_at
from cli.errors import ConfigError, UsageError
from cli.loop.approval import ApprovalRequest, NoOneToAsk, UnattendedApprover, covered
from cli.loop.decision import Deciding, decide
from cli.loop.hooks import Hooks
from cli.safety.policy import PATH_ARGUMENTS, Decision, Policy
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable
from cli.safety.sources import (
    BUILT_IN,
    CONFIG,
    STAGE,
    Source,
    sources,
    unattended_source,
)
from cli.tools import Tool, ToolContext, foreseen, unchanged

# What a call needs beyond its path, filled in when --arguments does not give it (said in
# the notes: the disk stages judge these very arguments).
PLACEHOLDERS: Mapping[str, Mapping[str, Any]] = {
    "write_file": {"content": "(a placeholder of agent policy explain)\n"},
    "edit_file": {"old_string": "(old text)", "new_string": "(new text)"},
    "search_files": {"query": "x"},
}
# The stages after the policy, by the rule they give (cli/loop/decision.py).
_STAGE_RULES = {
    "move_boundary": "tree boundary: what the moved or deleted tree holds",
    unchanged.RULE: "unchanged content: the file already holds what would be written",
    foreseen.RULE: "foreseen failure: the call cannot succeed, so no one is asked",
}
SHOWN = 5  # paths listed of each part of a sandbox's view; the rest are counted


@dataclass(frozen=True)
class Outcome:
    """What `agent run` (with --yes, or without) reaches with no terminal to ask on."""

    yes: bool
    covered: bool  # policy.unattended lists the tool
    standing_yes_ok: bool  # Decision.standing_yes_ok: a yes given beforehand may cover it
    allowed: bool
    approved_by: str | None  # "policy", "--yes", or None (denied)
    reason: str  # why, as the model and the trace read it
    source: Source | None = None  # the policy.unattended item that lists it


@dataclass(frozen=True)
class Explanation:
    call: ToolCall
    arguments: Mapping[str, Any]
    decision: Decision
    sources: tuple[dict[str, Any], ...]  # each Source, with `origin`: file and line, default…
    outcome: Outcome
    sandbox: dict[str, Any] | None = None  # run_command only
    notes: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()  # the arguments filled in with placeholders
    listed: tuple[dict[str, Any], ...] = ()  # the policy.unattended item, resolved as sources


def valid_tools(policy: Policy) -> list[str]:
    return [*TOOL_NAMES, *policy.mcp_tools]


def build_call(
    policy: Policy,
    *,
    path: str | None = None,
    command: str | None = None,
    tool: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> tuple[ToolCall, tuple[str, ...]]:
    """The call to explain, and which of its arguments are placeholders. UsageError for a
    tool we do not know or arguments that do not go with it."""
    valid = valid_tools(policy)
    if tool is not None and tool not in valid and not is_mcp_name(tool):
        raise UsageError(
            f"unknown tool {tool!r}; valid tools: {', '.join(valid)}, mcp__SERVER__TOOL"
        )
    if command is not None and path is not None:
        raise UsageError("give PATH or --command, not both")
    arguments: dict[str, Any] = {}
    if command is not None:
        tool = tool or "run_command"
        if tool != "run_command":
            raise UsageError(f"--command goes with run_command, not {tool}")
        arguments["command"] = command
    elif path is not None:
        tool = tool or "read_file"
        names = PATH_ARGUMENTS.get(tool, ())
        if tool == "run_command":
            raise UsageError(
                "run_command takes --command 'LINE' (PATH would be its cwd: --arguments)"
            )
        if is_mcp_name(tool) or not names:
            raise UsageError(f"{tool} takes no path: explain it with --tool {tool} alone")
        arguments[names[0]] = path
    elif tool is None:
        raise UsageError("give a PATH, --command 'LINE' or --tool NAME")
    elif tool in TOOL_NAMES and tool not in ("git_status", "git_diff"):
        needed = "--command 'LINE'" if tool == "run_command" else "a PATH"
        raise UsageError(f"{tool} needs {needed}")
    filled = []
    for name, value in PLACEHOLDERS.get(tool, {}).items():
        if name not in (extra or {}) and name not in arguments:
            arguments[name] = value
            filled.append(name)
    if tool == "move_file" and "destination" not in (extra or {}):
        arguments["destination"] = f"{path}.moved"
        filled.append("destination")
    arguments.update(extra or {})
    return ToolCall(tool, arguments), tuple(filled)


def explain(
    call: ToolCall,
    policy: Policy,
    toolbox: Mapping[str, Tool],
    context: ToolContext,
    config: Config,
    *,
    yes: bool = False,
    filled: Sequence[str] = (),
    sandbox: SandboxSpec | None = None,
    environ: Mapping[str, str] | None = None,
    with_sandbox: bool = True,
    offered: Sequence[str] | None = None,
    plan: bool = False,
) -> Explanation:
    """The loop's decision on `call`, its sources, and what `agent run [--yes]` with no
    terminal does with it; for run_command, the sandbox (`sandbox`: the spec the wiring gave
    the tools, None for the context's). `offered`: the tools the loop would offer (None: as
    for an attachment, none is checked); `plan`: plan mode's."""
    notes: list[str] = []
    if is_mcp_name(call.name) and call.name not in toolbox:
        call, toolbox, said = _as_offered(call, policy, toolbox)
        notes += said
        server = config.mcp.servers.get(_server_of(call.name))
        if server is None:
            notes.append(
                f"no MCP server {_server_of(call.name)!r} is configured (mcp.servers): the loop "
                "would not offer this tool; this is what the policy says of it if one listed it"
            )
        if offered is not None and (not plan or (server is not None and server.read_only)):
            offered = [*offered, call.name]  # its server would list it (none is started here)
    deciding = Deciding(call, policy, toolbox, context, offered=offered, guard=None, plan=plan)
    decision = decide(deciding)
    if decision.rule == foreseen.RULE:
        # No conversation here: an edit was never read, and placeholders match nothing. What
        # is shown is the decision on a call that can succeed; the failure is a note.
        notes.append(
            f"as given, {decision.reason} (the loop lets it fail); shown is what it decides "
            "of a call that can succeed (an edit_file after read_file of the path, with an "
            "old_string the file holds)"
        )
        deciding = Deciding(
            call, policy, toolbox, context, offered=offered, guard=None, plan=plan, foresee=False
        )
        decision = decide(deciding)
    arguments = dict(deciding.arguments or call.arguments)
    found = _stage_source(decision, deciding) or sources(policy, call.name, arguments, decision)
    items = _item_lines(config)
    resolved = tuple(_resolved(s, config, items) for s in found)
    outcome = _outcome(call, arguments, decision, config, yes, items)
    listed = (_resolved(outcome.source, config, items),) if outcome.source else ()
    listed_as = policy.mcp_tools.get(call.name, call.name)
    hooks = Hooks(config.hooks, policy.cwd, {}).matching("pre_tool", call.name, listed_as)
    if hooks:
        notes.append(
            f"hooks.pre_tool runs {len(hooks)} hook(s) on this call in the loop, which may still "
            "refuse it or put it to a person (explain does not run them)"
        )
    if filled:
        notes.append(
            f"placeholder {', '.join(filled)}: the later stages judge these arguments; pass "
            "--arguments JSON to give the call's own"
        )
    view = None
    if with_sandbox and call.name == "run_command" and decision.action != "deny":
        spec = sandbox or context.sandbox or SandboxSpec("auto", policy.allowed_dirs)
        from cli.tools.shell import child_environment  # what the command itself gets

        env = child_environment(context.environ if environ is None else environ, policy.cwd)
        view = sandbox_view(spec, env.get("PATH", os.defpath), config)
    return Explanation(
        call, arguments, decision, resolved, outcome, view, tuple(notes), tuple(filled), listed
    )


def _outcome(
    call: ToolCall,
    arguments: Mapping[str, Any],
    decision: Decision,
    config: Config,
    yes: bool,
    items: Mapping[tuple[str, ...], int] | None,
) -> Outcome:
    unattended = config.policy.unattended
    request = ApprovalRequest(call, arguments, decision)
    listed = covered(unattended, request)
    source = unattended_source(unattended, decision.mcp_name or call.name) if listed else None
    ok = decision.standing_yes_ok
    if decision.action != "ask":
        allowed = decision.action == "allow"
        by = "policy" if allowed else None
        return Outcome(yes, listed, ok, allowed, by, decision.reason, source)
    # Exactly the approver `agent run` builds when no one can be asked (cli/commands/run.py).
    nobody = NoOneToAsk(unattended, yes=yes)
    approver = UnattendedApprover(unattended, nobody) if yes else nobody
    approval = approver(request)
    if approval.approved:
        why = "policy.unattended lists it, and a yes given beforehand may cover it"
        return Outcome(yes, listed, ok, True, approval.by, why, source)
    return Outcome(yes, listed, ok, False, None, approval.reason, source)


def _stage_source(decision: Decision, deciding: Deciding) -> list[Source]:
    loss = deciding.loss
    if loss is not None and decision.rule == loss.rule:
        what = "what would be lost: the old content cannot be kept for undo"
        return [Source(STAGE, what, loss.path)]
    if decision.rule in _STAGE_RULES:
        return [Source(STAGE, _STAGE_RULES[decision.rule])]
    return []


def _as_offered(
    call: ToolCall, policy: Policy, toolbox: Mapping[str, Tool]
) -> tuple[ToolCall, Mapping[str, Tool], list[str]]:
    """An MCP tool as if its server listed it by this very name (explain starts no server):
    the call by the name the model would be offered (characters models refuse made `_`, as
    cli/mcp/servers.py names it), the policy told the name it was listed by, as the loop
    tells it; and a note where the two differ."""
    from cli.mcp.servers import tool_names

    def not_here(*_: Any) -> dict[str, Any]:
        return {"success": False, "error": "agent policy explain runs no tool"}

    server, _, tool = call.name[len("mcp__") :].partition("__")
    name = tool_names(server, [tool], set())[tool] if server and tool else call.name
    notes = []
    if name != call.name:
        notes.append(
            f"the model is offered this tool as {name}; the policy judges it by both names, and "
            "the stricter rule wins"
        )
        call = ToolCall(name, call.arguments, call.id)
    policy.mcp_tools = {**policy.mcp_tools, name: f"mcp__{server}__{tool}" if tool else name}
    return call, {**toolbox, name: Tool(name, "", {"type": "object"}, not_here)}, notes


def _server_of(name: str) -> str:
    return name[len("mcp__") :].split("__", 1)[0]


def _item_lines(config: Config) -> Mapping[tuple[str, ...], int] | None:
    """The line of every list item of the config file (the loader's own index), or None."""
    if not config.source:
        return None
    from cli.fs.stored import MAX_CONFIG_BYTES, read_capped

    try:
        text = read_capped(config.source, MAX_CONFIG_BYTES).decode("utf-8")
        return read_yaml(text, config.source, items=True)[1]
    except (OSError, ValueError, ConfigError):
        return None


def origin_of(source: Source, config: Config, items: Mapping[tuple[str, ...], int] | None) -> str:
    """Where a source is written: "FILE, line N" for a key the config file sets, "default"
    for a config key it does not, else what kind of thing it is ("built-in"…)."""
    if source.key:
        where = set_at(config, source.key, source.index, items)
        return where or f"default of {'.'.join(source.key)}"
    return source.kind if source.kind != CONFIG else BUILT_IN


def _resolved(
    source: Source, config: Config, items: Mapping[tuple[str, ...], int] | None
) -> dict[str, Any]:
    return {
        "kind": source.kind,
        "what": source.what,
        "entry": source.entry,
        "key": ".".join(source.key) or None,
        "origin": origin_of(source, config, items),
    }


# -- the sandbox ----------------------------------------------------------------------------


def sandbox_view(spec: SandboxSpec, path_var: str, config: Config) -> dict[str, Any]:
    """Which sandbox a command would run in here, and what it would see, summarised."""
    from cli.safety.sandbox import launch
    from cli.safety.sandbox import view as seen

    key = ("policy", "commands", "sandbox")
    out: dict[str, Any] = {
        "mode": spec.mode,
        "mode_origin": set_at(config, key) or f"default of {'.'.join(key)}",
        "kind": None,
        "unavailable": None,
    }
    try:
        kind = launch.choose(spec.mode)
    except SandboxUnavailable as exc:
        out["unavailable"] = str(exc)
        return out
    out["kind"] = kind
    if kind == "off":
        out.update(network=True, writable=["everything this user may write"], read_only=[])
        out["hidden"] = []
        return out
    system = [d for d in seen.SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    extra = [place for _, place in seen.view(spec, path_var)]
    hidden = seen.hidden_paths(spec, path_var)
    out.update(
        network=False,
        writable=list(spec.writable),
        system_dirs=system,
        read_only=extra,
        hidden=hidden,
    )
    if (
        kind == "bwrap"
    ):  # its setup masks and locks inside the writable dirs (cli/safety/sandbox/view.py)
        try:
            found = seen.scan(spec, extra)
            out["masked"], out["locked"] = list(found.masked), list(found.locked)
        except SandboxUnavailable as exc:  # ScanTooLarge: the command would be refused
            out["unavailable"] = str(exc)
    return out


def as_json(e: Explanation) -> dict[str, Any]:
    d, o = e.decision, e.outcome
    return {
        "tool": e.call.name,
        "arguments": dict(e.arguments),
        "decision": d.action,
        "rule": d.rule,
        "reason": d.reason,
        "warnings": list(d.warnings),
        "needs_human": d.needs_human,
        "outside_allowed": d.outside_allowed,
        "mcp_name": d.mcp_name or None,
        "source": e.sources[0] if e.sources else None,
        "sources": list(e.sources),
        "yes": o.yes,
        "unattended": {
            "covered": o.covered,
            "standing_yes_ok": o.standing_yes_ok,
            "outcome": "allowed" if o.allowed else "denied",
            "approved_by": o.approved_by,
            "reason": o.reason,
            "source": e.listed[0] if e.listed else None,
        },
        "sandbox": e.sandbox,
        "placeholders": list(e.filled),
        "notes": list(e.notes),
    }


def lines(e: Explanation) -> list[tuple[str, str]]:
    """The text form: (label, text) pairs, in order, for the command to align and sanitise."""
    d, o = e.decision, e.outcome
    out = [("decision", d.action), ("rule", f"{d.rule}: {d.reason}")]
    out += [("warning", w) for w in d.warnings]
    for s in e.sources:
        entry = f" {s['entry']!r}" if s["entry"] else ""
        out.append(("source", f"{s['what']}{entry} ({s['origin']})"))
    if not e.sources:
        out.append(("source", "none named"))
    if d.needs_human:
        out.append(("person", "only a person may say yes: not --yes, not an earlier 'always'"))
    if d.outside_allowed:
        out.append(("outside", "outside the allowed dirs: --yes never covers it"))
    if o.yes:
        out.append(("--yes", _verdict(o)))
        for s in e.listed:
            out.append(("unattended", f"{s['what']} {s['entry']!r} ({s['origin']})"))
    elif d.action == "ask":
        out.append(("asked", "at a terminal, a person is asked (agent chat, agent run)"))
        out.append(("no terminal", _verdict(o)))
    else:
        out.append(("run", _verdict(o)))
    if e.sandbox is not None:
        out += _sandbox_lines(e.sandbox)
    out += [("note", n) for n in e.notes]
    return out


def _verdict(o: Outcome) -> str:
    if o.allowed:
        return f"allowed by {o.approved_by}" + (
            "" if o.approved_by == "policy" else f": {o.reason}"
        )
    return f"denied: {o.reason}"


def _sandbox_lines(s: Mapping[str, Any]) -> list[tuple[str, str]]:
    mode = f"policy.commands.sandbox: {s['mode']} ({s['mode_origin']})"
    if s["kind"] is None:
        return [("sandbox", f"unavailable: {s['unavailable']} [{mode}]")]
    if s["kind"] == "off":
        return [("sandbox", f"off: the command runs unconfined, with network [{mode}]")]
    out = [("sandbox", f"{s['kind']}, no network [{mode}]")]
    out.append(("writable", _some(s["writable"])))
    read_only = f"{len(s['system_dirs'])} system dirs"
    if s["read_only"]:
        read_only += f", and {_some(s['read_only'])}"
    out.append(("read-only", read_only))
    out.append(("hidden", _some(s["hidden"]) if s["hidden"] else "none in what it sees"))
    if "masked" in s:
        out.append(("masked", _some(s["masked"]) if s["masked"] else "none"))
        out.append(("locked", _some(s["locked"]) if s["locked"] else "none"))
    if s.get("unavailable"):
        out.append(("refused", str(s["unavailable"])))
    return out


def _some(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown if len(paths) <= SHOWN else f"{shown} and {len(paths) - SHOWN} more"
