"""The chat confirmation: what the card shows for each kind of call (on real files, with real
policy decisions), what each answer returns, and the prompt_toolkit key reader on a pipe."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from cli.backends.messages import ToolCall
from cli.config.loading import parse_config
from cli.loop.approval import Approval, ApprovalRequest
from cli.safety.policy import Policy
from cli.ui.approve import ChatApprover
from cli.ui.keys import PromptKeys

RUN_ASK = "policy:\n  tools:\n    run_command: ask\n"
CONFIRM_ALL = "policy:\n  confirm: all\n"


@dataclass
class ScriptedKeys:
    """Answers read_key/read_line from lists, recording every question it was asked."""

    keys: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)  # (prompt, choices)
    line_prompts: list[str] = field(default_factory=list)

    def read_key(self, prompt: str, choices: str) -> str:
        self.asked.append((prompt, choices))
        return self.keys.pop(0)

    def read_line(self, prompt: str) -> str:
        self.line_prompts.append(prompt)
        return self.lines.pop(0) if self.lines else ""


@dataclass
class Chat:
    """A ChatApprover on a plain-text console, and ways to make real "ask" requests."""

    policy: Policy
    keys: ScriptedKeys
    approver: ChatApprover
    out: io.StringIO

    def request(self, tool: str, **arguments: Any) -> ApprovalRequest:
        decision = self.policy.decide(tool, arguments)
        assert decision.action == "ask", decision
        return ApprovalRequest(ToolCall(tool, arguments), arguments, decision)

    def ask(self, tool: str, *keys: str, **arguments: Any) -> Approval:
        self.keys.keys += keys
        return self.approver(self.request(tool, **arguments))

    @property
    def shown(self) -> str:
        return self.out.getvalue()


MakeChat = Callable[..., Chat]


@pytest.fixture
def make_chat(workspace: Path, home: Path) -> MakeChat:
    def make(yaml: str = "", console: Console | None = None) -> Chat:
        policy = Policy(parse_config(yaml, "t.yaml").policy, cwd=str(workspace), home=str(home))
        out = io.StringIO()
        console = console or Console(file=out, width=100, color_system=None)
        keys = ScriptedKeys()
        return Chat(policy, keys, ChatApprover(console, keys, cwd=str(workspace)), out)

    return make


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real directory next to the workspace, not inside any allowed dir."""
    path = tmp_path_factory.mktemp("outside").resolve()
    (path / "data.txt").write_text("outside data\n")
    return path


def numbered(count: int, word: str = "line") -> str:
    return "".join(f"{word} {n}\n" for n in range(1, count + 1))


# -- write_file --------------------------------------------------------------------------------


