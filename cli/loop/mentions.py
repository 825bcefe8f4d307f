"""`@path` mentions in a message: the grammar chat's input and `agent run --command` read
them with (chat attaches them in cli/ui/chat_attach.py; a command's body in `agent run` through
`attach_files` below), the `<file …>` block an attached file becomes, and the way back
from a message as sent to the text as typed (`typed_text`: /edit after --resume).

An `@word` that names no file is text (`@dataclass`, `@Override`, `@types/node`); `@@word`
is the text `@word`; a name with spaces is quoted (`@"my notes.txt"`) or escaped
(`@my\\ notes.txt`).
"""

from __future__ import annotations

import html
import os
import re
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cli.backends.messages import ToolCall
from cli.loop.events import Event, ToolResult

if TYPE_CHECKING:
    from cli.loop.agent import Agent

# `@path` in a message, at its start or after a space: `@notes.md`, `@"my notes.txt"` (quoted:
# the name as it is, spaces included, no `"` in it), `@my\ notes.txt` (a backslash keeps the
# next character, a space or a backslash, in the name). Trailing punctuation after it is not
# part of it (`see @notes.md.`). `@@word` is the literal text `@word`: never attached, sent
# with one `@` less — the way to write `@notes.md` in a message when notes.md exists.
# An `@word` that names no file is text too (`@dataclass`, `@Override`, `@types/node`):
# what attaches, or is refused, is decided in cli/ui/chat_attach.py (ChatAttachments.attach).
# The bare name is taken whole, up to the next space, and its trailing punctuation is cut in
# code (_bare_name): a lazy name before a run of punctuation made matching quadratic.
_MENTION = re.compile(
    r"(?:(?<=\s)|^)@(?:(?P<literal>@\S*)"
    r'|"(?P<quoted>[^"\n]+)"[,;:!?.)]*'
    r"|(?P<bare>(?:\\.|[^\s\\])+))"
    r"(?=\s|$)"
)
_TRAILING = ",;:!?.)"
_ESCAPED = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Mention:
    """One `@…` of a message: the text as typed, and the path it names (None: `@@word`)."""

    typed: str
    path: str | None


def mentions(text: str) -> list[Mention]:
    """The `@paths` of a message, in order (see _MENTION)."""
    found = []
    for match in _MENTION.finditer(text):
        if match.group("literal") is not None:
            found.append(Mention(match.group(0), None))
        elif match.group("quoted") is not None:
            found.append(Mention(match.group(0), match.group("quoted")))
        else:
            name = _bare_name(match.group("bare"))
            found.append(Mention(match.group(0), _ESCAPED.sub(r"\1", name)))
    return found


def _bare_name(bare: str) -> str:
    """A bare `@name` without the punctuation after it (`see @notes.md.`), never emptied,
    an escaped character kept."""
    end = len(bare)
    while end > 1 and bare[end - 1] in _TRAILING and bare[end - 2] != "\\":
        end -= 1
    return bare[:end]


def literal_text(text: str) -> str:
    """The message as sent: each `@@word` as `@word`, the rest as typed."""
    return _MENTION.sub(
        lambda m: m.group(0)[1:] if m.group("literal") is not None else m.group(0), text
    )


def file_block(shown: str, result: dict[str, Any]) -> str:
    """An attached file as the message carries it: `<file path="…">` and its content, which
    cannot close its own block, nor its name break out of the attribute."""
    from cli.loop.images import attribute

    note = ""
    if result.get("truncated"):
        first, last = result.get("line_range") or (0, 0)
        note = f" (lines {first}-{last} of {result.get('lines')})"
    content = str(result.get("content", "")).replace("</file", "<\\/file")
    return f'<file path="{attribute(shown)}"{note}>\n{content}</file>'


@dataclass
class Attached:
    """A message with its `@files` attached: the text as sent, what each read did in order
    (the hooks that ran on it, its result: for the audit log and the trace), and what went
    wrong, if something did (nothing is sent)."""

    text: str
    events: list[Event] = field(default_factory=list)
    refused: str = ""


