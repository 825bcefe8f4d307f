"""The chat's slash commands: the table (COMMANDS, which /help lists and Tab completes)
and each command's handler, on the session of cli/ui/repl.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rich.text import Text

from cli.backends.messages import ModelInfo, closest_models
from cli.config.settings import THINK_LEVELS
from cli.errors import AgentError, ToolError
from cli.records.sessions import SessionStore, conversation_turns, timestamp_name
from cli.ui.text import plural, sanitize, shorten_text

if TYPE_CHECKING:
    from cli.ui.repl import ChatSession

THINK_CHOICES = ("on", "off", *THINK_LEVELS)


@dataclass(frozen=True)
class Command:
    usage: str
    help: str
    run: Callable[[ChatSession, str], bool]  # returns False to end the session


def _help(session: ChatSession, _argument: str) -> bool:
    from cli.ui.layout import hanging

    width = session.console.width  # wrapped here, so that each entry keeps its indent
    lines = [
        line for c in COMMANDS.values() for line in hanging(f"  {c.usage:<20} ", c.help, width)
    ]
    lines += _own_commands_help(session, width)
    lines.append("")
    for keys in (
        'Enter sends · Esc-Enter or Alt-Enter adds a line · """ starts and ends a block',
        '@path attaches a file (a name with spaces: @"my notes.txt" or @my\\ notes.txt; '
        "an @word that names no file is text; @@word is the text @word) · Tab completes "
        "commands and paths · ↑/↓ history",
        "Ctrl-C or Esc stops the answer · Ctrl-C clears the line · Ctrl-D quits",
        "confirmations: y yes · n no (then an optional reason) · a always for this tool "
        "in this session · d every change under that directory in this session · "
        "q stop this turn (Esc and Ctrl-C too)",
    ):
        lines += hanging("  ", keys, width, indent=4)
    session.say("\n".join(lines))
    return True


def _own_commands_help(session: ChatSession, width: int) -> list[str]:
    from cli.loop.custom_commands import listed
    from cli.ui.layout import hanging

    lines: list[str] = []
    for usage, source, description in listed(session.catalogue):
        text = f"{description} ({source})" if description else f"({source})"
        lines += hanging(f"  {usage:<20} ", sanitize(text), width)
    return ["", *lines] if lines else []


PLAN_TOOLS_LINE = (
    "only the tools that change nothing are offered (read_file, list_directory, search_files, "
    "git_status, git_diff, and MCP tools marked read_only)"
)


def _plan(session: ChatSession, _argument: str) -> bool:
    """/plan: plan mode on, or off again (it toggles), said with what it offers."""
    agent = session.agent
    agent.plan_mode = not agent.plan_mode
    if agent.plan_mode:
        session.say(f"plan mode: {PLAN_TOOLS_LINE}; /go leaves it", "cyan")
    else:
        session.say("plan mode off: every tool the policy enables is offered again", "dim")
    return True


def _go(session: ChatSession, argument: str) -> bool:
    """/go [MESSAGE]: leave plan mode, the plan kept in the conversation; with MESSAGE, send
    it as the next message."""
    agent = session.agent
    if not agent.plan_mode:
        session.say("not in plan mode (/plan enters it)", "dim")
    else:
        agent.plan_mode = False
        kept = any(m.get("role") == "assistant" for m in session.conversation)
        plan = "the plan stays in the conversation" if kept else "no plan was made yet"
        session.say(
            f"plan mode off: {plan}; every tool the policy enables is offered again", "cyan"
        )
    if argument:
        session.send(argument)
    return True


def _exit(_session: ChatSession, _argument: str) -> bool:
    return False


def _clear(session: ChatSession, _argument: str) -> bool:
    """A new conversation under a new name, saved from its first turn on. The one left stays
    saved under its own name, said here; leaving later names only a session that exists."""
    kept = session.session_name if session.saved_at is not None else None
    session.conversation = []
    session._last_sent = None
    session.agent.context.memory.clear()
    session.session_name = _fresh_name(session.store, kept or session.session_name)
    session.saved_at = None  # the new name has nothing saved under it yet
    session.save_failed = False
    if kept is None:
        session.say("new conversation", "dim")
    else:
        session.say(
            f"new conversation; the last one is saved as {kept} (/load {kept} brings it back)",
            "dim",
        )
    return True


def _fresh_name(store: SessionStore, taken: str) -> str:
    """The time as a session name, one no saved session has and not `taken`: a /clear in the
    second the last conversation started must not save over it."""
    base = name = timestamp_name()
    number = 2
    while name == taken or store.exists(name):
        name, number = f"{base}-{number}", number + 1
    return name