def test_overwrite_shows_a_unified_diff_against_the_current_content(
    make_chat: MakeChat, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    chat = make_chat()
    approval = chat.ask("write_file", "y", path="notes.txt", content="one\nTWO\nthree\n")
    assert approval == Approval(True, by="user")
    lines = chat.shown.splitlines()
    assert lines[0] == "⏳ 📝 write_file notes.txt (14 B) · waiting for confirmation"
    assert "  path: notes.txt" in lines
    assert "  replaces the existing file: 14 B → 14 B" in lines
    assert "  diff: +1 −1 lines" in lines
    hunk = lines.index("  @@ -1,3 +1,3 @@")
    assert lines[hunk + 1 : hunk + 5] == ["   one", "  -two", "  +TWO", "   three"]
    assert lines[-1] == "✔ approved"


def test_diff_lines_are_coloured(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old\n")
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system="standard")
    chat = make_chat(console=console)
    chat.ask("write_file", "y", path="notes.txt", content="new\n")
    shown = out.getvalue()
    assert "\x1b[31m  -old" in shown  # red
    assert "\x1b[32m  +new" in shown  # green
    assert "\x1b[36m  @@ -1 +1 @@" in shown  # cyan


def test_new_file_shows_its_first_lines_and_counts_the_rest(make_chat: MakeChat) -> None:
    chat = make_chat()
    chat.ask("write_file", "y", path="new/todo.md", content=numbered(25))
    lines = chat.shown.splitlines()
    assert "  new file, 191 B, 25 lines" in lines
    assert "  also creates the parent directory new" in lines
    assert "   1 │ line 1" in lines
    assert "  20 │ line 20" in lines
    assert "line 21" not in chat.shown
    assert "  … 5 more lines not shown" in lines


def test_a_long_diff_is_cut_with_a_count(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "big.txt").write_text(numbered(200, "old"))
    chat = make_chat()
    chat.ask("write_file", "y", path="big.txt", content=numbered(200, "new"))
    # One hunk header, 200 removed and 200 added lines: 401, of which 80 are shown.
    assert "  diff: +200 −200 lines" in chat.shown
    assert "  … 321 more diff lines not shown" in chat.shown
    assert "-old 79" in chat.shown
    assert "-old 80" not in chat.shown


def test_identical_content_says_no_change(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "same.txt").write_text("same\n")
    chat = make_chat()
    chat.ask("write_file", "y", path="same.txt", content="same\n")
    assert "no change: the file already holds exactly this content" in chat.shown
    assert "diff:" not in chat.shown


def test_a_missing_final_newline_is_shown(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "eol.txt").write_text("a\nb\n")
    chat = make_chat()
    chat.ask("write_file", "y", path="eol.txt", content="a\nb")
    lines = chat.shown.splitlines()
    assert lines[lines.index("  -b") + 1 : lines.index("  -b") + 3] == [
        "  +b",
        "  \\ no newline at end of file",
    ]


def test_a_binary_file_is_not_diffed(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "image.png").write_bytes(b"\x89PNG\x00\x01\x02" * 10)
    chat = make_chat()
    chat.ask("write_file", "y", path="image.png", content="text now\n")
    assert "it is a binary file (70 B); no diff shown" in chat.shown
    assert "diff:" not in chat.shown
    assert "1 │ text now" in chat.shown  # what will be written is still shown


def test_a_file_too_large_to_diff_says_so(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "huge.txt").write_text("x" * (1024 * 1024 + 1))
    chat = make_chat()
    chat.ask("write_file", "y", path="huge.txt", content="small\n")
    assert "huge.txt is too large (1.0 MB; the limit is 1.0 MB); no diff shown" in chat.shown
    assert "1 │ small" in chat.shown


def test_writing_over_a_directory_says_it_will_fail(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "docs").mkdir()
    chat = make_chat()
    chat.ask("write_file", "y", path="docs", content="x")
    assert "  it is a directory: the write will fail" in chat.shown.splitlines()


# -- delete_file -------------------------------------------------------------------------------


def test_recursive_delete_shows_the_tree_and_counts(
    make_chat: MakeChat, workspace: Path, outside: Path
) -> None:
    tree = workspace / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "many").mkdir()
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.txt").write_text("b")
    (tree / "sub" / "deeper" / "c.txt").write_text("c")
    for n in range(40):
        (tree / "many" / f"f{n:02}").write_text("x")
    (tree / "link").symlink_to(outside, target_is_directory=True)
    chat = make_chat()
    approval = chat.ask("delete_file", "y", path="tree", recursive=True)
    assert approval.approved
    lines = chat.shown.splitlines()
    assert "  a directory, deleted with everything in it:" in lines
    assert lines[3:7] == [
        "    a.txt",
        f"    link → {outside} (symlink, not followed)",
        "    many/",
        "      f00",
    ]
    assert "      f26" in lines
    assert "f27" not in chat.shown  # 30 entries shown: a.txt, link, many/ and f00-f26
    assert "  … 17 more entries not shown" in lines
    assert "  in all: 43 files, 4 directories (counting itself)" in lines
    assert "  and 1 symlink: only the links go, not their targets" in lines
    assert "data.txt" not in chat.shown  # the link is never followed


def test_deleting_a_symlink_says_only_the_link_goes(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "target.txt").write_text("keep me")
    (workspace / "shortcut").symlink_to("target.txt")
    chat = make_chat()
    chat.ask("delete_file", "y", path="shortcut")
    lines = chat.shown.splitlines()
    assert "  path: shortcut" in lines
    assert "  a symlink → target.txt (only the link is removed, not its target)" in lines


def test_deleting_a_file_shows_its_size(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "old.log").write_text("x" * 2048)
    chat = make_chat()
    chat.ask("delete_file", "y", path="old.log")
    assert "  a file, 2.0 KB" in chat.shown.splitlines()