def attach_files(agent: Agent, text: str) -> Attached:
    """`text` with each `@path` that names a file attached, read as read_file reads (the
    policy, its approver, the read gate); `@@word` as `@word`. A mention the policy hides, or
    that names a file that cannot be read, sends nothing (`refused`). Images are not attached
    here (`-a` attaches them)."""
    from cli.loop.images import is_image_name

    blocks: list[str] = []
    attached = Attached(text)
    done: set[str] = set()
    for mention in mentions(text):
        path = mention.path
        if path is None or path in done:
            continue
        decision = agent.policy.decide("read_file", {"path": path})
        if decision.rule == "disabled":
            continue  # attachments are off with read_file: the mention is text
        resolved = decision.paths.get("path")
        hidden = decision.action == "deny" and decision.rule in ("sensitive", "blocked_dir")
        if not hidden and (resolved is None or not os.path.lexists(resolved.entry)):
            continue  # names nothing: text
        done.add(path)
        if hidden:
            attached.refused = f"@{path} not attached: {decision.reason}"
            return attached
        if is_image_name(path):
            attached.refused = f"@{path} not attached: an image attaches with -a {path}"
            return attached
        call = ToolCall("read_file", {"path": path})
        started = time.monotonic()
        decided = agent.decide(call)
        attached.events += agent.take_hook_events()  # hooks.pre_tool on the read
        result = agent.execute(decided)
        attached.events.append(ToolResult(call, result, time.monotonic() - started, decided))
        if not decided.allowed or not result.get("success"):
            why = decided.reason if not decided.allowed else result.get("error")
            attached.refused = f"@{path} not attached: {why}"
            return attached
        shown = agent.context.show(str(result.get("path", path)))
        blocks.append(file_block(shown, result))
    attached.text = literal_text(text)
    if blocks:
        attached.text += "\n\n" + "\n\n".join(blocks)
    return attached


# What `attach` appends: a `<file …>` block for each file, then an `<image …/>` line each.
_FILE_HEADER = re.compile(r'<file path="([^"\n]*)"[^>\n]*>')  # file_block
_IMAGE_BLOCK = re.compile(r'<image path="([^"\n]*)" />')  # cli/loop/images.py image_note


def typed_text(sent: str, names: Callable[[str], Iterable[str]] | None = None) -> str:
    """A message as typed: what `attach` appended left out. Those are the blocks at its very
    end, each after a blank line: `<file path="…">…</file>` (whose content cannot hold
    `</file`: file_block escapes it) or `<image path="…" />`, each for an `@mention` of its
    file in what was typed; taken off from the last one back. A `<file path=…>` the user
    typed (no mention of it, or words after it) is text: kept, and so is a second block for
    one mention (a mention attaches once). `names(mention)`: how else a block may name a
    mention's file (the chat resolves it as read_file does: a symlink's target, the disk's
    spelling); its own last part, case and Unicode form aside, always."""
    end = len(sent)
    used: set[str] = set()  # the mentions whose block is taken off already
    while True:
        head = _attached_block_start(sent, end, names or (lambda _path: ()), used)
        if head is None:
            return sent[:end]
        end = head


def _attached_block_start(
    sent: str, end: int, names: Callable[[str], Iterable[str]], used: set[str]
) -> int | None:
    """Where the attached block ending at `end` starts (its blank line), or None; the
    mention it is taken for joins `used`."""
    text = sent[:end]
    if text.endswith(" />"):
        start = text.rfind('\n\n<image path="')
        found = _IMAGE_BLOCK.fullmatch(text[start + 2 :]) if start >= 0 else None
        return start if found and _mentioned(text[:start], found.group(1), names, used) else None
    if not text.endswith("</file>"):
        return None
    # The block's content holds no `</file`: it starts after the one before it, at the first
    # header there whose file the text before it mentions (the content may quote headers).
    after = max(0, text.rfind("</file", 0, len(text) - len("</file>")))
    start = text.find('\n\n<file path="', after)
    while start >= 0:
        header = text[start + 2 : text.find("\n", start + 2)]
        found = _FILE_HEADER.fullmatch(header)
        if found and _mentioned(text[:start], found.group(1), names, used):
            return start
        start = text.find('\n\n<file path="', start + 2)
    return None


def _mentioned(
    typed: str, shown: str, names: Callable[[str], Iterable[str]], used: set[str]
) -> bool:
    """Does `typed` mention (`@path`), and not yet in `used`, the file a block names `shown`
    (as the trace shows it: relative, or ~, or absolute): by its last part, or by a name
    `names` gives the mention? The mention found joins `used`."""
    name = _last_part(html.unescape(shown))
    for mention in mentions(typed):
        if mention.path is None or mention.path in used:
            continue
        if name in {_last_part(n) for n in (mention.path, *names(mention.path))}:
            used.add(mention.path)
            return True
    return False


def _last_part(path: str) -> str:
    """A path's last component as a case-insensitive, normalising disk would compare it."""
    return unicodedata.normalize("NFC", os.path.basename(path.rstrip("/"))).casefold()