def _model(session: ChatSession, argument: str) -> bool:
    if not argument:
        session.say(f"model: {session.agent.settings.model}")
        return True
    models = session.models()
    name = argument if argument in models else f"{argument}:latest"
    if name not in models:
        session._models = None  # the user may have pulled it since: look again next time
        near = closest_models(argument, models)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        session.renderer.error(
            f"model {sanitize(argument)} is not on the server; {sanitize(hint)}/models lists "
            f"them, `ollama pull {sanitize(argument)}` fetches it"
        )
        return True
    session.switch_model(name)
    return True


def _models(session: ChatSession, _argument: str) -> bool:
    """The server's models as `agent models` gives them, one compact line each."""
    from cli.backends.catalog import gather
    from cli.ui.models_view import model_lines

    agent = session.agent

    def tools(info: ModelInfo) -> str:
        mode = agent.tool_mode(info)
        return "none" if mode == "off" else mode

    rows = gather(agent.backend, tools=tools)
    session._models = [row.name for row in rows]
    current = agent.settings.model
    lines = model_lines(rows, current)  # sanitised: names and details come from the server
    for row, line in zip(rows, lines, strict=False):
        session.console.print(Text(line, "bold" if row.name == current else ""))
    for note in lines[len(rows) :]:
        session.console.print(Text(note, "dim"))
    return True


def _tools(session: ChatSession, _argument: str) -> bool:
    agent = session.agent
    if not agent.tools_on():
        session.say(f"tools are off: model {agent.settings.model} does not support them", "yellow")
    policy = agent.policy
    offered = agent.offered_tools()
    for name in agent.toolbox:
        setting = policy.setting(name)
        why = {
            "allow": "runs without asking",
            "ask": "asks first",
            "deny": "not offered to the model",
        }[setting]
        if setting != "deny" and name not in offered:
            why = "not offered: the compact tool set is in force (agent.tool_set, the profile)"
        elif setting == "ask" and name in session.approver.always:
            why = "allowed for this session (you answered 'always')"
        elif name == "run_command" and setting != "deny" and policy.config.commands.allow:
            why += f"; runs {', '.join(policy.config.commands.allow)} without asking"
        colour = {"allow": "green", "ask": "yellow", "deny": "red"}[setting]
        line = Text(f"  {name:<17}")
        line.append(f"{setting:<6}", style=colour)
        line.append(f" {why}", style="dim")
        session.console.print(line)
    session.say(f"  allowed dirs: {', '.join(policy.allowed_dirs)}", "dim")
    if session.approver.dirs:  # answered "d": every change under them, for this session
        under = ", ".join(session.approver.dirs)
        session.say(f"  changes allowed for this session (you answered 'd') under: {under}", "dim")
    return True


def _mcp(session: ChatSession, _argument: str) -> bool:
    from cli.ui.mcp_view import status_lines

    servers = session.agent.mcp
    if servers is None:
        session.say("no MCP servers configured (mcp.servers in the config, or --mcp-config)", "dim")
        return True
    for line in session.agent.mcp_tools():  # waits for those still starting, said once
        session.say(line, "yellow")
    for line in status_lines(servers.status()):
        session.say(line)
    return True


def think_state(think: bool | str) -> str:
    """on, off, or the level."""
    if isinstance(think, str):
        return think
    return "on" if think else "off"


def _think(session: ChatSession, argument: str) -> bool:
    argument = argument.lower()
    if argument not in THINK_CHOICES:
        state = think_state(session.agent.think)
        levels = ", ".join(THINK_LEVELS)
        session.say(f"thinking is {state}; /think on, /think off, or a level: {levels}")
        return True
    think: bool | str = argument if argument in THINK_LEVELS else argument == "on"
    settings = session.agent.settings
    # The user's own choice now: no model profile changes it (agent.aids: profiles).
    chosen = settings.chosen | {"think"}
    session.agent.settings = replace(settings, think=think, chosen=chosen)
    session.renderer.show_thinking = bool(think)
    state = think_state(think)
    if think and not session.agent.model_info().supports_thinking:
        session.say(f"thinking {state}, but {session.agent.settings.model} cannot think", "yellow")
    else:
        session.say(f"thinking {state}", "dim")
    return True


def _save(session: ChatSession, argument: str) -> bool:
    force = argument.endswith("!")
    # Without a name: this session, under the name it autosaves to (not a second copy).
    name = argument.removesuffix("!").strip() or session.session_name
    if name != session.session_name and session.store.exists(name) and not force:
        session.renderer.error(
            f"a saved session named {name} exists; /save {name}! replaces it, or choose "
            "another name"
        )
        return True
    try:
        path = session.store.save(
            name, session.agent.settings.model, session.conversation, cwd=session.agent.policy.cwd
        )
    except (OSError, AgentError, ToolError) as exc:
        message = exc.message if isinstance(exc, AgentError) else str(exc)
        session.renderer.error(f"could not save the session: {message}")
        return True
    session.session_name, session.saved_at, session.save_failed = name, path, False
    session.say(f"saved as {name} ({path})", "dim")
    return True