# -- run_command, create_directory, reads outside ----------------------------------------------


def test_run_command_shows_every_line_and_the_working_dir(
    make_chat: MakeChat, workspace: Path
) -> None:
    (workspace / "sub").mkdir()
    chat = make_chat(RUN_ASK)
    chat.ask("run_command", "y", command="echo one\nrm -rf build", cwd="sub")
    lines = chat.shown.splitlines()
    assert lines[1:4] == ["  command:", "  │ echo one", "  │ rm -rf build"]
    assert "  in: sub" in lines


def test_run_command_defaults_to_the_working_dir(make_chat: MakeChat, workspace: Path) -> None:
    chat = make_chat(RUN_ASK)
    chat.ask("run_command", "y", command="ls", timeout=5000)
    assert f"  in: {workspace} (the working directory)" in chat.shown.splitlines()
    assert "  timeout: 5000" in chat.shown.splitlines()  # other arguments are shown too


def test_create_directory_shows_the_path(make_chat: MakeChat) -> None:
    chat = make_chat()
    chat.ask("create_directory", "y", path="src/pkg")
    assert chat.shown.splitlines()[:2] == [
        "⏳ 📂 create_directory src/pkg · waiting for confirmation",
        "  path: src/pkg",
    ]


def test_a_read_outside_shows_the_path_and_why(make_chat: MakeChat, outside: Path) -> None:
    chat = make_chat()
    chat.ask("read_file", "y", path=str(outside / "data.txt"))
    assert f"  path: {outside / 'data.txt'}" in chat.shown.splitlines()
    # the reason wraps where the path (a temp dir, longer in a parallel run) makes it
    assert "is outside the allowed directories" in " ".join(chat.shown.split())
    assert chat.keys.asked[0][1] == "ynq"  # "a" would not hold for reads outside


def test_any_other_ask_shows_every_argument(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "src").mkdir()
    chat = make_chat(CONFIRM_ALL)
    chat.ask("search_files", "y", path="src", query="TODO\x1b[1m", max_results=5)
    lines = chat.shown.splitlines()
    assert lines[1:4] == ["  path: src", "  query: TODO\\x1b[1m", "  max_results: 5"]
    assert lines[4] == "  why: policy.confirm is all"


# -- answers -----------------------------------------------------------------------------------


def test_always_approves_later_calls_without_asking(make_chat: MakeChat) -> None:
    chat = make_chat()
    assert chat.ask("write_file", "a", path="a.txt", content="1") == Approval(True, by="user")
    assert "write_file" in chat.approver.always
    before = chat.shown
    assert chat.ask("write_file", path="b.txt", content="2") == Approval(True, by="session")
    assert len(chat.keys.asked) == 1
    assert chat.shown == before  # no second card
    chat.approver.forget()
    chat.ask("write_file", "y", path="c.txt", content="3")
    assert len(chat.keys.asked) == 2


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("delete_file", {"path": "gone.txt"}), ("run_command", {"command": "make"})],
    ids=["delete_file", "run_command"],
)
def test_always_is_not_offered_for_deletes_and_commands(
    make_chat: MakeChat, workspace: Path, tool: str, arguments: dict[str, Any]
) -> None:
    (workspace / "gone.txt").write_text("x")
    chat = make_chat(RUN_ASK)
    chat.ask(tool, "y", **arguments)
    prompt, choices = chat.keys.asked[0]
    assert choices == "ynq"
    assert "[a]" not in prompt
    assert "[y] yes" in prompt and "[q] stop this turn" in prompt


def test_a_read_outside_asks_even_after_always(
    make_chat: MakeChat, workspace: Path, outside: Path
) -> None:
    (workspace / "in.txt").write_text("in")
    chat = make_chat(CONFIRM_ALL)
    assert chat.ask("read_file", "a", path="in.txt").by == "user"
    assert chat.ask("read_file", path="in.txt").by == "session"
    assert chat.ask("read_file", "y", path=str(outside / "data.txt")).by == "user"
    assert len(chat.keys.asked) == 2


def test_no_with_a_reason_goes_back_to_the_model(make_chat: MakeChat) -> None:
    chat = make_chat()
    chat.keys.lines.append("  use docs/ instead ")
    approval = chat.ask("write_file", "n", path="a.txt", content="x")
    assert approval == Approval(False, by="user", reason="the user declined: use docs/ instead")
    assert chat.keys.line_prompts == ["reason (optional): "]
    assert chat.shown.splitlines()[-1] == "✖ declined: use docs/ instead"


