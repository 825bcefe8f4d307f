"""`agent chat`: the interactive session. Reads a line, runs a turn of the agent loop and
hands its events to the renderer; slash commands manage the session. Nothing the server,
a tool or the user's keys do ends it, except /exit, /bye and Ctrl-D."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from rich.console import Console

from cli.backends.messages import Message
from cli.errors import AgentError, ToolError
from cli.fs.paths import display_path
from cli.loop.agent import Agent
from cli.loop.custom_commands import Catalogue, CustomCommand, Seen
from cli.loop.images import (
    Image,
)
from cli.loop.mentions import typed_text
from cli.records.audit_events import AuditLog, audited
from cli.records.sessions import SessionStore, conversation_turns, timestamp_name
from cli.ui.approve import ChatApprover
from cli.ui.chat_attach import ChatAttachments
from cli.ui.chat_commands import COMMANDS, PLAN_TOOLS_LINE, THINK_CHOICES
from cli.ui.editor import ChatCompleter, history_at, make_prompt, strip_block
from cli.ui.render import ChatRenderer
from cli.ui.text import plural, sanitize, shorten_text

REPLAYED_TURNS = 3  # turns shown again on --resume and /load
MCP_WATCH_POLLS = 50  # tenths of a second a server's failure waits for a prompt to show above


class ChatSession(ChatAttachments):
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
        typed, turn = typed_text(sent, self._attached_as), ""
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

    def _attached_as(self, path: str) -> list[str]:
        """How an attachment's block names the file `@path` mentions: the file read_file
        would read (a symlink's target, the disk's spelling), shown as the trace shows it."""
        resolved = self.agent.policy.decide("read_file", {"path": path}).paths.get("path")
        return [self.agent.context.show(resolved.real)] if resolved is not None else []

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
