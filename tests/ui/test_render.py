"""`agent chat`'s rendering of loop events: real events, a real rich Console writing to a
StringIO, and the text a user would read compared line by line."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Mapping
from typing import Any

import pytest
from rich.console import Console
from rich.markdown import Markdown

from cli.backends.messages import Stats, ToolCall
from cli.loop.events import (
    ContentDelta,
    Event,
    Finished,
    Notice,
    StepFinished,
    ThinkingDelta,
    ToolCallProposed,
    ToolDecided,
    ToolResult,
)
from cli.safety.policy import Decision
from cli.ui.cards import card_title
from cli.ui.render import TAIL_LINES, ChatRenderer, MarkdownStream

CWD = "/work/project"

ANSWER = """# Setup guide

Install it with **pip** and run the `check` command,
then read the notes below.

- first step
- second step
  - a nested detail

```python
def greet(name):
    return f"hello {name}"
```

1. build
2. test

> a quoted remark

That is **all**.
"""


def console(*, terminal: bool = False, colour: bool = False) -> Console:
    return Console(
        file=io.StringIO(),
        width=100,
        force_terminal=terminal,
        color_system="256" if colour else None,
    )


def raw(con: Console) -> str:
    file = con.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def lines(con: Console) -> list[str]:
    """What was printed, one entry per line, trailing spaces (rich's padding) removed."""
    text = "\n".join(line.rstrip() for line in raw(con).split("\n"))
    return text.strip("\n").split("\n")


def text(con: Console) -> str:
    return "\n".join(lines(con))


def render(events: list[Event], *, show_thinking: bool = True) -> list[str]:
    con = console()
    renderer = ChatRenderer(con, cwd=CWD, show_thinking=show_thinking)
    for event in events:
        renderer.handle(event)
    return lines(con)


def chunks(source: str, seed: int = 7) -> list[str]:
    """`source` in pieces of 1 to 3 characters, as a model streams tokens."""
    rng, pieces, at = random.Random(seed), [], 0
    while at < len(source):
        size = rng.randint(1, 3)
        pieces.append(source[at : at + size])
        at += size
    return pieces


def answer_events(source: str, pieces: list[str] | None = None) -> list[Event]:
    deltas: list[Event] = [ContentDelta(p) for p in (pieces or [source])]
    return [*deltas, StepFinished(1, Stats(), 0, "stop"), finished(source)]


def finished(answer: str = "", **kwargs: Any) -> Finished:
    fields: dict[str, Any] = {"stop_reason": "answer", "steps": 1, "stats": Stats()}
    fields["wall_time"] = 1.0
    fields.update(kwargs)
    return Finished(answer=answer, **fields)


# -- a tiny terminal: the screen a user ends up looking at ----------------------------------

_TOKEN = re.compile(
    r"\x1b\[(?P<args>[0-9;?]*)(?P<cmd>[A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r|\n|[^\x1b\r\n]+"
)


def screen(output: str) -> list[str]:
    """Plays rich's output on a screen: text, newlines, carriage returns, cursor up and
    erase line (what Live uses to redraw); colours and other sequences are ignored."""
    rows, row, col = [""], 0, 0
    for match in _TOKEN.finditer(output):
        token, command = match.group(), match.group("cmd")
        if token == "\n":
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        elif token == "\r":
            col = 0
        elif command == "A":
            row = max(0, row - int(match.group("args") or 1))
        elif command == "K":
            rows[row] = "" if match.group("args") == "2" else rows[row][:col]
        elif command or token.startswith("\x1b"):
            continue
        else:
            current = rows[row].ljust(col)
            rows[row] = current[:col] + token + current[col + len(token) :]
            col += len(token)
    return [r.rstrip() for r in rows]


def test_screen_replays_erased_lines() -> None:
    assert screen("a\nbb\r\x1b[2K\x1b[1A\x1b[2Kc\nd") == ["c", "d"]


# -- the answer ----------------------------------------------------------------------------


def test_streamed_markdown_ends_rendered() -> None:
    out = text_of(answer_events(ANSWER, chunks(ANSWER)))
    assert "Setup guide" in out and "# Setup" not in out
    assert "Install it with pip and run the check command, then read the notes below." in out
    assert "**" not in out and "`" not in out
    assert "• first step" in out and "• a nested detail" in out
    assert "def greet(name):" in out and 'return f"hello {name}"' in out
    assert " 1 build" in out and "▌ a quoted remark" in out
    assert "That is all." in out


def text_of(events: list[Event], **kwargs: Any) -> str:
    return "\n".join(render(events, **kwargs))


@pytest.mark.parametrize(
    "source",
    [
        ANSWER,
        "para one\n\n\n   indented continuation\n\nnext",
        "- a\n\n  still a\n- b\n\n---\n\n    indented code\n\nend",
        "~~~\nraw ~~~ text\n~~~~\nafter\n```js\nlet a = 1;",  # closes with a longer fence
        "line\r\nwith windows endings\r\n\r\nsecond",
        "| a | b |\n|---|---|\n| 1 | 2 |\n\ntext",
    ],
    ids=["guide", "indented-after-blank", "list-continuation", "fences", "crlf", "table"],
)
def test_small_chunks_render_the_same_as_one_chunk(source: str) -> None:
    whole = render(answer_events(source))
    for seed in (1, 2, 3):
        assert render(answer_events(source, chunks(source, seed))) == whole


@pytest.mark.parametrize(
    "source",
    [
        ANSWER,
        "para one\n\n\n   indented continuation\n\nnext",
        "- a\n\n  still a\n- b\n\n---\n\n    indented code\n\nend",
        "Steps:\n\n1. **Install** it\n\n   with pip\n\n2. Configure\n\n10. Done\n\nThat's it.",
        "| a | b |\n|---|---|\n| 1 | 2 |\n\ntext",
        "# T\ntext right after\n## Sub\n- x\n- y\nlazy",
        "> q1\n> q2\n\nafter\n***\nend",
    ],
    ids=["guide", "indented", "list-continuation", "loose-list", "table", "headings", "quote"],
)
def test_streamed_answer_looks_like_markdown_rendered_at_once(source: str) -> None:
    at_once = console()
    at_once.print(Markdown(source))
    streamed = console()
    stream = MarkdownStream(streamed)
    for piece in chunks(source):
        stream.feed(piece)
    stream.finish()
    assert lines(streamed) == lines(at_once)


def test_markup_and_control_characters_in_the_answer_are_shown_not_obeyed() -> None:
    source = "see [bold]x[/bold] and \x1b[31mred\x07\n\nthen \x1b]0;title\x07 here"
    out = text_of(answer_events(source, chunks(source)))
    assert "[bold]x[/bold]" in out
    assert "\\x1b[31mred\\x07" in out and "\\x1b]0;title\\x07" in out
    assert "\x1b" not in out and "\x07" not in out


def test_finished_blocks_are_printed_before_the_answer_ends() -> None:
    con = console()
    stream = MarkdownStream(con)
    stream.feed("# Title\nFirst")
    assert text(con) == "Title".center(100).rstrip()  # a heading ends at its line
    stream.feed(" paragraph.\n\nSecond")
    assert "First paragraph." in text(con)
    assert "Second" not in text(con)  # still being written
    stream.feed(" one.\n```python\nx = 1\n")
    assert "Second one." in text(con) and "x = 1" in text(con)  # code lines are final at once
    stream.finish()
    assert text(con).count("Second one.") == 1


def test_a_long_block_without_blank_lines_is_printed_as_it_grows() -> None:
    con = console()
    stream = MarkdownStream(con)
    for number in range(1, TAIL_LINES + 11):
        stream.feed(f"row {number}\n")
    # The tail never holds more than TAIL_LINES lines: the first ones are already out.
    assert re.search(r"\brow 1\b", text(con))
    assert not re.search(rf"\brow {TAIL_LINES + 10}\b", text(con))
    stream.finish()
    assert len(re.findall(r"\brow 1\b", text(con))) == 1
    assert re.search(rf"\brow {TAIL_LINES + 10}\b", text(con))


def test_on_a_terminal_the_answer_ends_on_screen_once() -> None:
    con = console(terminal=True, colour=True)
    renderer = ChatRenderer(con, cwd=CWD)
    for event in answer_events(ANSWER, chunks(ANSWER)):
        renderer.handle(event)
    output = raw(con)
    assert "\x1b[1A" in output  # the tail was live: redrawn in place while it streamed
    shown = "\n".join(screen(output))
    assert shown.count("Setup guide") == 1
    assert shown.count("Install it with pip and run the check command") == 1
    assert shown.count('return f"hello {name}"') == 1
    assert shown.count("That is all.") == 1
    assert "**" not in shown
    at_once = console(terminal=True, colour=True)
    renderer = ChatRenderer(at_once, cwd=CWD)
    for event in answer_events(ANSWER):
        renderer.handle(event)
    assert screen(raw(at_once)) == screen(output)


def test_the_live_tail_is_sanitised_too() -> None:
    con = console(terminal=True)
    stream = MarkdownStream(con)
    stream.feed("wipe \x1b[2J\x1b]0;title\x07 now")
    assert "\x1b[2J" not in raw(con) and "\x1b]0;" not in raw(con)
    assert "wipe \\x1b[2J" in "\n".join(screen(raw(con)))
    stream.close()


def test_close_stops_the_live_tail_and_finish_still_prints_it_once() -> None:
    con = console(terminal=True)
    stream = MarkdownStream(con)
    stream.feed("half a sen")
    stream.close()
    stream.close()
    stream.feed("tence")
    stream.finish()
    assert "\n".join(screen(raw(con))).count("half a sentence") == 1


# -- thinking ------------------------------------------------------------------------------


def test_thinking_is_set_apart_from_the_answer() -> None:
    out = render(
        [
            ThinkingDelta("\nThe user wants"),
            ThinkingDelta(" a greeting.\n"),
            *answer_events("Hello **there**."),
        ]
    )
    assert out == ["💭 thinking", "The user wants a greeting.", "", "Hello there.", "", out[-1]]


def test_thinking_is_dimmed_and_the_answer_is_not() -> None:
    con = console(terminal=True, colour=True)
    renderer = ChatRenderer(con, cwd=CWD)
    renderer.handle(ThinkingDelta("pondering"))
    renderer.handle(ContentDelta("Answer.\n"))
    renderer.handle(StepFinished(1, Stats(), 0, "stop"))
    output = raw(con)
    assert "\x1b[2;3mpondering" in output  # dim italic
    assert re.search(r"\x1b\[2[;0-9]*m[^\x1b]*Answer", output) is None
    assert "\n".join(screen(output)).count("Answer.") == 1


def test_thinking_is_hidden_when_show_thinking_is_off() -> None:
    con = console()
    renderer = ChatRenderer(con, cwd=CWD)
    renderer.show_thinking = False  # /think
    for event in [ThinkingDelta("secret plan"), *answer_events("Done.")]:
        renderer.handle(event)
    assert "secret plan" not in text(con) and "thinking" not in text(con)
    assert "Done." in text(con)


def test_hidden_thinking_shows_only_a_passing_spinner() -> None:
    con = console(terminal=True)
    renderer = ChatRenderer(con, cwd=CWD, show_thinking=False)
    renderer.handle(ThinkingDelta("secret plan"))
    assert "model is thinking · 0 s" in "\n".join(screen(raw(con)))
    renderer.handle(ContentDelta("Done."))
    renderer.handle(StepFinished(1, Stats(), 0, "stop"))
    assert [r for r in screen(raw(con)) if r] == ["Done."]
    assert "secret plan" not in raw(con)


def test_control_characters_in_thinking_are_escaped() -> None:
    out = text_of([ThinkingDelta("a\x1b[2Jb\rc")])
    assert "a\\x1b[2Jb\\rc" in out


# -- notices, stats, endings ---------------------------------------------------------------


def test_a_notice_is_one_line() -> None:
    out = render([Notice("model 'x' cannot think: thinking stays off")])
    assert out == ["⚠ model 'x' cannot think: thinking stays off"]


def test_stats_line_after_the_answer() -> None:
    call = ToolCall("list_directory", {"path": "."})
    result = ToolResult(call, {"success": True, "entries": [], "total": 0}, 0.01, allowed(call))
    stats = Stats(eval_count=142, eval_duration=3_716_000_000)
    out = render([result, result, *answer_events("ok")[:-1], finished("ok", stats=stats)])
    assert out[-1] == "142 tokens · 38.2 tok/s · 1.0 s · 2 tool calls"


def test_tool_calls_are_counted_per_turn() -> None:
    call = ToolCall("list_directory", {"path": "."})
    result = ToolResult(call, {"success": True, "entries": [], "total": 0}, 0.01, allowed(call))
    out = render([result, finished(wall_time=2.5), result, finished(wall_time=2.5)])
    assert out[-1] == "0 tokens · 2.5 s · 1 tool call"


@pytest.mark.parametrize(
    ("stop_reason", "line"),
    [
        ("max_steps", "step limit reached after 10 model calls; 2 tool call(s) not run"),
        ("stopped", "stopped: the rest of this turn was cancelled"),
    ],
    ids=["max-steps", "stopped"],
)
def test_a_turn_that_did_not_end_with_an_answer_says_why(stop_reason: str, line: str) -> None:
    out = text_of([finished(stop_reason=stop_reason, steps=10, pending_calls=2)])
    assert line in out


def test_interrupted_keeps_the_partial_answer() -> None:
    con = console()
    renderer = ChatRenderer(con, cwd=CWD)
    for piece in chunks("The answer is **forty"):
        renderer.handle(ContentDelta(piece))
    renderer.interrupted()
    assert lines(con) == ["The answer is **forty", "", "⏹ interrupted"]


def test_interrupted_while_a_tool_runs_ends_its_card() -> None:
    con = console()
    renderer = ChatRenderer(con, cwd=CWD)
    call = ToolCall("run_command", {"command": "sleep 100"})
    renderer.handle(ToolCallProposed(call, 1))
    renderer.handle(allowed(call))
    renderer.interrupted()
    assert lines(con) == [
        "🚫 💻 run_command sleep 100 · cancelled · interrupted",
        "",
        "⏹ interrupted",
    ]


def test_error_is_one_red_line_after_what_arrived() -> None:
    con = console(terminal=True, colour=True)
    renderer = ChatRenderer(con, cwd=CWD)
    renderer.handle(ContentDelta("Partial"))
    renderer.error("Ollama answered 500: out of memory")
    assert "\x1b[31m✖ Ollama answered 500: out of memory" in raw(con)
    assert [r for r in screen(raw(con)) if r] == [
        "Partial",
        "✖ Ollama answered 500: out of memory",
    ]


def test_close_is_quiet_and_safe_twice() -> None:
    con = console(terminal=True)
    renderer = ChatRenderer(con, cwd=CWD)
    renderer.handle(ThinkingDelta("x"))
    renderer.close()
    renderer.close()
    assert [r for r in screen(raw(con)) if r] == ["💭 thinking", "x"]


# -- tool cards ----------------------------------------------------------------------------


def allowed(call: ToolCall, by: str = "policy") -> ToolDecided:
    return ToolDecided(call, Decision("allow", "allowed by policy", "setting"), True, by, "")


def denied(call: ToolCall, action: str, reason: str) -> ToolDecided:
    """Refused by the policy ("deny"), or by the person who was asked ("ask")."""
    decision = Decision(action, reason, "blocked_dir" if action == "deny" else "setting")  # type: ignore[arg-type]
    return ToolDecided(call, decision, False, "", reason, asked=action == "ask")


def card(
    name: str,
    arguments: Mapping[str, Any],
    result: Mapping[str, Any],
    decided: ToolDecided | None = None,
    duration: float = 0.012,
) -> list[str]:
    call = ToolCall(name, arguments)
    decided = decided or allowed(call)
    return render([ToolCallProposed(call, 1), decided, ToolResult(call, result, duration, decided)])


def file_lines(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


READ = {
    "success": True,
    "path": f"{CWD}/notes.txt",
    "encoding": "utf-8",
    "size": 300,
    "truncated": False,
}


@pytest.mark.parametrize(
    ("name", "arguments", "result", "expected"),
    [
        (
            "read_file",
            {"path": "notes.txt"},
            {**READ, "content": file_lines(3), "lines": 3, "line_range": [1, 3]},
            [
                "✅ 📄 read_file notes.txt · allowed by policy · 12 ms",
                "   1 │ line 1",
                "   2 │ line 2",
                "   3 │ line 3",
                "   300 B · 3 lines · utf-8",
            ],
        ),
        (
            "read_file",
            {"path": "notes.txt", "start_line": 98},
            {
                **READ,
                "content": "a\nb\nc\n",
                "lines": 200,
                "line_range": [98, 100],
                "truncated": True,
            },
            [
                "✅ 📄 read_file notes.txt (start_line=98) · allowed by policy · 12 ms",
                "    98 │ a",
                "    99 │ b",
                "   100 │ c",
                "   300 B · 200 lines · utf-8 · showing lines 98-100",
            ],
        ),
        (
            "search_files",
            {"query": "TODO", "path": "src"},
            {
                "success": True,
                "results": [
                    {"path": "src/a.py", "matches": [{"line": 3, "text": "# TODO: fix"}]},
                    {"path": "src/TODO.md", "match": "filename", "matches": []},
                ],
                "total_files": 2,
                "total_matches": 2,
            },
            [
                "✅ 🔍 search_files 'TODO' in src · allowed by policy · 12 ms",
                "   src/a.py:3  # TODO: fix",
                "   src/TODO.md  (name matches)",
                "   2 matches in 2 files",
            ],
        ),
        (
            "list_directory",
            {"path": "."},
            {
                "success": True,
                "entries": [
                    {"name": "src", "type": "directory"},
                    {"name": "README.md", "type": "file", "size": 1300},
                    {"name": "latest", "type": "symlink", "target": "src"},
                ],
                "total": 3,
                "truncated": False,
            },
            [
                "✅ 📁 list_directory . · allowed by policy · 12 ms",
                "   src/",
                "   README.md  1.3 KB",
                "   latest -> src",
                "   3 entries",
            ],
        ),
        (
            "run_command",
            {"command": "make test"},
            {
                "success": True,
                "stdout": "ok 1\nok 2\n",
                "stderr": "warning: slow\n",
                "exitCode": 0,
                "duration": 1520,
            },
            [
                "✅ 💻 run_command make test · allowed by policy · 12 ms",
                "   ok 1",
                "   ok 2",
                "   warning: slow",
                "   exit 0 · 1520 ms",
            ],
        ),
        (
            "write_file",
            {"path": "notes.txt", "content": "hello world\n"},
            {"success": True, "path": f"{CWD}/notes.txt", "bytesWritten": 12, "created": True},
            [
                "✅ 📝 write_file notes.txt (12 B) · allowed by policy · 12 ms",
                "   created notes.txt · 12 B",
            ],
        ),
        (
            "write_file",
            {"path": "~/notes.txt", "content": "x"},
            {"success": True, "path": "/home/u/notes.txt", "bytesWritten": 1, "created": False},
            [
                "✅ 📝 write_file ~/notes.txt (1 B) · allowed by policy · 12 ms",
                "   overwrote /home/u/notes.txt · 1 B",
            ],
        ),
        (
            "delete_file",
            {"path": "build", "recursive": True},
            {
                "success": True,
                "path": f"{CWD}/build",
                "deleted": True,
                "type": "directory",
                "removed": {"files": 3, "directories": 2},
            },
            [
                "✅ 🧹 delete_file build (recursive) · allowed by policy · 12 ms",
                "   deleted build · 3 files, 2 directories",
            ],
        ),
        (
            "create_directory",
            {"path": "out"},
            {"success": True, "path": f"{CWD}/out", "created": False},
            [
                "✅ 📂 create_directory out · allowed by policy · 12 ms",
                "   already existed out",
            ],
        ),
    ],
    ids=[
        "read",
        "read-window",
        "search",
        "list",
        "command",
        "write-created",
        "write-overwrote",
        "delete-recursive",
        "mkdir-existed",
    ],
)
def test_done_cards_show_a_preview(
    name: str, arguments: dict[str, Any], result: dict[str, Any], expected: list[str]
) -> None:
    assert card(name, arguments, result) == expected


@pytest.mark.parametrize(
    ("name", "arguments", "result", "expected"),
    [
        (
            "read_file",
            {"path": "gone.txt"},
            {"success": False, "error": "gone.txt does not exist"},
            [
                "❌ 📄 read_file gone.txt · failed · 12 ms",
                "   gone.txt does not exist",
            ],
        ),
        (
            "run_command",
            {"command": "false"},
            {
                "success": False,
                "stdout": "",
                "stderr": "",
                "exitCode": 1,
                "duration": 3,
                "error": "command exited with status 1",
            },
            [
                "❌ 💻 run_command false · failed · 12 ms",
                "   (no output)",
                "   exit 1 · 3 ms",
            ],
        ),
        (
            "run_command",
            {"command": "sleep 9"},
            {
                "success": False,
                "stdout": "",
                "stderr": "",
                "exitCode": -9,
                "duration": 1000,
                "timedOut": True,
                "error": "timed out after 1000 ms",
            },
            [
                "❌ 💻 run_command sleep 9 · failed · 12 ms",
                "   (no output)",
                "   exit -9 · 1000 ms",
                "   timed out after 1000 ms",
            ],
        ),
    ],
    ids=["read-missing", "command-exit-1", "command-timeout"],
)
def test_failed_cards_say_why(
    name: str, arguments: dict[str, Any], result: dict[str, Any], expected: list[str]
) -> None:
    assert card(name, arguments, result) == expected


@pytest.mark.parametrize(
    ("action", "reason", "title", "why"),
    [
        (
            "deny",
            "/etc is inside the blocked directory /etc",
            "⛔ 🧹 delete_file /etc · denied (blocked_dir)",
            "/etc is inside the blocked directory /etc",
        ),
        (
            "ask",
            "the user declined: not now",
            "🚫 🧹 delete_file /etc · declined",
            "you said no: not now",
        ),
    ],
    ids=["by-policy", "by-user"],
)
def test_refused_cards_show_the_reason(action: str, reason: str, title: str, why: str) -> None:
    call = ToolCall("delete_file", {"path": "/etc"})
    result = {"success": False, "error": f"denied: {reason}"}
    assert card("delete_file", {"path": "/etc"}, result, denied(call, action, reason)) == [
        title,
        f"   {why}",
    ]


@pytest.mark.parametrize(
    ("by", "shown"),
    [
        ("user", "allowed by you"),
        ("session", "allowed for this session"),
        ("--yes", "allowed by --yes"),
    ],
)
def test_cards_say_who_approved(by: str, shown: str) -> None:
    call = ToolCall("create_directory", {"path": "out"})
    result = {"success": True, "path": f"{CWD}/out", "created": True}
    out = card("create_directory", {"path": "out"}, result, allowed(call, by), duration=2.5)
    assert out[0] == f"✅ 📂 create_directory out · {shown} · 2.5 s"


def test_waiting_card_while_the_user_is_asked() -> None:
    con = console(terminal=True, colour=True)
    call = ToolCall("write_file", {"path": "a.txt", "content": "x"})
    con.print(card_title(call, "waiting", "policy.confirm is writes"))
    shown = [r for r in screen(raw(con)) if r]
    assert shown == [
        "⏳ 📝 write_file a.txt (1 B) · waiting for confirmation · policy.confirm is writes"
    ]
    # The status is coloured orange. (Compared on the Text's spans, not on escape codes:
    # rich caches a style's codes for the first colour system it met in this process.)
    title = card_title(call, "waiting")
    styles = {title.plain[span.start : span.end]: str(span.style) for span in title.spans}
    assert styles[" · waiting for confirmation"] == "orange1"


def test_running_card_spins_until_the_result() -> None:
    con = console(terminal=True, colour=True)
    renderer = ChatRenderer(con, cwd=CWD)
    call = ToolCall("run_command", {"command": "make"})
    decided = allowed(call)
    renderer.handle(ToolCallProposed(call, 1))
    renderer.handle(decided)
    assert "running run_command make · 0 s" in "\n".join(screen(raw(con)))
    assert "\x1b[34mrunning run_command make" in raw(con)  # blue
    result = {"success": True, "stdout": "", "stderr": "", "exitCode": 0, "duration": 5}
    renderer.handle(ToolResult(call, result, 0.005, decided))
    shown = [r for r in screen(raw(con)) if r]
    assert shown[0] == "✅ 💻 run_command make · allowed by policy · 5 ms"
    assert not any("running" in r for r in shown)


@pytest.mark.parametrize(
    ("count", "shown", "note"),
    [(9, 9, None), (20, 8, "… 12 more lines"), (10, 8, "… 2 more lines")],
    ids=["nine-fit", "twenty", "ten"],
)
def test_long_previews_say_how_many_lines_are_hidden(
    count: int, shown: int, note: str | None
) -> None:
    result = {**READ, "content": file_lines(count), "lines": count, "line_range": [1, count]}
    out = card("read_file", {"path": "notes.txt"}, result)
    numbered = [line for line in out if "│" in line]
    assert len(numbered) == shown
    assert numbered[-1].endswith(f"line {shown}")
    assert (note in out[-2]) if note else ("more line" not in "\n".join(out))


def test_long_command_output_is_folded_too() -> None:
    output = "".join(f"out {n}\n" for n in range(30))
    result = {"success": True, "stdout": output, "stderr": "", "exitCode": 0, "duration": 1}
    out = card("run_command", {"command": "seq"}, result)
    assert out[-2:] == ["   … 22 more lines", "   exit 0 · 1 ms"]


def test_markup_in_a_path_is_printed_literally() -> None:
    con = console(terminal=True, colour=True)
    renderer = ChatRenderer(con, cwd=CWD)
    call = ToolCall("list_directory", {"path": "[bold]x[/bold]"})
    decided = allowed(call)
    entries = [{"name": "[red]y", "type": "file", "size": 1}]
    result = {"success": True, "entries": entries, "total": 1}
    renderer.handle(ToolResult(call, result, 0.001, decided))
    shown = "\n".join(screen(raw(con)))
    assert "list_directory [bold]x[/bold] · allowed" in shown
    assert "[red]y  1 B" in shown


def test_control_characters_in_a_card_are_escaped() -> None:
    call = ToolCall("read_file", {"path": "a\x1b[2Jb\rc"})
    result = {**READ, "content": "ok\x1b]0;title\x07\n", "lines": 1, "line_range": [1, 1]}
    out = "\n".join(card("read_file", dict(call.arguments), result))
    assert "read_file a\\x1b[2Jb\\rc · allowed" in out
    assert "ok\\x1b]0;title\\x07" in out
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out


def test_a_turn_reads_in_order() -> None:
    call = ToolCall("read_file", {"path": "notes.txt"})
    decided = allowed(call)
    result = {**READ, "content": "hi\n", "lines": 1, "line_range": [1, 1]}
    out = render(
        [
            ThinkingDelta("look first\n\n"),
            ContentDelta("Reading it."),
            StepFinished(1, Stats(), 1, "stop"),
            ToolCallProposed(call, 1),
            decided,
            ToolResult(call, result, 0.002, decided),
            ThinkingDelta("now answer\n"),
            ContentDelta("It says hi."),
            StepFinished(2, Stats(), 0, "stop"),
            finished("It says hi.", wall_time=0.5, steps=2),
        ]
    )
    assert out == [
        "💭 thinking",
        "look first",
        "",
        "Reading it.",
        "",
        "✅ 📄 read_file notes.txt · allowed by policy · 2 ms",
        "   1 │ hi",
        "   300 B · 1 line · utf-8",
        "",
        "💭 thinking",
        "now answer",
        "",
        "It says hi.",
        "",
        "0 tokens · 0.5 s · 1 tool call",
    ]
