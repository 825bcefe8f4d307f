"""Tab after `@` offers only what the policy would let the chat attach: no secrets, nothing in
a blocked directory. Built as the chat builds it, from the real policy."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer
from prompt_toolkit.document import Document

from cli.ui.chat_commands import COMMANDS
from cli.ui.editor import ChatCompleter
from tests.conftest import MakeChat


def completions(completer: Completer, text: str) -> list[str]:
    found = completer.get_completions(Document(text, len(text)), CompleteEvent())
    return [c.display_text for c in found]


def test_at_completion_hides_what_the_policy_refuses(
    make_chat: MakeChat, workspace: Path, home: Path
) -> None:
    for name in (".env", "id_rsa", "server.pem", "notes.md"):
        (workspace / name).write_text("x")
    (workspace / "private").mkdir()
    (workspace / "private" / "plan.txt").write_text("x")
    (workspace / "keys").symlink_to(home / ".ssh", target_is_directory=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "config").write_text("x")
    chat = make_chat(f"policy:\n  blocked_dirs: [{workspace / 'private'}]\n")
    # The completer the chat itself built, with the policy it runs under.
    completer = chat.session.completer

    shown = completions(completer, "look at @")
    assert "notes.md" in shown
    for hidden in (".env", "id_rsa", "server.pem", "private/", "keys/"):
        assert hidden not in shown, shown
    assert completions(completer, "@.en") == []
    assert completions(completer, "@private/") == []
    assert completions(completer, "@~/.ssh/") == []
    assert completions(completer, "@keys/") == []


def test_without_a_policy_every_path_is_offered(workspace: Path) -> None:
    (workspace / ".env").write_text("x")
    assert ".env" in completions(ChatCompleter(COMMANDS, str(workspace)), "@.e")
