"""What a chat message attaches: each `@file` read as read_file reads it (the policy, its
approver, the read gate, the audit log), an `@image` for a model that can see, a mention
that names nothing or looks like a path said in a dim line; a message that cannot be sent
whole is not sent (it is back in the input)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from cli.backends.messages import Message, ToolCall
from cli.errors import AgentError
from cli.loop.agent import Agent
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
from cli.records.audit_events import AuditLog
from cli.ui.render import ChatRenderer
from cli.ui.text import sanitize
from cli.units import human_size

# A refusal the policy makes by the name alone, whether or not the file is there: said at
# once, so that an `@path` never tells whether a hidden file exists.
_HIDDEN_RULES = frozenset({"sensitive", "blocked_dir"})
# An `@word` a person may have meant as a file (`@notse.md`, `@src/app`), not a decorator or
# a handle (`@dataclass`, `@app.route("/")`): when it names nothing, a dim line says so.
_LOOKS_LIKE_A_PATH = re.compile(r"(?=[\w.~/ -]+$)(?:.*/|.*\.[A-Za-z0-9]{1,5}$)")
_NOT_SENT = "the message was not sent (it is back in the input)"


class ChatAttachments:
    """The attaching part of the chat session (cli/ui/repl.py ChatSession is built on it)."""

    agent: Agent
    console: Console
    renderer: ChatRenderer
    audit_log: AuditLog | None
    conversation: list[Message]
    saved_at: Path | None
    _images: list[Image]

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

    def say(self, text: str, style: str = "") -> None:
        """A line (or lines) of session text; sanitised, since much of it quotes what came
        from elsewhere: model and session names, the server's model list, paths."""
        self.console.print(Text(sanitize(text, multiline=True), style=style))
