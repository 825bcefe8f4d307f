"""The chat REPL's logic, driven through prompt-toolkit's pipe input with a captured console,
against the fake Ollama and real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from cli.ui.chat_commands import COMMANDS
from cli.ui.editor import ChatCompleter, open_block, strip_block
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, HttpError, reply, tool_call

ENTER = "\r"


def messages_sent(ollama: FakeOllama, index: int = -1) -> list[dict[str, Any]]:
    return ollama.chat_bodies[index]["messages"]


# -- conversation --------


def test_history_reaches_the_model_on_the_next_turn(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("Hi, I am here."), reply("You said hello."))
    chat = make_chat()
    assert chat.run("hello" + ENTER, "what did I say?" + ENTER) == 0
    sent = messages_sent(ollama)
    assert [(m["role"], typed(m["content"])) for m in sent[1:]] == [
        ("user", "hello"),
        ("assistant", "Hi, I am here."),
        ("user", "what did I say?"),
    ]
    assert "You said hello." in chat.text


def test_a_write_is_asked_and_y_writes(make_chat: Any, ollama: FakeOllama, workspace: Path) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "new\n"})]),
        reply("Wrote it."),
    )
    chat = make_chat()
    chat.run("write a.txt" + ENTER, "y")
    assert (workspace / "a.txt").read_text() == "new\n"
    assert "write_file" in chat.text and "Wrote it." in chat.text


def test_n_with_a_reason_does_not_write_and_tells_the_model(
    make_chat: Any, ollama: FakeOllama, workspace: Path
) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "new\n"})]),
        reply("Understood."),
    )
    chat = make_chat()
    chat.run("write a.txt" + ENTER, "n", "use b.txt instead" + ENTER)
    assert not (workspace / "a.txt").exists()
    result = json.loads(typed(messages_sent(ollama)[-1]["content"]))
    assert result["success"] is False
    assert "use b.txt instead" in result["error"]


def test_an_overwrite_shows_the_diff(make_chat: Any, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "a.txt").write_text("old line\nsame\n")
    ollama.enqueue(
        reply(
            tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "new line\nsame\n"})]
        ),
        reply("Done."),
    )
    chat = make_chat()
    chat.run("change a.txt" + ENTER, "y")
    assert "-old line" in chat.text and "+new line" in chat.text
    assert (workspace / "a.txt").read_text() == "new line\nsame\n"


def test_a_server_error_is_one_line_and_the_repl_goes_on(
    make_chat: Any, ollama: FakeOllama
) -> None:
    ollama.enqueue(HttpError(500, "runner crashed"), reply("Back again."))
    chat = make_chat()
    assert chat.run("first" + ENTER, "second" + ENTER) == 0
    assert "runner crashed" in chat.text
    assert "Back again." in chat.text
    assert "Traceback" not in chat.text


def test_every_turn_is_saved_for_resume(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("one"))
    chat = make_chat()
    chat.run("remember this" + ENTER)
    latest = chat.store.latest()
    assert latest is not None
    assert [typed(m["content"]) for m in latest.messages if m["role"] == "user"] == [
        "remember this"
    ]

    ollama.enqueue(reply("I remember."))
    resumed = make_chat()
    resumed.session.load(None)
    resumed.run("what was it?" + ENTER)
    assert [typed(m["content"]) for m in messages_sent(ollama) if m["role"] == "user"] == [
        "remember this",
        "what was it?",
    ]


# -- input --------


def test_triple_quote_block_is_one_message(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("ok"))
    chat = make_chat()
    chat.run('"""' + ENTER, "line one" + ENTER, "line two" + ENTER, '"""' + ENTER)
    assert typed(messages_sent(ollama)[-1]["content"]) == "line one\nline two"


def test_esc_enter_adds_a_line(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("ok"))
    chat = make_chat()
    chat.run("first\x1b\rsecond" + ENTER)
    assert typed(messages_sent(ollama)[-1]["content"]) == "first\nsecond"


def test_ctrl_c_at_the_prompt_clears_the_line(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("ok"))
    chat = make_chat()
    chat.run("never sent\x03", "sent" + ENTER)
    assert [typed(m["content"]) for m in messages_sent(ollama) if m["role"] == "user"] == ["sent"]


@pytest.mark.parametrize(
    ("text", "is_open"),
    [('"""', True), ('"""\nabc', True), ('"""\nabc\n"""', False), ("plain", False)],
)
def test_open_block(text: str, is_open: bool) -> None:
    assert open_block(text) is is_open


def test_strip_block() -> None:
    assert strip_block('"""\na\nb\n"""') == "a\nb"
    assert strip_block("plain") == "plain"


def test_completion_of_commands_and_paths(workspace: Path) -> None:
    (workspace / "notes.md").write_text("x")
    (workspace / "src").mkdir()
    completer = ChatCompleter(
        COMMANDS, str(workspace), lambda c: ["qwen3:8b"] if c == "/model" else []
    )

    def complete(text: str) -> list[str]:
        found = completer.get_completions(Document(text, len(text)), CompleteEvent())
        return [c.text for c in found]

    assert complete("/mo") == ["/model", "/models"]
    assert complete("/model q") == ["qwen3:8b"]
    assert complete("look at @no") == ["notes.md"]  # the whole `@…`, as it attaches
    assert complete("plain words") == []


# -- @path attachments --------


def test_at_path_attaches_the_file(make_chat: Any, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "notes.md").write_text("# Notes\nbuy milk\n")
    ollama.enqueue(reply("You need milk."))
    chat = make_chat()
    chat.run("summarise @notes.md please" + ENTER)
    content = typed(messages_sent(ollama)[-1]["content"])
    assert content.startswith("summarise @notes.md please\n\n")
    assert '<file path="notes.md">\n# Notes\nbuy milk\n</file>' in content


def test_at_path_to_a_secret_is_refused_and_the_text_kept(
    make_chat: Any, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "prod.pem").write_text("-----BEGIN PRIVATE KEY-----")
    chat = make_chat()
    # The refused message comes back at the prompt; Ctrl-C clears it, Ctrl-D quits.
    chat.run("check @prod.pem" + ENTER, "\x03")
    assert ollama.chat_bodies == []
    assert "@prod.pem not attached" in chat.text
    assert "BEGIN PRIVATE KEY" not in chat.text


def test_at_path_that_does_not_exist_is_sent_as_text_and_says_so(
    make_chat: Any, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("ok"))
    chat = make_chat()
    chat.run("read @missing.txt" + ENTER)
    assert "@missing.txt names no file: sent as text" in chat.text
    assert typed(messages_sent(ollama)[-1]["content"]) == "read @missing.txt"


# -- slash commands --------


def test_help_lists_commands_and_keys(make_chat: Any) -> None:
    chat = make_chat()
    chat.run("/help" + ENTER)
    for name in COMMANDS:
        assert name in chat.text
    assert "Esc-Enter" in chat.text and "always for this tool" in chat.text


def test_unknown_command_lists_the_known_ones(make_chat: Any) -> None:
    chat = make_chat()
    chat.run("/frobnicate" + ENTER)
    assert "unknown command /frobnicate" in chat.text
    assert "/help" in chat.text and "/history" in chat.text


@pytest.mark.parametrize("command", ["/exit", "/bye"])
def test_exit_and_bye_end_with_status_0(make_chat: Any, command: str) -> None:
    chat = make_chat()
    chat.type(command + ENTER)
    assert chat.session.run() == 0


def test_clear_starts_a_new_conversation(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("one"), reply("two"))
    chat = make_chat()
    chat.run("first" + ENTER, "/clear" + ENTER, "second" + ENTER)
    assert [m["role"] for m in messages_sent(ollama)] == ["system", "user"]


def test_model_switch_is_checked_against_the_server(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.add_model("llama3.1:8b")
    ollama.enqueue(reply("from llama"))
    chat = make_chat()
    chat.run("/model nosuch" + ENTER, "/model llama3.1:8b" + ENTER, "/model" + ENTER, "hi" + ENTER)
    assert "model nosuch is not on the server" in chat.text
    assert ollama.chat_bodies[-1]["model"] == "llama3.1:8b"
    assert "model: llama3.1:8b" in chat.text


def test_models_marks_the_current_one(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.add_model("aaa:1")
    chat = make_chat()
    chat.run("/models" + ENTER)
    assert "  aaa:1" in chat.text and "* qwen3:8b" in chat.text


def test_tools_shows_what_the_policy_does(make_chat: Any) -> None:
    chat = make_chat("policy: {tools: {run_command: ask}, commands: {allow: ['git status']}}\n")
    chat.run("/tools" + ENTER)
    lines = {
        line.split()[0]: line
        for line in chat.text.splitlines()
        if line.startswith("  ") and line.split()
    }
    assert "allow" in lines["read_file"]
    assert "ask" in lines["write_file"]
    assert "ask" in lines["delete_file"]
    assert "git status" in lines["run_command"]


def test_think_toggles_thinking(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("a", thinking="hmm"), reply("b"))
    chat = make_chat()
    chat.run("/think on" + ENTER, "one" + ENTER, "/think off" + ENTER, "two" + ENTER)
    assert ollama.chat_bodies[0]["think"] is True
    assert ollama.chat_bodies[1]["think"] is False
    assert "hmm" in chat.text


def test_save_load_and_history(make_chat: Any, ollama: FakeOllama) -> None:
    ollama.enqueue(reply("first answer"))
    chat = make_chat()
    chat.run("first question" + ENTER, "/save mywork" + ENTER)
    assert "saved as mywork" in chat.text
    other = make_chat()
    other.run("/load mywork" + ENTER, "/turns" + ENTER, "/load nosuch" + ENTER)
    assert other.session.conversation[1]["content"] == "first question"
    assert "1. you: first question" in other.text
    assert "model: first answer" in other.text
    assert "no saved session 'nosuch'" in other.text


def test_at_path_reads_are_in_the_audit_log(
    make_chat: Any, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    from cli.records.audit import verify
    from cli.records.audit_events import AuditLog

    (workspace / "notes.md").write_text("x\n")
    ollama.enqueue(reply("ok"))
    chat = make_chat()
    log = tmp_path / "audit.jsonl"
    chat.session.audit_log = AuditLog(log, "s1")
    chat.run("look at @notes.md" + ENTER)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["tool"], r["arguments"], r["outcome"]) for r in records] == [
        ("read_file", {"path": "notes.md"}, "allowed")
    ]
    assert verify(log).intact
