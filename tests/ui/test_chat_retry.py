"""Chat's /retry, /edit and /diff (issue 21), driven through prompt-toolkit's pipe input
against the fake Ollama and real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeChat
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.pty.driver import Ttys

ENTER = "\r"


def user_messages(ollama: FakeOllama, index: int = -1) -> list[str]:
    return [
        typed(m["content"]) for m in ollama.chat_bodies[index]["messages"] if m["role"] == "user"
    ]


def roles_and_contents(ollama: FakeOllama, index: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], typed(m["content"])) for m in ollama.chat_bodies[index]["messages"][1:]]


# -- /retry ------------------------------------------------------------------------------


def test_retry_sends_the_last_message_again_without_its_answer(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("Hi."), reply("A bad answer."), reply("A good answer."))
    chat = make_chat()
    assert chat.run("hello" + ENTER, "explain x" + ENTER, "/retry" + ENTER) == 0
    assert len(ollama.chat_bodies) == 3
    # The retry's request: the conversation up to the message, the message once, and no
    # trace of the answer it replaces.
    assert roles_and_contents(ollama) == [
        ("user", "hello"),
        ("assistant", "Hi."),
        ("user", "explain x"),
    ]
    assert "A good answer." in chat.text
    assert [m.get("content") for m in chat.session.conversation[1:]] == [
        "hello",
        "Hi.",
        "explain x",
        "A good answer.",
    ]
    # The autosave holds the retried conversation, not the dropped answer.
    saved = chat.store.latest()
    assert saved is not None and "A bad answer." not in str(saved.messages)


def test_retry_sends_the_attachments_as_they_were_sent(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("buy milk\n")
    ollama.enqueue(reply("One."), reply("Two."))
    chat = make_chat()
    chat.run("summarise @notes.md" + ENTER, "/retry" + ENTER)
    first, again = user_messages(ollama, 0), user_messages(ollama, 1)
    assert first == again and "<file path" in again[0]


def test_retry_says_the_dropped_answers_changes_stay(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a.md", "content": "one\n"})]),
        reply("Wrote a.md."),
        reply("Not writing this time."),
    )
    chat = make_chat("policy: {confirm: none}\n")
    chat.run("write a.md" + ENTER, "/retry" + ENTER)
    assert (workspace / "a.md").read_text() == "one\n"  # a retry undoes nothing
    assert "the dropped answer's changes stay: a.md (/undo 1 turn takes them back)" in chat.text
    assert user_messages(ollama) == ["write a.md"]


def test_retry_with_nothing_sent_says_so(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat()
    chat.run("/retry" + ENTER)
    assert "nothing to retry: no message sent yet" in chat.text
    assert ollama.chat_bodies == []


# -- /edit -------------------------------------------------------------------------------


def test_edit_puts_the_last_message_back_in_the_input(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("Hi."), reply("About y."), reply("About y and z."))
    chat = make_chat()
    # After /edit the input holds "explain y"; the keys typed add to it.
    chat.run("hello" + ENTER, "explain y" + ENTER, "/edit" + ENTER, " and z" + ENTER)
    assert roles_and_contents(ollama) == [
        ("user", "hello"),
        ("assistant", "Hi."),
        ("user", "explain y and z"),
    ]
    assert "your last message is back in the input" in chat.text


def test_edit_gives_back_the_text_as_typed_without_the_attachment(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("buy milk\n")
    ollama.enqueue(reply("One."), reply("Two."))
    chat = make_chat()
    chat.run("summarise @notes.md" + ENTER, "/edit" + ENTER, " briefly" + ENTER)
    (sent,) = user_messages(ollama)
    assert sent.startswith("summarise @notes.md briefly\n\n<file path")
    assert sent.count("<file path") == 1


def test_edit_after_resume_strips_the_attached_files(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("buy milk\n")
    ollama.enqueue(reply("One."), reply("Two."))
    make_chat().run("summarise @notes.md" + ENTER)
    resumed = make_chat()
    resumed.session.load(None)
    resumed.run("/edit" + ENTER, "!" + ENTER)
    (sent,) = user_messages(ollama)
    assert sent.startswith("summarise @notes.md!\n\n<file path")


def test_edit_after_resume_keeps_a_file_tag_the_user_typed(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    """Only the blocks at the message's end, each for a file it mentions, were attached: a
    `<file path=…>` typed on a line of its own, with words after it, is the user's text."""
    (workspace / "notes.md").write_text("buy milk\n")
    ollama.enqueue(reply("One."), reply("Two."))
    newline = "\x1b\r"  # Esc-Enter: a new line in the message
    message = f'compare{newline}{newline}<file path="old.md">{newline}with @notes.md'
    make_chat().run(message + ENTER)
    resumed = make_chat()
    resumed.session.load(None)
    resumed.run("/edit" + ENTER, "!" + ENTER)
    (sent,) = user_messages(ollama)
    assert sent.startswith('compare\n\n<file path="old.md">\nwith @notes.md!\n\n<file path')
    assert sent.count("<file path") == 2


