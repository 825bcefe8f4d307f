"""`agent chat`: the interactive session. Reads a line, runs a turn of the agent loop and
hands its events to the renderer; slash commands manage the session. Nothing the server,
a tool or the user's keys do ends it, except /exit, /bye and Ctrl-D."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from rich.console import Console
from rich.text import Text

from cli.backends.messages import Message, ModelInfo, ToolCall, closest_models
from cli.config.settings import THINK_LEVELS
from cli.errors import AgentError, ToolError
from cli.fs.paths import display_path
from cli.loop.agent import Agent
from cli.loop.custom_commands import Catalogue, CustomCommand, Seen
from cli.loop.events import Notice, ToolDecided, ToolResult
from cli.loop.hooks import HookRun
from cli.loop.images import (
    Image,
    cannot_see,
    image_bytes,
    image_note,
    is_image_name,
    read_image,
    sees_images,
    too_many_images,
    unknown_sight,
)
from cli.loop.mentions import file_block, literal_text, mentions
from cli.records.audit_events import AuditLog, audited
from cli.records.sessions import SessionStore, conversation_turns, timestamp_name
from cli.ui.approve import ChatApprover
from cli.ui.editor import ChatCompleter, history_at, make_prompt, strip_block
from cli.ui.render import ChatRenderer
from cli.ui.text import plural, sanitize, shorten_text
from cli.units import human_size

THINK_CHOICES = ("on", "off", *THINK_LEVELS)
# A refusal the policy makes by the name alone, whether or not the file is there: said at
# once, so that an `@path` never tells whether a hidden file exists.
_HIDDEN_RULES = frozenset({"sensitive", "blocked_dir"})
# An `@word` a person may have meant as a file (`@notse.md`, `@src/app`), not a decorator or
# a handle (`@dataclass`, `@app.route("/")`): when it names nothing, a dim line says so.
_LOOKS_LIKE_A_PATH = re.compile(r"(?=[\w.~/ -]+$)(?:.*/|.*\.[A-Za-z0-9]{1,5}$)")
_NOT_SENT = "the message was not sent (it is back in the input)"
# What `attach` appends: a `<file …>` block for each file, then an `<image …/>` line each.
_ATTACHED_BLOCKS = re.compile(r'\n\n<(?:file|image) path="[^"\n]*"[^>\n]*>.*\Z', re.DOTALL)
REPLAYED_TURNS = 3  # turns shown again on --resume and /load
MCP_WATCH_POLLS = 50  # tenths of a second a server's failure waits for a prompt to show above


@dataclass(frozen=True)
class Command:
    usage: str
    help: str
    run: Callable[[ChatSession, str], bool]  # returns False to end the session


class ChatSession:
    """One interactive session: the conversation, the prompt, and the slash commands."""

    def __init__(
        self,
        agent: Agent,
        console: Console,
        renderer: ChatRenderer,
        approver: ChatApprover,
        store: SessionStore,
        prompt: PromptSession[str] | None = None,
        history_file: Path | None = None,
        audit_log: AuditLog | None = None,
        max_sessions: int = 100,
        catalogue: Catalogue | None = None,
        seen: Seen | None = None,
    ) -> None:
        self.agent = agent
        # The user's and the project's own commands (cli/loop/custom_commands.py), and which
        # project commands were shown already.
        self.catalogue = catalogue or Catalogue()
        self.seen = seen
        self.console = console
        self.renderer = renderer
        self.approver = approver
        # At the step limit, the person chooses: continue, wrap up or stop.
        agent.at_step_limit = lambda steps: approver.step_limit(steps, agent.settings.max_steps)
        self.store = store
        self.audit_log = audit_log  # None: tool calls are not recorded (tests)
        self.max_sessions = max_sessions
        self.saved_at: Path | None = None  # where this session was last saved
        self.save_failed = False  # the last save did not happen: saved_at is older
        self.conversation: list[Message] = []
        self._name = ""
        self.session_name = timestamp_name()
        self._models: list[str] | None = None
        self._turn_begun = False  # a turn has begun: MCP start-up failures are the agent's to say
        self._prefill = ""
        self._images: list[Image] = []  # the images the message being sent attaches
        # The last message sent: its text with attachments, as typed, and its turn in the
        # change store (/retry and /edit say what it changed).
        self._last_sent: tuple[str, str, str] | None = None
        # `@path` completion offers only what the policy would let the chat attach.
        names = [*COMMANDS, *(f"/{name}" for name in self.catalogue.commands)]
        self.completer = ChatCompleter(
            names, agent.policy.cwd, self._completions_for, hides=agent.policy.hides
        )
        self.prompt = prompt or make_prompt(self.completer, history_at(history_file))

    @property
    def session_name(self) -> str:
        """The name this session saves under, as `agent sessions` lists it; the audit log
        records its calls under the same name, whatever renames it (/save NAME, /clear,
        --resume); so does the change store, so that an undo says which session a change
        came from."""
        return self._name

    @session_name.setter
    def session_name(self, name: str) -> None:
        self._name = name
        if self.audit_log is not None:
            self.audit_log.session_id = name
        if self.agent.context.changes is not None:
            self.agent.context.changes.name = name

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        """Read and answer until /exit, /bye or Ctrl-D; the exit status (always 0)."""
        self._watch_mcp()
        while True:
            self._say_mcp_failures()
            try:
                text = self.prompt.prompt(self.prompt_text(), default=self._prefill)
            except KeyboardInterrupt:
                # Ctrl-C at the prompt clears the line; at an empty one, how to leave.
                if not self._typed_at_prompt():
                    self.say("Ctrl-D or /exit to quit", "dim")
                self._prefill = ""
                continue
            except EOFError:
                self.farewell()
                return 0
            self._prefill = ""
            text = strip_block(text).strip()
            if not text:
                continue
            try:
                if text.startswith("/") and not self.command(text):
                    self.farewell()
                    return 0
                if not text.startswith("/"):
                    self.send(text)
            except KeyboardInterrupt:
                self.renderer.interrupted()
            except Exception as exc:  # a bug of ours must not take the session with it
                self.renderer.error(f"internal error: {exc!r}; the session goes on")

    def prompt_text(self) -> str:
        """The input line's prompt: `plan › ` in plan mode."""
        return "plan › " if self.agent.plan_mode else "› "

    # -- MCP servers that did not start: said as soon as known, not at the first message --

    def _say_mcp_failures(self) -> None:
        """The servers known by now to have failed to start, each named once; after the
        first turn has begun, the agent says them (it waits for the servers then)."""
        servers = self.agent.mcp
        if servers is None or self._turn_begun:
            return
        for line in servers.failures():
            self.say(line, "yellow")

    def _watch_mcp(self) -> None:
        """The servers start in the background: as each start ends, a failure is said above
        the prompt being read (prompt_toolkit redraws it, with what was typed), or before
        the next prompt when none is being read."""
        servers = self.agent.mcp
        threads = servers.starting() if servers is not None else []
        if not threads:
            return

        def watch() -> None:
            for thread in threads:
                thread.join()
                for _ in range(MCP_WATCH_POLLS):  # the prompt may be a moment from being read
                    if self._turn_begun or self._tell_above_prompt():
                        break
                    time.sleep(0.1)

        threading.Thread(target=watch, daemon=True, name="mcp-watch").start()

    def _tell_above_prompt(self) -> bool:
        """Has the prompt's own loop say the failures known now: True when a prompt is
        being read (the run loop says them before the next one otherwise)."""
        app = getattr(self.prompt, "app", None)
        loop = getattr(app, "loop", None)
        if app is None or not app.is_running or loop is None:
            return False
        try:
            loop.call_soon_threadsafe(lambda: run_in_terminal(self._say_mcp_failures))
        except RuntimeError:  # the prompt ended meanwhile: its loop is closed
            return False
        return True

    def _typed_at_prompt(self) -> str:
        """What the input line held when the prompt was left ("" when it was empty)."""
        buffer = getattr(self.prompt, "default_buffer", None)
        return str(getattr(buffer, "text", "") or "")

    def farewell(self) -> None:
        """Leaving: where the conversation is kept, and how to come back to it — or that
        it is not, when the last save failed (said above, with why)."""
        if self.save_failed and self.saved_at is None:
            self.say("the session could not be saved (see above): nothing to resume", "yellow")
        elif self.save_failed:
            self.say(
                f"the last save failed (see above): session {self.session_name} "
                f"({self.saved_at}) holds the conversation as it was before; resume that "
                f"with: agent chat --resume {self.session_name}",
                "yellow",
            )
        elif self.saved_at is not None:
            self.say(
                f"session saved as {self.session_name} ({self.saved_at}); "
                f"resume it with: agent chat --resume {self.session_name}",
                "dim",
            )

    def send(self, text: str) -> None:
        """Attach `@paths`, then run one turn of the agent loop."""
        message = self.attach(text)
        if message is None:
            self._prefill = text  # nothing is lost: the message waits at the prompt
            return
        images, self._images = [image.data for image in self._images], []
        self.answer(message, typed=text, images=images)

    def answer(self, message: str, *, typed: str, images: Sequence[str] = ()) -> None:
        """One turn of the agent loop for `message` and its `images` (`typed`: what the user
        typed of it, before attachments: /edit gives it back)."""
        changes = self.agent.context.changes
        self._turn_begun = True  # the agent waits for the MCP servers and says what failed
        events = self.agent.run(self.conversation, message, images)
        self._last_sent = (message, typed, changes.turn if changes is not None else "")
        if self.audit_log is not None:
            events = audited(events, self.audit_log)  # closing it closes the loop too
        self.renderer.begin(self.agent.settings.model, plan=self.agent.plan_mode)
        try:
            for event in events:
                self.renderer.handle(event)
        except KeyboardInterrupt:
            # Stops the stream; the loop keeps the partial answer in the conversation.
            events.close()  # type: ignore[attr-defined]
            self.renderer.interrupted()
        except AgentError as exc:
            self.renderer.error(exc.message)
        finally:
            self.renderer.close()
            self._prefill = self.renderer.typed_ahead()  # keys typed meanwhile: the next line
            self.autosave()

    def attach(self, text: str) -> str | None:
        """The message with the content of each `@path` that names a file appended, read
        through the same policy and limits as read_file; None (after saying why) if one
        cannot be attached. What a careful user expects:

        - `@word` that names nothing (`@dataclass`, `@Override`, `@types/node`, `@bob`) is
          text, sent as typed; one that looks like a path gets a dim line saying so;
        - `@path` the policy hides (a secret, a blocked dir) is refused loudly and nothing is
          sent, whether or not the file exists — the answer never tells which;
        - `@path` that names a file (or a directory: it exists, and cannot be attached) is
          attached, or refused with the reason, and nothing is sent;
        - `@@word` is the text `@word` (editor.mentions has the grammar)."""
        blocks: list[str] = []
        self._images = []
        attached: set[str] = set()
        for mention in mentions(text):
            path = mention.path
            if path is None or path in attached:
                continue
            shown_as = sanitize(mention.typed.rstrip(",;:!?.)"))
            kind = self._mention_kind(path)
            if kind == "off":
                self.say(
                    f"{shown_as}: read_file is off in this policy, so nothing is attached; "
                    "sent as text",
                    "dim",
                )
                continue
            if kind != "file":
                if kind != "text":  # hidden: refused by its name alone
                    self.renderer.error(
                        f"{shown_as} not attached: {kind}; {_NOT_SENT}; @{shown_as} sends it "
                        "as text"
                    )
                    return None
                if _LOOKS_LIKE_A_PATH.match(path):  # a typo, perhaps: say it went as text
                    self.say(f"{shown_as} names no file: sent as text", "dim")
                continue
            attached.add(path)
            if is_image_name(path):  # an image goes to a vision model as one (cli/loop/images.py)
                if not self._attach_image(path):
                    return None
                continue
            result, decided = self._read_for_attachment(path)
            escape = f"@{shown_as} sends it as text"
            if not decided.allowed:
                self.renderer.error(
                    f"{shown_as} not attached: {decided.reason}; {_NOT_SENT}; {escape}"
                )
                return None
            if not result.get("success"):
                self.renderer.error(
                    f"{shown_as} not attached: {result.get('error')}; {_NOT_SENT}; {escape}"
                )
                return None
            shown = self.agent.context.show(str(result.get("path", path)))
            note = ""
            if result.get("truncated"):
                first, last = result.get("line_range") or (0, 0)
                note = f" (lines {first}-{last} of {result.get('lines')})"
            blocks.append(file_block(shown, result))
            self.console.print(Text(f"📎 attached {sanitize(shown)}{note}", style="dim"))
        text = literal_text(text)
        if self._images:
            blocks.append(image_note(self._images))
        if not blocks:
            return text
        return text + "\n\n" + "\n\n".join(blocks)

    def _attach_image(self, path: str) -> bool:
        """`@shot.png`: the image joins the message for a model that can see (said, or the
        server does not say); False, after one line saying why, if it cannot be sent."""
        try:
            sight = sees_images(self.agent.model_info())
        except AgentError as exc:
            self.renderer.error(f"@{path} not attached: {exc.message}; {_NOT_SENT}")
            return False
        if sight is False:
            why = cannot_see(self.agent.settings.model)
            self.renderer.error(f"@{path} not attached: {why}; {_NOT_SENT}")
            return False
        attached = read_image(self.agent, path)
        if self.audit_log is not None:
            self.audit_log.record(attached.record)
        if attached.image is None:
            self.renderer.error(f"@{path} not attached: {attached.error}; {_NOT_SENT}")
            return False
        image = attached.image
        held = image_bytes(self.conversation) + sum(i.size for i in self._images)
        too_many = too_many_images(held, image)
        if too_many:
            self.renderer.error(
                f"@{path} not attached: {too_many}; {_NOT_SENT}; /clear starts a new conversation"
            )
            return False
        if sight is None and not self._images:
            self.say(unknown_sight(self.agent.settings.model), "yellow")
        self._images.append(image)
        size = human_size(image.size)
        self.console.print(Text(f"📎 attached {sanitize(image.path)} (image, {size})", style="dim"))
        return True

    def _mention_kind(self, path: str) -> str:
        """What `@path` is: "file" (its name is in the file system: to attach), "text" (it
        names nothing, or cannot be a path), "off" (read_file is off: nothing attaches, and
        nothing is looked at), or the policy's reason for a path it hides (a
        secret, a blocked dir), decided on the name before anything looks at the disk."""
        decision = self.agent.policy.decide("read_file", {"path": path})
        if decision.action == "deny" and decision.rule in _HIDDEN_RULES:
            return decision.reason
        if decision.rule == "disabled":  # attachments are off: nothing is looked at
            return "off"
        resolved = decision.paths.get("path")
        if resolved is None:  # not a path at all (bad_path): text
            return "text"
        return "file" if os.path.lexists(resolved.entry) else "text"

    def _read_for_attachment(self, path: str) -> tuple[dict[str, Any], ToolDecided]:
        """read_file as the model would call it: same policy, approver, limits and audit."""
        call = ToolCall("read_file", {"path": path})
        started = time.monotonic()
        decided = self.agent.decide(call)
        for event in self.agent.take_hook_events():  # hooks.pre_tool on the read
            if isinstance(event, HookRun) and self.audit_log is not None:
                self.audit_log.record_hook(event)
            elif isinstance(event, Notice):
                self.say(event.text, "yellow")
        result = self.agent.execute(decided)
        if self.audit_log is not None:
            self.audit_log.record(ToolResult(call, result, time.monotonic() - started, decided))
        return result, decided

    def autosave(self) -> None:
        """Keep every conversation on disk, so a crash or a dead server loses nothing and
        `agent chat --resume` picks it up."""
        if self.saved_at is None and not any(m.get("role") == "user" for m in self.conversation):
            return  # nothing said yet (once saved, it is kept in step: /edit drops a turn)
        self.save_failed = True  # until the file is written: the farewell must not say so
        try:
            self.saved_at = self.store.save(
                self.session_name,
                self.agent.settings.model,
                self.conversation,
                cwd=self.agent.policy.cwd,
            )
            self.save_failed = False
            self.store.prune(self.max_sessions, spare=self.session_name)
        except (OSError, AgentError, ToolError) as exc:  # ToolError: not a file there
            message = exc.message if isinstance(exc, AgentError) else str(exc)
            self.renderer.error(f"could not save the session: {message}")

    # -- slash commands -------------------------------------------------------------------

    def command(self, text: str) -> bool:
        name, _, argument = text.partition(" ")
        command = COMMANDS.get(name.lower())
        own = self.catalogue.get(name[1:]) if command is None else None
        if command is None and own is None:
            known = " ".join([*COMMANDS, *(f"/{n}" for n in self.catalogue.commands)])
            self.renderer.error(f"unknown command {sanitize(name)}; commands: {known}")
            return True
        try:
            if own is not None:
                self.own_command(own, argument)
                return True
            assert command is not None
            return command.run(self, argument.strip())
        except AgentError as exc:
            self.renderer.error(exc.message)
            return True

    def own_command(self, command: CustomCommand, argument: str) -> None:
        """/NAME ARGS: the command's prompt sent as a message (its @files attached); a
        project's, the first time here (or changed since), shown and confirmed first. Its
        `model` is used for this turn only; `plan: true` enters plan mode."""
        prompt = command.expand(argument)
        project = self.catalogue.project
        if self.seen is not None and self.seen.needs_showing(project, command):
            self.say(
                f"project command /{command.name} ({command.path}), first use here; it sends:",
                "yellow",
            )
            lines = [f"  {line}" for line in command.settings()]
            self.say("\n".join([*lines, *(f"  │ {line}" for line in prompt.splitlines())]))
            answer = self.approver.keys.read_key("send it?  [y] yes  [n] no  ", "yn")
            if answer != "y":
                self.say(f"/{command.name} was not sent", "dim")
                return
            self.seen.mark(project, command)
        if command.plan and not self.agent.plan_mode:
            self.agent.plan_mode = True
            self.say(f"plan mode (/{command.name} asks for it): {PLAN_TOOLS_LINE}", "cyan")
        previous = self.agent.settings
        if command.model and command.model != previous.model:
            self.switch_model(command.model)
        try:
            self.send(prompt)
        finally:
            if command.model and self.agent.settings.model != previous.model:
                self.agent.settings = previous

    def _completions_for(self, command: str) -> Iterable[str]:
        if command == "/model":
            return self.models()
        if command == "/load":
            return self.store.names()
        if command == "/think":
            return THINK_CHOICES
        return ()

    def models(self) -> list[str]:
        if self._models is None:
            self._models = self.agent.backend.list_models()
        return self._models

    def say(self, text: str, style: str = "") -> None:
        """A line (or lines) of session text; sanitised, since much of it quotes what came
        from elsewhere: model and session names, the server's model list, paths."""
        self.console.print(Text(sanitize(text, multiline=True), style=style))

    def load(self, name: str | None) -> None:
        """Replace the conversation with a saved one (`None`: the latest chat of this
        working dir; another directory's is only named, as the one to resume by name)."""
        here = self.agent.policy.cwd
        session = self.store.latest(cwd=here) if name is None else self.store.load(name)
        if session is None:
            elsewhere = self.store.latest()
            if elsewhere is None:
                self.say("no saved chat yet: starting a new one", "dim")
                return
            where = f" in {elsewhere.cwd}" if elsewhere.cwd else ""
            self.say(
                f"no saved chat in {here}: starting a new one. The latest chat is "
                f"{elsewhere.name}{where}: agent chat --resume {elsewhere.name} reopens it "
                "(agent sessions lists them all)",
                "yellow",
            )
            return
        self.conversation = list(session.messages)
        self._last_sent = None
        self.session_name = session.name
        self.saved_at = self.store.path(session.name)
        self.save_failed = False
        self.agent.context.memory.clear()  # what it read then may have changed since
        kind = " (an unfinished agent run)" if session.kind == "run" else ""
        self.say(
            f"loaded session {session.name}{kind}: {plural(session.turns, 'turn')} "
            f"({session.saved})",
            "dim",
        )
        self.replay(REPLAYED_TURNS)
        if session.model and session.model != self.agent.settings.model:
            if session.model in self.models():
                self.switch_model(session.model)
            else:
                self.say(
                    f"its model {session.model} is not on this server; "
                    f"continuing with {self.agent.settings.model}",
                    "yellow",
                )

    def replay(self, count: int) -> None:
        """The last `count` turns again, briefly: what you asked, each tool call on one
        line, and the answer, so you see where you are."""
        turns = conversation_turns(self.conversation)
        if len(turns) > count:
            earlier = plural(len(turns) - count, "earlier turn")
            self.say(f"… {earlier} (/turns lists them)", "dim")
        for turn in turns[-count:]:
            self.say(f"› {shorten_text(turn.prompt, 200)}")
            for line in turn.calls:
                self.say(f"  {line}", "dim")
            if turn.answer:
                self.say(shorten_text(turn.answer, 400))

    def last_prompt(self) -> int | None:
        """Where the last message the user sent is in the conversation (None: none yet)."""
        for index in range(len(self.conversation) - 1, -1, -1):
            if self.conversation[index].get("role") == "user":
                return index
        return None

    def refused_message(self) -> str | None:
        """The text as typed of the last message sent, if the conversation did not keep it
        (too large for the model's context: the loop refused it); None when it kept it."""
        if self._last_sent is None:
            return None
        index = self.last_prompt()
        kept = index is not None and self.conversation[index].get("content") == self._last_sent[0]
        return None if kept else self._last_sent[1]

    def drop_from(self, index: int) -> tuple[str, str, list[str]]:
        """Drop the message at `index` and all that followed it; its text as sent and as
        typed, and its images. Says which files the dropped turn changed: those stay."""
        images = [str(i) for i in self.conversation[index].get("images") or []]
        sent = str(self.conversation[index].get("content") or "")
        typed, turn = _typed_text(sent), ""
        if self._last_sent is not None and self._last_sent[0] == sent:
            _, typed, turn = self._last_sent
        dropped = self.conversation[index:]
        del self.conversation[index:]
        self._last_sent = None
        changes = self.agent.context.changes
        records = changes.changes_of_turn(turn) if changes is not None and turn else []
        if records:
            cwd = self.agent.policy.cwd
            files = list(dict.fromkeys(display_path(c.path, cwd) for c in records))
            self.say(
                f"the dropped answer's changes stay: {', '.join(files)} "
                f"(/undo {records[0].id} turn takes them back)",
                "yellow",
            )
        else:
            changed = [f for t in conversation_turns(dropped) for f in t.changed]
            if changed:
                self.say(
                    f"the dropped answer's changes stay: {', '.join(dict.fromkeys(changed))} "
                    "(/undo takes them back)",
                    "yellow",
                )
        return sent, typed, images

    def switch_model(self, name: str) -> None:
        previous = self.agent.settings
        self.agent.settings = replace(previous, model=name, model_chosen=True)
        try:
            info = self.agent.model_info()
        except AgentError:
            self.agent.settings = previous
            raise
        tools = "tools on" if self.agent.tools_on() else "no tool support: tools off"
        thinking = "can think" if info.supports_thinking else "cannot think"
        self.say(f"model {name} · {tools} · {thinking}", "dim")


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


def _typed_text(sent: str) -> str:
    """A message as typed: what `attach` appended (each `<file …>` block) left out."""
    cut = _ATTACHED_BLOCKS.search(sent)
    return sent[: cut.start()] if cut else sent


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