def _load(session: ChatSession, argument: str) -> bool:
    if not argument:
        names = session.store.names()
        more = f" and {len(names) - 20} more (agent sessions lists them)" if len(names) > 20 else ""
        session.say("usage: /load NAME; saved: " + (", ".join(names[:20]) or "none") + more)
        return True
    session.load(argument)
    return True


def _undo(session: ChatSession, argument: str, *, redo: bool = False) -> bool:
    from cli.ui.changes_view import undo_flow

    store = session.agent.context.changes
    if store is None:
        session.renderer.error("no change journal in this session: nothing to undo")
        return True
    words = argument.split()
    numbers = [w.lstrip("#") for w in words if w.lstrip("#").isdigit()]
    flags = {w.lstrip("-") for w in words if not w.lstrip("#").isdigit()}
    if len(numbers) > 1 or not flags <= ({"all"} if redo else {"turn", "all"}):
        usage = "/redo [all]" if redo else "/undo [ID] [turn] [all] (ids: /history)"
        session.renderer.error(f"usage: {usage}")
        return True

    def ask(question: str) -> bool:
        return session.approver.keys.read_key(f"{question} [y/n] ", "yn") == "y"

    done = undo_flow(
        store,
        int(numbers[0]) if numbers else None,
        cwd=session.agent.policy.cwd,
        say=lambda line: session.say(line, "dim"),
        ask=ask,
        policy=session.agent.policy,
        turn="turn" in flags,
        everywhere="all" in flags,
        redo=redo,
        chat=True,
    )
    # The model last saw the files as they were; after the undo it must read them again.
    for change in done:
        session.agent.context.memory.remember(change.path, None)
        if change.origin:
            session.agent.context.memory.remember(change.origin, None)
    return True


def _redo(session: ChatSession, argument: str) -> bool:
    return _undo(session, argument, redo=True)


def _turns(session: ChatSession, _argument: str) -> bool:
    turns = conversation_turns(session.conversation)
    for number, turn in enumerate(turns, 1):
        session.say(f"{number:>3}. you: {shorten_text(turn.prompt, 90)}")
        tools = f" ({plural(len(turn.calls), 'tool call')})" if turn.calls else ""
        if turn.changed:
            tools += f" · changed {', '.join(turn.changed[:5])}"
            if len(turn.changed) > 5:
                tools += f" and {len(turn.changed) - 5} more"
        session.say(f"     model{tools}: {shorten_text(turn.answer, 90)}", "dim")
    if not turns:
        session.say("nothing yet", "dim")
    return True


def _diff(session: ChatSession, argument: str) -> bool:
    """What this chat changed (undos included) as one unified diff; `/diff PATH`: one file,
    or what is under a directory."""
    from cli.fs.paths import PathError, resolve_path
    from cli.ui.changes_view import session_diff

    store = session.agent.context.changes
    if store is None:
        session.renderer.error("no change journal in this session: nothing to diff")
        return True
    policy = session.agent.policy
    only = None
    if argument:
        try:
            only = resolve_path(argument, policy.cwd, policy.home).real
        except PathError as exc:
            session.renderer.error(f"/diff {sanitize(argument)}: {exc}")
            return True
    lines = session_diff(store, store.session, policy.cwd, only)
    if not lines:
        where = f" to {argument}" if argument else ""
        session.say(f"no changes{where} in this chat (`agent history` lists earlier ones)", "dim")
        return True
    for line in lines:
        style = {"+": "green", "-": "red", "@": "cyan", "#": "yellow"}.get(line[:1], "")
        if line.startswith(("+++", "---")):
            style = "bold"
        session.console.print(Text(sanitize(line, multiline=True), style=style), soft_wrap=True)
    return True


def _retry(session: ChatSession, argument: str) -> bool:
    """Send the last message again (its attachments as they were), dropping the answer."""
    if argument:
        session.renderer.error("usage: /retry (sends your last message again)")
        return True
    if session.refused_message() is not None:
        session.renderer.error(
            "your last message was not kept (see why above): /edit puts it back in the input"
        )
        return True
    index = session.last_prompt()
    if index is None:
        session.say("nothing to retry: no message sent yet", "dim")
        return True
    session.say("sending your last message again; its last answer is dropped", "dim")
    sent, typed, images = session.drop_from(index)
    session.answer(sent, typed=typed, images=images)
    return True