@pytest.mark.parametrize("mention", ["link.md", "NOTES.MD"])
def test_edit_after_resume_strips_a_file_read_by_another_name(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path, mention: str
) -> None:
    """The block names the file read_file read (a symlink's target; on a case-insensitive
    disk, the disk's spelling): still an attachment of the mention, taken off by /edit."""
    (workspace / "notes.md").write_text("buy milk\n")
    (workspace / "link.md").symlink_to("notes.md")
    ollama.enqueue(reply("One."), reply("Two."))
    sent_block = '\n\n<file path="notes.md">\nbuy milk\n</file>'
    chat = make_chat()
    chat.session.conversation = [
        {"role": "user", "content": f"summarise @{mention}{sent_block}"},
        {"role": "assistant", "content": "One."},
    ]
    chat.session.autosave()
    resumed = make_chat()
    resumed.session.load(None)
    resumed.run("/edit" + ENTER, "!" + ENTER)
    (sent,) = user_messages(ollama)
    assert sent.startswith(f"summarise @{mention}!")
    assert sent.count("buy milk") <= 1


def test_edit_with_nothing_sent_says_so(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat()
    chat.run("/edit" + ENTER)
    assert "nothing to edit: no message sent yet" in chat.text


def test_help_lists_retry_edit_and_diff(make_chat: Any) -> None:
    chat = make_chat()
    chat.run("/help" + ENTER)
    for name in ("/retry", "/edit", "/diff"):
        assert name in chat.text


# -- /diff -------------------------------------------------------------------------------


def test_diff_shows_the_chats_changes_as_one_unified_diff(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.md").write_text("one\ntwo\n")
    (workspace / "gone.txt").write_text("bye\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "a.md", "content": "one\nTWO\n"}),
                tool_call("write_file", {"path": "new.md", "content": "fresh\n"}, index=1),
                tool_call("delete_file", {"path": "gone.txt"}, index=2),
            ]
        ),
        reply("Done."),
    )
    chat = make_chat("policy: {confirm: none, tools: {delete_file: allow}}\n")
    chat.run("change things" + ENTER, "/diff" + ENTER)
    diff = chat.text[chat.text.index("--- a/a.md") :].splitlines()
    assert diff[:6] == ["--- a/a.md", "+++ b/a.md", "@@ -1,2 +1,2 @@", " one", "-two", "+TWO"]
    assert diff[6:9] == ["--- /dev/null", "+++ b/new.md", "@@ -0,0 +1 @@"]
    assert diff[9] == "+fresh"
    assert diff[10:14] == ["--- a/gone.txt", "+++ /dev/null", "@@ -1 +0,0 @@", "-bye"]


def test_diff_of_one_path_and_of_what_was_undone(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.md").write_text("a\n")
    (workspace / "b.md").write_text("b\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("write_file", {"path": "a.md", "content": "A\n"}),
                tool_call("write_file", {"path": "b.md", "content": "B\n"}, index=1),
            ]
        ),
        reply("Done."),
    )
    chat = make_chat("policy: {confirm: none}\n")
    chat.run("change" + ENTER, "/diff b.md" + ENTER, "/undo" + ENTER, "/diff" + ENTER)
    first, _, second = chat.text.partition("restored b.md as it was before change #2")
    assert "+++ b/b.md" in first and "+++ b/a.md" not in first
    # After b.md's change is undone, only a.md differs from how the chat found it.
    assert "+++ b/a.md" in second and "b/b.md" not in second


def test_diff_with_no_change_says_so(make_chat: MakeChat, ollama: FakeOllama) -> None:
    chat = make_chat()
    chat.run("/diff" + ENTER)
    assert "no changes in this chat" in chat.text


