"""The card a confirmation shows (`agent chat`'s and `agent run`'s): what the call will do —
the diff of a write or an edit, what a delete removes, the command and its sandbox, an MCP
call's arguments — and what else will happen (`Consequences`).

Everything the model wrote (paths, contents, commands, link targets read from disk) goes
through `sanitize` and into rich `Text` objects, never into markup strings: a `\\r`, an ANSI
sequence or a `[bold]` must not change what the user sees. What is cut is always counted.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from cli import units
from cli.backends.messages import ToolCall
from cli.config.settings import MCP_PREFIX
from cli.errors import ToolError
from cli.fs import reading, wording
from cli.fs.paths import ResolvedPath, display_path
from cli.loop.approval import ApprovalRequest
from cli.safety.sandbox import launch as sandbox
from cli.safety.sandbox.spec import SandboxUnavailable
from cli.tools.edits import EditFailed, plan_edit
from cli.ui.cards import card_title
from cli.ui.text import mended, plural, sanitize, shorten

PREVIEW_LINES = 20  # first lines of a new file
DIFF_LINES = 80  # diff lines shown before cutting
MCP_ARGUMENT_LINES = 40  # lines of an MCP call's pretty-printed arguments
TREE_ENTRIES = 30  # entries of a recursive delete shown before cutting
LINE_CHARS = 400  # one shown line of content; longer ones say how much is cut
MAX_DIFF_BYTES = 1024 * 1024  # read at most this much of the old file; diff at most this much


@dataclass(frozen=True)
class Consequences:
    """What the configuration makes happen beyond the call itself, for the card to say:
    where a delete goes, which sandbox a command runs in."""

    trash: bool = True  # policy.trash
    sandbox_mode: str = "auto"  # policy.commands.sandbox
    undo: str = "/undo"  # how the user takes a change back here ("agent undo" in agent run)
    available: Collection[str] | None = None  # stands in for the machine's sandboxes (tests)
    platform: str | None = None  # and for sys.platform (tests)

    def sandbox_line(self) -> Text:
        """The sandbox the command will actually run in, as `sandbox/launch.py` chooses it."""
        try:
            kind = sandbox.choose(self.sandbox_mode, self.available, self.platform)
        except SandboxUnavailable as exc:
            return Text(f"  will not run: {sanitize(str(exc))}", "yellow")
        if kind == "bwrap":
            return Text(
                "  runs in the bubblewrap sandbox: no network, writes only in the allowed dirs"
            )
        if kind == "landlock":
            return Text("  runs under Landlock: no network, writes only in the allowed dirs")
        if kind == "seatbelt":
            return Text(
                "  runs in macOS's Seatbelt sandbox: no network, writes only in the allowed dirs"
            )
        return Text(
            "  runs unconfined (policy.commands.sandbox is off): no sandbox, network on", "yellow"
        )


def card(
    request: ApprovalRequest,
    cwd: str,
    encoding: str = "utf-8",
    consequences: Consequences | None = None,
) -> Text:
    """The header (waiting state) and the body: what the call will do, and what else will
    happen (`consequences`). `encoding` is the terminal's: what it cannot show comes out as
    `?`, and the card says so."""
    name = request.call.name
    header = card_title(ToolCall(name, request.arguments), "waiting")
    body, shown = describe(request, cwd, consequences or Consequences())
    rest = {k: v for k, v in request.arguments.items() if k not in shown}
    why = Text.assemble(("  why: ", "dim"), sanitize(request.decision.reason))
    if request.call.repairs:  # the call as it will run, and how the model's was mended
        why.append_text(Text(f"\n  {mended(request.call.repairs)}", "dim"))
    warnings = [Text(f"  ⚠ {sanitize(w)}", "bold red") for w in request.decision.warnings]
    if not _showable(request.arguments, encoding):
        note = f"  ⚠ this terminal ({encoding}) cannot show some characters: they appear as ?"
        warnings.append(Text(note, "bold red"))
    return Text("\n").join([header, *warnings, *body, *arguments(rest), why])


def _showable(args: Mapping[str, Any], encoding: str) -> bool:
    """Every text argument can be written in `encoding` (else two names that differ only in
    such characters would look the same on the card)."""
    try:
        for value in args.values():
            if isinstance(value, str):
                value.encode(encoding)
    except UnicodeEncodeError:
        return False
    except LookupError:
        return True  # an encoding Python does not know: nothing to tell
    return True


def describe(
    request: ApprovalRequest, cwd: str, consequences: Consequences | None = None
) -> tuple[list[Text], set[str]]:
    """The lines for this kind of call, and which arguments they already show."""
    then = consequences or Consequences()
    name, paths = request.call.name, request.decision.paths
    args = request.arguments
    if name == "write_file" and "path" in paths:
        return _write(paths["path"], str(args.get("content", "")), cwd), {"path", "content"}
    if name == "edit_file" and "path" in paths:
        return _edit(paths["path"], args, cwd), {"path", "old_string", "new_string", "replace_all"}
    if name == "move_file" and "source" in paths and "destination" in paths:
        lines = _move(paths["source"], paths["destination"], bool(args.get("overwrite")), cwd)
        return lines, {"source", "destination", "overwrite"}
    if name == "delete_file" and "path" in paths:
        lines = _delete(paths["path"], bool(args.get("recursive")), cwd)
        if os.path.lexists(paths["path"].entry):
            lines.append(_where_it_goes(then))
        return lines, {"path", "recursive"}
    if name == "create_directory" and "path" in paths:
        return _create(paths["path"], cwd), {"path"}
    if name == "run_command":
        where = paths["cwd"].real if "cwd" in paths else cwd
        lines = [*_command(str(args.get("command", "")), where, cwd), then.sandbox_line()]
        return lines, {"command", "cwd"}
    if name.startswith(MCP_PREFIX):  # shown by the name its server gave it, as judged
        return _mcp(request.decision.mcp_name or name, args), set(args)
    # Reads (inside or outside the allowed dirs) and anything else: the resolved paths here,
    # every other argument as it came.
    return [_path_line(t, t.real, cwd) for t in paths.values()], set(paths)


def arguments(args: Mapping[str, Any]) -> list[Text]:
    """Every argument, sanitised; long text as its first lines, with a count of the rest."""
    lines: list[Text] = []
    for key, value in args.items():
        label = f"  {sanitize(str(key))}: "
        if isinstance(value, str) and ("\n" in value or len(value) > LINE_CHARS):
            size = units.human_size(len(value.encode("utf-8", "replace")))
            lines.append(Text(f"{label}{size}, {plural(len(_rows(value)), 'line')}"))
            lines += _numbered(value)
        else:
            text = value if isinstance(value, str) else repr(value)
            lines.append(Text(label + sanitize(shorten(text, LINE_CHARS))))
    return lines


# -- what each tool will do ------------------------------------------------------------------


def _mcp(name: str, args: Mapping[str, Any]) -> list[Text]:
    """An MCP call: which server and tool, every argument as pretty JSON (sanitised, long
    ones folded), and that nothing in them is checked as a path here."""
    server, _, tool = name.removeprefix(MCP_PREFIX).partition("__")
    lines = [
        Text.assemble("  MCP server: ", (sanitize(server), "bold"), "  tool: ", sanitize(tool)),
        Text(
            "  its arguments are the server's to interpret: paths in them are not checked "
            "against this agent's policy (the server's own limits apply)",
            "yellow",
        ),
    ]
    if not args:
        return [*lines, Text("  (no arguments)", "dim")]
    pretty = json.dumps(dict(args), indent=2, ensure_ascii=False, default=str)
    rows = pretty.split("\n")
    shown = rows[:MCP_ARGUMENT_LINES]
    lines += [Text("  " + sanitize(shorten(row, LINE_CHARS))) for row in shown]
    if len(rows) > len(shown):
        lines.append(Text(f"  … {len(rows) - len(shown)} more lines not shown", "dim"))
    return lines


def _path_line(target: ResolvedPath, path: str, cwd: str) -> Text:
    """The path that will be used; and what the model wrote, when that reads differently."""
    shown = sanitize(_where(path, cwd))
    line = Text.assemble("  path: ", (shown, "bold"))
    if sanitize(target.given) != shown:
        line.append(f"  (the model wrote {sanitize(target.given)})", "dim")
    return line


def _where(path: str, cwd: str) -> str:
    return f"{path} (the working directory)" if path == cwd else display_path(path, cwd)


def _write(target: ResolvedPath, content: str, cwd: str) -> list[Text]:
    path = target.real  # what write_file writes: symlinks resolved
    lines = [_path_line(target, path, cwd)]
    new_size = units.human_size(len(content.encode("utf-8", "replace")))
    if not os.path.lexists(path):
        lines.append(Text(f"  new file, {new_size}, {plural(len(_rows(content)), 'line')}"))
        lines += _missing_parents(path, cwd)
        return lines + _numbered(content, PREVIEW_LINES)
    if os.path.isdir(path):
        return [*lines, Text("  it is a directory: the write will fail", "yellow")]
    old, problem = _read_text(path, display_path(path, cwd))
    if old is None:
        lines.append(Text(f"  replaces the existing file: {problem}", "yellow"))
        lines.append(Text(f"  new content, {new_size}, {plural(len(_rows(content)), 'line')}:"))
        return lines + _numbered(content, PREVIEW_LINES)
    old_size = units.human_size(len(old.encode("utf-8")))
    lines.append(Text(f"  replaces the existing file: {old_size} → {new_size}"))
    if old == content:
        return [*lines, Text("  no change: the file already holds exactly this content")]
    if len(content.encode("utf-8", "replace")) > MAX_DIFF_BYTES:
        lines.append(Text("  the new content is too large to diff; its first lines:", "yellow"))
        return lines + _numbered(content, PREVIEW_LINES)
    return lines + _diff(old, content)


def _edit(target: ResolvedPath, args: Mapping[str, Any], cwd: str) -> list[Text]:
    """The edit as it will be made: worked out on the file as it is now, as a diff."""
    path = target.real
    lines = [_path_line(target, path, cwd)]
    old, problem = _read_text(path, display_path(path, cwd))
    if old is None:
        # Binary or not UTF-8, the tool refuses it too; merely large (past what a card
        # diffs), it is worked out and made when it runs, unseen here.
        return [
            *lines,
            Text(f"  {problem}: the edit is worked out only when it runs", "yellow"),
        ]
    try:
        edit = plan_edit(
            old,
            str(args.get("old_string", "")),
            str(args.get("new_string", "")),
            bool(args.get("replace_all")),
        )
    except EditFailed as exc:
        first = str(exc).split("\n", 1)[0]
        return [*lines, Text(f"  the edit will fail: {sanitize(first)}", "yellow")]
    where = f"lines {edit.line_range[0]}-{edit.line_range[1]}"
    how = "" if edit.stage == "exact" else f", matched ignoring {edit.stage}"
    count = f"{edit.replacements} replacements" if edit.replacements > 1 else "1 replacement"
    lines.append(Text(f"  {count} at {where}{how}"))
    return lines + _diff(old, edit.text)


def _move(source: ResolvedPath, destination: ResolvedPath, overwrite: bool, cwd: str) -> list[Text]:
    src, dst = source.entry, destination.entry  # the entries: a link moves as a link
    lines = [
        Text.assemble("  from: ", (sanitize(_where(src, cwd)), "bold")),
        Text.assemble("  to:   ", (sanitize(_where(dst, cwd)), "bold")),
    ]
    try:
        info = os.lstat(src)
    except OSError as exc:
        return [*lines, Text(f"  cannot be looked at ({exc.strerror}); the move will fail")]
    if stat.S_ISDIR(info.st_mode):
        lines.append(Text("  a directory, with everything in it"))
    if os.path.lexists(dst):
        if overwrite and not os.path.isdir(dst):
            lines.append(Text("  replaces what is there (it goes to the trash)", "yellow"))
        else:
            lines.append(Text("  the destination exists: the move will fail", "yellow"))
    else:
        lines += _missing_parents(dst, cwd)
    return lines


def _read_text(path: str, shown: str) -> tuple[str | None, str]:
    """The current content as text, or None and why it cannot be shown."""
    try:
        data = reading.read_regular(path, shown, MAX_DIFF_BYTES).data
    except ToolError as exc:
        return None, sanitize(str(exc)) + "; no diff shown"
    if reading.is_binary(data):
        return None, f"it is a binary file ({units.human_size(len(data))}); no diff shown"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text; no diff shown"


def _diff(old: str, new: str) -> list[Text]:
    first, second = _line_ends(old), _line_ends(new)
    first, second = (second if first == "" else first), (first if second == "" else second)
    ends = first, second
    said: list[Text] = []
    if "CRLF" in ends and None not in ends:  # said once, not as a \r on every line
        change = ends[0] if ends[0] == ends[1] else f"{ends[0]} → {ends[1]}, every line"
        said = [Text(f"  line endings: {change}", "yellow" if ends[0] != ends[1] else "dim")]
        old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
    # [2:] drops the ---/+++ file headers: the path is on the card already.
    diff = list(difflib.unified_diff(_keep_ends(old), _keep_ends(new), lineterm=""))[2:]
    added = sum(1 for d in diff if d.startswith("+"))
    removed = sum(1 for d in diff if d.startswith("-"))
    lines = [Text(f"  diff: +{added} −{removed} lines"), *said]
    for entry in diff[:DIFF_LINES]:
        lines += _diff_line(entry)
    if len(diff) > DIFF_LINES:
        lines.append(Text(f"  … {len(diff) - DIFF_LINES} more diff lines not shown", "dim"))
    return lines


def _line_ends(text: str) -> str | None:
    """`CRLF` when every line of `text` ends so, "LF" when none does, "" when it has no
    line end at all, None for a mix: a mix is diffed as it is, each "\\r" shown."""
    lf, crlf = text.count("\n"), text.count("\r\n")
    if lf == 0:
        return ""
    if crlf == 0:
        return "LF"
    return "CRLF" if crlf == lf else None


def _diff_line(entry: str) -> list[Text]:
    style = {"+": "green", "-": "red", "@": "cyan"}.get(entry[:1], "")
    text = entry.removesuffix("\n")
    line = Text("  " + sanitize(shorten(text, LINE_CHARS), multiline=True), style)
    if entry.startswith("@") or entry.endswith("\n"):
        return [line]
    return [line, Text("  \\ no newline at end of file", "dim")]


def _missing_parents(path: str, cwd: str) -> list[Text]:
    """The directories the write or move creates on its way: each one, outermost first."""
    missing: list[str] = []
    parent = os.path.dirname(path)
    while parent and not os.path.lexists(parent) and parent != os.path.dirname(parent):
        missing.insert(0, sanitize(display_path(parent, cwd)))
        parent = os.path.dirname(parent)
    if not missing:
        return []
    if len(missing) == 1:
        return [Text(f"  also creates the parent directory {missing[0]}")]
    if len(missing) == 2:
        return [Text(f"  also creates the parent directories {missing[0]} and {missing[1]}")]
    many = f"{len(missing)} parent directories, {missing[0]} down to {missing[-1]}"
    return [Text(f"  also creates {many}")]


def _where_it_goes(then: Consequences) -> Text:
    if then.trash:
        return Text(f"  goes to the trash (undo: {then.undo})")
    return Text("  is deleted for good (policy.trash is false): no undo", "yellow")


def _delete(target: ResolvedPath, recursive: bool, cwd: str) -> list[Text]:
    path = target.entry  # what delete_file removes: the entry itself, a link not followed
    lines = [_path_line(target, path, cwd)]
    try:
        info = os.lstat(path)
    except OSError as exc:
        return [*lines, Text(f"  cannot be looked at ({exc.strerror}); the delete will fail")]
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return [*lines, _link_line("  a symlink", path, "only the link is removed, not its target")]
    if stat.S_ISREG(mode):
        lines.append(Text(f"  a file, {units.human_size(info.st_size)}"))
        if info.st_nlink > 1:
            lines.append(Text(f"  it has {info.st_nlink - 1} other hard link(s); they stay"))
        return lines
    if not stat.S_ISDIR(mode):
        return [*lines, Text(f"  {wording.describe_kind(mode)}")]
    if recursive:
        return lines + _tree(path)
    entries = _entries(path)
    if entries is None:
        return [*lines, Text("  a directory that cannot be listed", "yellow")]
    if not entries:
        return [*lines, Text("  an empty directory")]
    return [*lines, Text("  a directory that is not empty: without recursive the delete fails")]


def _link_line(prefix: str, path: str, note: str) -> Text:
    try:
        target = sanitize(os.readlink(path))
    except OSError as exc:
        target = f"(unreadable: {exc.strerror})"
    return Text.assemble(prefix, " → ", (target, "bold"), (f" ({note})", "dim"))


def _tree(root: str) -> list[Text]:
    """What a recursive delete removes: the first entries as an indented tree, then counts."""
    lines = [Text("  a directory, deleted with everything in it:")]
    counts = {"file": 0, "dir": 1, "link": 0}  # the directory itself counts, as in the result
    top = _entries(root)
    if top is None:
        lines.append(Text("    (its entries cannot be listed)", "yellow"))
    unlisted = seen = 0
    for depth, entry, kind, listed in _walk(top or []):
        counts[kind] += 1
        unlisted += not listed
        seen += 1
        if seen <= TREE_ENTRIES:
            lines.append(_tree_line(depth, entry, kind, listed))
    if seen > TREE_ENTRIES:
        more = plural(seen - TREE_ENTRIES, "more entry", "more entries")
        lines.append(Text(f"  … {more} not shown", "dim"))
    total = f"  in all: {_count(counts['file'], 'file')}, "
    total += f"{_count(counts['dir'], 'directory', 'directories')} (counting itself)"
    lines.append(Text(total, "bold"))
    if counts["link"]:
        links = f"  and {_count(counts['link'], 'symlink')}: only the links go, not their targets"
        lines.append(Text(links, "bold"))
    if unlisted:
        note = f"  {_count(unlisted, 'directory', 'directories')} could not be listed: not counted"
        lines.append(Text(note, "yellow"))
    return lines


def _tree_line(depth: int, entry: os.DirEntry[str], kind: str, listed: bool) -> Text:
    indent = "  " + "  " * depth
    name = sanitize(entry.name)
    if kind == "link":
        return _link_line(indent + name, entry.path, "symlink, not followed")
    if kind == "dir":
        return Text(indent + name + "/" + ("" if listed else "  (cannot be listed)"))
    return Text(indent + name)


def _walk(top: list[os.DirEntry[str]]) -> Iterator[tuple[int, os.DirEntry[str], str, bool]]:
    """Every entry from `top` down, depth first in name order, with its kind ("file", "dir",
    "link") and whether it could be listed; symlinks are never followed."""
    stack = [iter(top)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        kind = _kind(entry)
        children = _entries(entry.path) if kind == "dir" else []
        yield len(stack), entry, kind, children is not None
        if children:
            stack.append(iter(children))


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return "link"
        return "dir" if entry.is_dir(follow_symlinks=False) else "file"
    except OSError:
        return "file"


def _entries(path: str) -> list[os.DirEntry[str]] | None:
    """The directory's entries in name order, or None when it cannot be listed."""
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return None


