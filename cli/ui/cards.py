"""Tool call cards: a title line with icon, tool, key arguments and status,
and a short, folded preview of the result. Model-supplied text is sanitised and shown as
`Text`, never as markup."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.text import Text

from cli.backends.messages import Stats, ToolCall
from cli.config.settings import MCP_PREFIX
from cli.fs.paths import display_path
from cli.loop import outcomes
from cli.loop.events import ContextUse, ToolResult
from cli.ui.layout import Hanging
from cli.ui.text import call_summary, mended, plural, result_summary, sanitize, shorten_text
from cli.units import human_size

FOLD_LINES = 8  # preview lines shown before "… N more lines"
MCP_LINES = 4  # an MCP tool's result: its first lines (the server's text, not ours to lay out)

T = TypeVar("T")


# status → (icon, colour, word). "running" shows a spinner in place of its icon. A call's
# final card takes its outcome (cli/loop/outcomes.py) as status, and the outcome's words.
_STATUS: Mapping[str, tuple[str, str, str]] = {
    "waiting": ("⏳", "orange1", "waiting for confirmation"),
    "running": ("", "blue", "running"),
    "allowed": ("✅", "green", "allowed"),
    "failed": ("❌", "red", "failed"),
    "declined": ("🚫", "yellow", "declined"),
    "denied": ("⛔", "red", "denied"),
    "invalid": ("⚠️", "red", "invalid"),
    "cancelled": ("🚫", "grey50", "cancelled"),
}
_TOOL_ICONS: Mapping[str, str] = {
    "read_file": "📄",
    "write_file": "📝",
    "edit_file": "✏️",
    "list_directory": "📁",
    "search_files": "🔍",
    "create_directory": "📂",
    "move_file": "🚚",
    "delete_file": "🧹",
    "run_command": "💻",
    "git_status": "🌿",
    "git_diff": "🌿",
}


def card_title(call: ToolCall, status: str, detail: str = "", word: str = "") -> Text:
    """`✅ 📄 read_file notes.txt · allowed by policy · 3 ms`: one line, in the status's
    colour; `status` is waiting, running, cancelled or an outcome (`word` spells it out)."""
    icon, colour, default = _STATUS[status]
    word = word or default
    title = Text(f"{icon} " if icon else "")
    title.append(f"{_TOOL_ICONS.get(call.name, '🔧')} ")
    title.append(sanitize(call.name) or "?", style=f"bold {colour}")
    summary = call_summary(call)
    if summary:
        title.append(f" {summary}")
    title.append(f" · {word}", style=colour)
    if detail:
        title.append(f" · {detail}", style="dim")
    return title


def tool_card(event: ToolResult, cwd: str) -> Group:
    """The final card of a call: its title and a short preview of the result."""
    decided, result = event.decision, event.result
    status = outcomes.outcome(decided, result)
    word = outcomes.label(decided, result)
    repaired = [Text(mended(event.call.repairs), style="dim")] if event.call.repairs else []
    if not decided.allowed:  # declined, denied or invalid: why, in a person's words
        why = Text(shorten_text(outcomes.detail(decided, result), 300), style="grey50")
        refused = Hanging(card_title(event.call, status, word=word))
        return Group(refused, *(_indent(line) for line in [*repaired, why]))
    preview = _mcp_preview if event.call.name.startswith(MCP_PREFIX) else _no_preview
    lines = _PREVIEWS.get(event.call.name, preview)(result, cwd)
    if status == "failed" and _shows_error(event.call.name, result):
        lines.append(Text(shorten_text(outcomes.detail(decided, result), 300), style="red"))
    if result.get("note"):
        lines.append(Text(shorten_text(str(result["note"]), 300), style="dim"))
    title = card_title(event.call, status, _duration(event.duration), word=word)
    return Group(Hanging(title), *(_indent(line) for line in [*repaired, *lines]))


def _shows_error(name: str, result: Mapping[str, Any]) -> bool:
    """A command's non-zero exit is already in its footer; every other failure says why."""
    return name != "run_command" or "exitCode" not in result or bool(result.get("timedOut"))


def _indent(line: Text) -> Row:
    """Under the title, one screen row per line: a long line is cut, saying how much."""
    return Row(Text.assemble("   ", line))