def test_retry_after_a_refused_message_never_resends_the_one_before(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    """A message too large for the context is refused and not kept: /retry must not send
    the message before it instead; /edit gives the refused one back to shorten."""
    ollama.enqueue(reply("Hi."), reply("Short is fine."))
    chat = make_chat("ollama: {max_num_ctx: 8192}\n")
    big = "summarise " + "z" * 40_000
    chat.session.send("hello")
    chat.session.send(big)  # as typed, without typing 40 KB through the pipe
    chat.run("/retry" + ENTER, "/edit" + ENTER, "\x15short" + ENTER)  # Ctrl-U clears it
    assert "your last message was not kept (see why above)" in chat.text
    assert len(ollama.chat_bodies) == 2  # hello, then the shortened message: no resend
    assert user_messages(ollama) == ["hello", "short"]


# -- in a terminal -----------------------------------------------------------------------


@pytest.mark.pty
def test_edit_and_retry_in_a_terminal(ttys: Ttys, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("First answer."), reply("Edited answer."), reply("Retried answer."))
    terminal = ttys.chat(host=ollama.url, cols=110)
    terminal.say("explain the parser", then="First answer.")
    # The next prompt shows the message, ready to change: keys typed go after it.
    terminal.line("/edit")
    terminal.wait_turn_end(
        then="your last message is back in the input", holding="explain the parser"
    )
    terminal.keys(" briefly\r")
    terminal.wait_turn_end(then="Edited answer.")
    terminal.line("/retry")
    terminal.wait("sending your last message again")
    terminal.wait_turn_end(then="Retried answer.")
    terminal.exit()
    users = [
        [typed(m["content"]) for m in body["messages"] if m["role"] == "user"]
        for body in ollama.chat_bodies
    ]
    assert users == [
        ["explain the parser"],
        ["explain the parser briefly"],
        ["explain the parser briefly"],
    ]
    roles = [m["role"] for m in ollama.chat_bodies[-1]["messages"]]
    assert "assistant" not in roles  # neither dropped answer was sent again


MAKEFILE = "all:\n\techo hi\n"


def test_diff_of_a_move_a_new_directory_and_tabs(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "old.md").write_text("kept\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("move_file", {"source": "old.md", "destination": "new.md"}),
                tool_call("create_directory", {"path": "pkg"}, index=1),
                tool_call("write_file", {"path": "Makefile", "content": MAKEFILE}, index=2),
            ]
        ),
        reply("Done."),
    )
    chat = make_chat("policy: {confirm: none, tools: {move_file: allow}}\n")
    chat.run("tidy" + ENTER, "/diff" + ENTER)
    diff = chat.text[chat.text.index("--- a/old.md") :].splitlines()
    assert diff[:4] == ["--- a/old.md", "+++ /dev/null", "@@ -1 +0,0 @@", "-kept"]
    assert diff[4:8] == ["--- /dev/null", "+++ b/new.md", "@@ -0,0 +1 @@", "+kept"]
    assert diff[8] == "# created the directory pkg"
    # A tab is shown as whitespace, not as an escape.
    assert any(line.startswith("+") and line[1:].strip() == "echo hi" for line in diff), diff


def test_edit_of_the_only_message_then_leaving_saves_without_it(
    make_chat: MakeChat, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("An answer."))
    chat = make_chat()
    chat.run("first" + ENTER, "/edit" + ENTER, "\x15" + ENTER)  # Ctrl-U: nothing sent
    saved = chat.store.latest()
    assert saved is not None and "An answer." not in str(saved.messages)
    assert saved.turns == 0


def test_retry_and_edit_keep_an_attached_image(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    import base64

    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
    (workspace / "shot.png").write_bytes(png)
    ollama.add_model("gemma3:4b", ["completion", "vision"])
    ollama.enqueue(reply("A cat."), reply("A chart."), reply("A bar chart."))
    chat = make_chat("ollama:\n  model: gemma3:4b\n")
    chat.run("what is @shot.png?" + ENTER, "/retry" + ENTER, "/edit" + ENTER, " exactly" + ENTER)
    sent = [[m for m in body["messages"] if m["role"] == "user"][-1] for body in ollama.chat_bodies]
    image = base64.b64encode(png).decode("ascii")
    assert [m.get("images") for m in sent] == [[image], [image], [image]]
    assert typed(sent[1]["content"]) == 'what is @shot.png?\n\n<image path="shot.png" />'
    assert typed(sent[2]["content"]) == 'what is @shot.png? exactly\n\n<image path="shot.png" />'


def test_diff_says_a_file_became_a_directory(
    make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    """A file moved away and a directory made in its place: its lines go, then the
    directory comes (not "created the directory" alone, as if nothing had been there)."""
    (workspace / "old.txt").write_text("orig\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("move_file", {"source": "old.txt", "destination": "a.txt"})]),
        reply(tool_calls=[tool_call("create_directory", {"path": "old.txt"})]),
        reply("done"),
    )
    chat = make_chat("policy:\n  confirm: none\n")
    chat.run("go" + ENTER, "/diff old.txt" + ENTER)
    shown = chat.text[chat.text.index("--- a/old.txt") :].splitlines()
    assert shown[:4] == ["--- a/old.txt", "+++ /dev/null", "@@ -1 +0,0 @@", "-orig"]
    assert shown[4] == "# created the directory old.txt"


def test_a_typed_block_for_a_mention_that_attached_once_is_kept() -> None:
    """A mention attaches its file once: of two blocks for it at the end, only the last is
    the attachment; the one before it is what the user typed."""
    from cli.loop.mentions import file_block, typed_text

    typed = '@a.txt compare with\n\n<file path="a.txt">\nold version\n</file>'
    assert typed_text(typed + "\n\n" + file_block("a.txt", {"content": "new\n"})) == typed
    both = "@a.txt @./a.txt\n\n" + "\n\n".join(
        file_block("a.txt", {"content": "new\n"}) for _ in range(2)
    )
    assert typed_text(both) == "@a.txt @./a.txt"  # two mentions: two attachments