def _edit(session: ChatSession, argument: str) -> bool:
    """The last message back in the input, to change and send; what followed it is dropped."""
    if argument:
        session.renderer.error("usage: /edit (puts your last message back in the input)")
        return True
    refused = session.refused_message()
    if refused is not None:  # nothing of it is in the conversation: nothing to drop
        session._last_sent = None
        session._prefill = refused
        session.say("your last message is back in the input (Enter sends it)")
        return True
    index = session.last_prompt()
    if index is None:
        session.say("nothing to edit: no message sent yet", "dim")
        return True
    _sent, typed, _images = session.drop_from(index)
    session.say("your last message is back in the input (Enter sends it); its answer is dropped")
    session._prefill = typed
    session.autosave()
    return True


def _history(session: ChatSession, argument: str) -> bool:
    """The change journal's latest N records (30), as `agent history` lists them: one word,
    one meaning (the conversation's turns are /turns)."""
    from cli.ui.changes_view import history_rows

    store = session.agent.context.changes
    if store is None:
        session.renderer.error("no change journal in this session: no history of changes")
        return True
    if argument and not (argument.isdigit() and int(argument) > 0):
        session.renderer.error("usage: /history [N] (the latest N changes; the turns: /turns)")
        return True
    changes = store.history()[-int(argument or 30) :]
    if not changes:
        session.say("no changes recorded yet (/turns lists the conversation's turns)", "dim")
        return True
    session.say("\n".join(history_rows(changes, session.agent.policy.cwd)))
    session.say("/undo ID takes one back · /turns lists the conversation's turns", "dim")
    return True


def _compact(session: ChatSession, argument: str) -> bool:
    """Leave out now what a full context would: `/compact summary` first asks the model for
    a summary of the conversation, which the note on what was left out keeps."""
    if argument.lower() not in ("", "summary"):
        session.renderer.error("usage: /compact, or /compact summary")
        return True
    agent, conversation = session.agent, session.conversation
    size, target = agent.compaction_sizes(conversation)
    if size <= target:
        session.say(
            f"nothing to compact: the conversation takes about {size} tokens, no more than "
            f"the {target} a compaction leaves (agent.compact_to)",
            "dim",
        )
        return True
    summary = ""
    if argument:
        events = agent.summarise(conversation)
        session.renderer.begin(agent.settings.model)
        try:
            while True:
                try:
                    session.renderer.handle(next(events))
                except StopIteration as finished:
                    summary = finished.value
                    break
        finally:
            session.renderer.close()
    done = agent.compact(conversation, summary)
    if not done.did:
        session.say(
            "nothing could be left out: what is sent is the current message and its latest step",
            "dim",
        )
        return True
    session.say(agent.compaction_notice(done), "dim")
    if summary and not done.summarised:
        session.say("the summary is not kept: no turn or step was left out whole", "dim")
    return True


COMMANDS: dict[str, Command] = {
    "/help": Command("/help", "this list", _help),
    "/exit": Command("/exit", "quit (also /bye, Ctrl-D)", _exit),
    "/bye": Command("/bye", "quit", _exit),
    "/clear": Command("/clear", "start a new conversation", _clear),
    "/model": Command("/model [NAME]", "show or switch the model", _model),
    "/models": Command("/models", "the server's models", _models),
    "/tools": Command("/tools", "each tool and what the policy does with it", _tools),
    "/mcp": Command("/mcp", "the MCP servers: status, protocol version, tools", _mcp),
    "/think": Command(
        "/think on|off|LEVEL", "let the model think (LEVEL: low … max), and show it", _think
    ),
    "/save": Command("/save [NAME]", "save the conversation", _save),
    "/load": Command("/load NAME", "load a saved conversation", _load),
    "/turns": Command("/turns", "the turns so far, and which changed files", _turns),
    "/diff": Command(
        "/diff [PATH]", "this chat's changes as one unified diff (or one file's)", _diff
    ),
    "/retry": Command(
        "/retry", "send your last message again, dropping its answer (changes stay)", _retry
    ),
    "/edit": Command(
        "/edit", "put your last message back in the input to change; drops what followed", _edit
    ),
    "/compact": Command(
        "/compact [summary]", "leave old tool results and turns out now (with a summary)", _compact
    ),
    "/history": Command(
        "/history [N]", "the changes to files, as `agent history` (turns: /turns)", _history
    ),
    "/undo": Command(
        "/undo [ID|turn|all]", "take back the last change (a turn; #ID; anywhere)", _undo
    ),
    "/redo": Command("/redo [all]", "bring back what the last /undo took back", _redo),
    "/plan": Command(
        "/plan", "plan mode on or off: only the tools that change nothing, and a plan", _plan
    ),
    "/go": Command("/go [MESSAGE]", "leave plan mode, keeping the plan (and send MESSAGE)", _go),
}