class Row:
    """A line that is cut to the width it is drawn in, ending in `… +N chars` (how much of
    it is not shown), never wrapped."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        line = self.text.copy()
        line.no_wrap = True
        if line.cell_len <= width:
            yield line
            return
        total = len(line.plain)
        room = width - cell_len(f"… +{total} chars")  # the longest the count can be
        if room < 8:  # too narrow to say: the ellipsis alone
            shown = line.copy()
            shown.truncate(width, overflow="ellipsis")
            yield shown
            return
        shown = line.copy()
        shown.truncate(room)
        shown.append(f"… +{total - len(shown.plain)} chars", style="dim")
        yield shown


def _fold(items: Sequence[T], show: Callable[[T], Text], limit: int = FOLD_LINES) -> list[Text]:
    """The first `limit` items, then how many are not shown."""
    if len(items) <= limit + 1:  # a "1 more line" note would take the same room
        return [show(item) for item in items]
    hidden = len(items) - limit
    more = Text(f"… {hidden} more line{'s' if hidden != 1 else ''}", style="dim")
    return [*(show(item) for item in items[:limit]), more]


def _text_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _no_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    return []


def _mcp_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    """An MCP tool's result: the first lines of its text (sanitised, each cut to a row),
    or its structured content as JSON, and how much there is."""
    if not result.get("success"):
        return []
    text = str(result.get("content") or "")
    if not text.strip() and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], ensure_ascii=False, default=str)
    lines = [line for line in _text_lines(text) if line.strip()]
    if not lines:
        return [Text("(no output)", style="dim")]
    body = _fold(lines, lambda line: Text(sanitize(line, multiline=True)), MCP_LINES)
    footer = f"{plural(len(lines), 'line')} · {plural(len(text), 'char')}"
    if result.get("truncated"):
        footer += " · cut at the size limit"
    return [*body, Text(footer, style="dim")]


def _read_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    size = human_size(int(result.get("size") or 0))
    if result.get("lines") is None:
        return [Text(f"{size} · binary, read as base64", style="dim")]
    lines = _text_lines(str(result.get("content", "")))
    first, last = result.get("line_range") or (1, len(lines))
    width = len(str(max(int(first), 1) + len(lines)))

    def numbered(item: tuple[int, str]) -> Text:
        number, line = item
        return Text.assemble((f"{number:>{width}} │ ", "dim"), sanitize(line, multiline=True))

    body = _fold(list(enumerate(lines, start=max(int(first), 1))), numbered)
    footer = f"{size} · {plural(result.get('lines'), 'line')} · {result.get('encoding', 'utf-8')}"
    if result.get("truncated"):
        footer += f" · showing lines {first}-{last}"
    return [*body, Text(footer, style="dim")]


def _search_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    hits: list[tuple[str, Any]] = []
    for found in result.get("results", []):
        path = sanitize(str(found.get("path", "")))
        matches = found.get("matches") or []
        hits += [(path, m) for m in matches] if matches else [(path, None)]

    def hit(item: tuple[str, Any]) -> Text:
        path, match = item
        if match is None:
            return Text.assemble((path, "cyan"), ("  (name matches)", "dim"))
        return Text.assemble(
            (path, "cyan"), (f":{match.get('line')}", "dim"), "  ", sanitize(str(match.get("text")))
        )

    return [*_fold(hits, hit), Text(result_summary("search_files", result), style="dim")]


def _list_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []

    def entry(item: Mapping[str, Any]) -> Text:
        name, kind = sanitize(str(item.get("name", ""))), item.get("type")
        if kind == "directory":
            return Text(f"{name}/", style="bold blue")
        if kind == "symlink":
            return Text.assemble((name, "cyan"), " -> ", sanitize(str(item.get("target", "?"))))
        size = item.get("size")
        return Text.assemble(
            name, (f"  {human_size(int(size))}", "dim") if size is not None else ""
        )

    entries = list(result.get("entries", []))
    return [*_fold(entries, entry), Text(result_summary("list_directory", result), style="dim")]


def _command_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if "exitCode" not in result:
        return []  # it never started: the error says why
    lines = [(line, "") for line in _text_lines(str(result.get("stdout") or ""))]
    lines += [(line, "red") for line in _text_lines(str(result.get("stderr") or ""))]

    def output(item: tuple[str, str]) -> Text:
        return Text(sanitize(item[0], multiline=True), style=item[1])

    body = _fold(lines, output) if lines else [Text("(no output)", style="dim")]
    footer = f"exit {result.get('exitCode')} · {result.get('duration', 0)} ms"
    return [*body, Text(footer, style="dim")]


def _write_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    verb = "created" if result.get("created") else "overwrote"
    size = human_size(int(result.get("bytesWritten") or 0))
    return [_changed(verb, result, cwd, size)]


def _delete_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    removed = result.get("removed")
    counts = ""
    if isinstance(removed, Mapping):
        files, dirs = removed.get("files", 0), removed.get("directories", 0)
        counts = f"{plural(files, 'file')}, {plural(dirs, 'directory', 'directories')}"
    return [_changed("deleted", result, cwd, counts)]


def _mkdir_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    return [_changed("created" if result.get("created") else "already existed", result, cwd)]


def _changed(verb: str, result: Mapping[str, Any], cwd: str, extra: str = "") -> Text:
    """What was done and where: the resolved path, which may differ from what the model
    wrote (`~`, `..`, a symlink)."""
    line = Text(verb, style="green")
    if result.get("path"):
        line.append(f" {sanitize(display_path(str(result['path']), cwd))}")
    if extra:
        line.append(f" · {extra}", style="dim")
    return line


def _edit_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    counts = result.get("diff_stat")
    stat_: Mapping[str, Any] = counts if isinstance(counts, Mapping) else {}
    first, last = result.get("line_range") or (0, 0)
    extra = f"lines {first}-{last} · +{stat_.get('added', 0)} −{stat_.get('removed', 0)}"
    return [_changed("edited", result, cwd, extra)]


def _move_preview(result: Mapping[str, Any], cwd: str) -> list[Text]:
    if not result.get("success"):
        return []
    line = Text("moved", style="green")
    line.append(f" {sanitize(display_path(str(result.get('source', '')), cwd))}")
    line.append(f" → {sanitize(display_path(str(result.get('destination', '')), cwd))}")
    if result.get("replaced"):
        line.append(" · replaced what was there", style="dim")
    return [line]


_PREVIEWS: Mapping[str, Callable[[Mapping[str, Any], str], list[Text]]] = {
    "read_file": _read_preview,
    "search_files": _search_preview,
    "list_directory": _list_preview,
    "run_command": _command_preview,
    "write_file": _write_preview,
    "edit_file": _edit_preview,
    "move_file": _move_preview,
    "delete_file": _delete_preview,
    "create_directory": _mkdir_preview,
}


def stats_line(
    stats: Stats,
    wall_time: float,
    tool_calls: int,
    context: ContextUse | None = None,
    waited: float = 0.0,
) -> Text:
    """`142 tokens · 38.2 tok/s · 4.1 s · 2 tool calls · ctx 12.1k/32k`; when the turn waited
    for the person's answers (`waited` seconds of `wall_time`), the two times apart:
    `4.1 s working · 12.3 s waiting for you`."""
    parts = [f"{stats.eval_count} tokens"]
    if stats.tokens_per_second:
        parts.append(f"{stats.tokens_per_second:.1f} tok/s")
    if waited >= 0.05:
        parts.append(f"{max(0.0, wall_time - waited):.1f} s working")
        parts.append(f"{waited:.1f} s waiting for you")
    else:
        parts.append(f"{wall_time:.1f} s")
    if tool_calls:
        parts.append(f"{tool_calls} tool call{'s' if tool_calls != 1 else ''}")
    if context is not None and context.size:
        parts.append(f"ctx {short_tokens(context.used)}/{short_tokens(context.size)}")
    return Text(" · ".join(parts), style="dim")


def short_tokens(count: int) -> str:
    """812, 12.1k, 32k: token counts in 1024s, as context sizes go."""
    if count < 1000:
        return str(count)
    kilo = count / 1024
    return f"{kilo:.0f}k" if count % 1024 == 0 or kilo >= 100 else f"{kilo:.1f}k"