def _create(target: ResolvedPath, cwd: str) -> list[Text]:
    lines = [_path_line(target, target.real, cwd)]
    if os.path.isdir(target.real):
        lines.append(Text("  already exists: nothing changes"))
    elif os.path.lexists(target.real):
        lines.append(Text("  exists and is not a directory: this will fail", "yellow"))
    return lines


def _command(command: str, where: str, cwd: str) -> list[Text]:
    lines = [Text("  command:")]
    for row in command.split("\n"):
        lines.append(Text.assemble(("  │ ", "dim"), (sanitize(row, multiline=True), "bold")))
    lines.append(Text.assemble("  in: ", (sanitize(_where(where, cwd)), "bold")))
    return lines


# -- small helpers ----------------------------------------------------------------------------


def _rows(text: str) -> list[str]:
    """The lines of `text`, a final newline not counting as an empty last line."""
    return [row.removesuffix("\n") for row in _keep_ends(text)]


def _keep_ends(text: str) -> list[str]:
    """Lines with their "\\n" kept, for difflib; only "\\n" splits (a "\\r" stays visible)."""
    rows = [row + "\n" for row in text.split("\n")]
    rows[-1] = rows[-1].removesuffix("\n")
    return rows if rows[-1] else rows[:-1]


def _numbered(text: str, limit: int = PREVIEW_LINES) -> list[Text]:
    rows = _rows(text)
    if not rows:
        return [Text("  (empty)", "dim")]
    width = len(str(min(len(rows), limit)))
    lines = [
        Text.assemble(
            (f"  {n:>{width}} │ ", "dim"), sanitize(shorten(row, LINE_CHARS), multiline=True)
        )
        for n, row in enumerate(rows[:limit], 1)
    ]
    if len(rows) > limit:
        lines.append(Text(f"  … {len(rows) - limit} more lines not shown", "dim"))
    return lines


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"