def test_no_without_a_reason(make_chat: MakeChat) -> None:
    chat = make_chat()  # read_line returns "" as on Ctrl-C
    approval = chat.ask("write_file", "n", path="a.txt", content="x")
    assert approval == Approval(False, by="user", reason="the user declined")
    assert chat.shown.splitlines()[-1] == "✖ declined"


def test_q_stops_the_turn(make_chat: MakeChat) -> None:
    chat = make_chat()
    approval = chat.ask("write_file", "q", path="a.txt", content="x")
    assert approval == Approval(
        False, by="user", reason="the user stopped this turn", stop_turn=True
    )
    assert chat.shown.splitlines()[-1] == "⏹ stopped this turn"
    assert chat.keys.line_prompts == []


def test_a_key_outside_the_choices_is_a_no(make_chat: MakeChat) -> None:
    chat = make_chat()
    approval = chat.ask("delete_file", "a", path="missing.txt")  # "a" was not offered
    assert not approval.approved
    assert chat.approver.always == set()


# -- sanitising --------------------------------------------------------------------------------


def test_model_text_is_escaped_never_interpreted(make_chat: MakeChat, workspace: Path) -> None:
    name = "a\rb\x1b[31m[bold]x.txt"
    (workspace / name).write_text("old\n")
    chat = make_chat()
    chat.ask("write_file", "y", path=name, content="new\x1b[2J\rline [red]red[/red]\n")
    shown = chat.shown
    assert "\x1b" not in shown and "\r" not in shown
    assert "  path: a\\rb\\x1b[31m[bold]x.txt" in shown.splitlines()
    assert "  +new\\x1b[2J\\rline [red]red[/red]" in shown.splitlines()


def test_a_command_with_control_characters_is_escaped(make_chat: MakeChat) -> None:
    chat = make_chat(RUN_ASK)
    chat.ask("run_command", "y", command="rm -rf data\r\x1b[2Kecho hello [b]x[/b]")
    assert "  │ rm -rf data\\r\\x1b[2Kecho hello [b]x[/b]" in chat.shown.splitlines()


# -- PromptKeys on a pipe ----------------------------------------------------------------------


def read_key_from(text: str, choices: str = "ynaq") -> str:
    with create_pipe_input() as pipe:
        pipe.send_text(text)
        return PromptKeys(input=pipe, output=DummyOutput()).read_key("allow? ", choices)


def test_read_key_ignores_other_keys() -> None:
    assert read_key_from("xy") == "y"


def test_read_key_is_case_insensitive() -> None:
    assert read_key_from("zQ") == "q"


def test_read_key_does_not_accept_keys_left_out_of_the_choices() -> None:
    assert read_key_from("an", choices="ynq") == "n"


@pytest.mark.parametrize("key", ["\x03", "\x04", "\x1b"], ids=["ctrl-c", "ctrl-d", "esc"])
def test_read_key_interrupt_answers_the_last_choice(key: str) -> None:
    assert read_key_from(key) == "q"  # at a confirmation: stop this turn
    assert read_key_from(key, choices="yn") == "n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("because\r", "because"), ("\x03", ""), ("\x04", "")],
    ids=["line", "ctrl-c", "ctrl-d"],
)
def test_read_line(text: str, expected: str) -> None:
    with create_pipe_input() as pipe:
        pipe.send_text(text)
        assert PromptKeys(input=pipe, output=DummyOutput()).read_line("reason: ") == expected


def test_approver_and_key_reader_together(make_chat: MakeChat, workspace: Path) -> None:
    (workspace / "gone.txt").write_text("x")
    chat = make_chat()
    with create_pipe_input() as pipe:
        pipe.send_text("anwrong file\r")  # "a" is not offered for deletes: ignored
        keys = PromptKeys(input=pipe, output=DummyOutput())
        approver = ChatApprover(Console(file=io.StringIO()), keys, cwd=os.fspath(workspace))
        approval = approver(chat.request("delete_file", path="gone.txt"))
    assert approval == Approval(False, by="user", reason="the user declined: wrong file")
