"""The end-to-end suite, against both protocols: `agent run` in a subprocess, the chat REPL
through a pipe and `agent chat` in a pseudo-terminal, once against the fake Ollama (native
API) and once against the fake OpenAI-compatible server (`--api openai`).

The scenarios are written once, against `Server`, which scripts either fake the same way and
reads back what the client sent in either dialect. The parametrized fixture `server` runs each
of them for both; `test_openai_mode_passes_the_same_end_to_end_suite` is that claim's index.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.wiring import Choices
from tests.conftest import MakeChat, RunCli
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, Stream, reply, tool_call
from tests.fakes.fake_ollama import HttpError as OllamaHttpError
from tests.fakes.fake_openai import Answer, Call, Events, FakeOpenAI
from tests.fakes.fake_openai import HttpError as OpenAIHttpError
from tests.pty.driver import Chat, Ttys

ENTER = "\r"


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@dataclass
class Server:
    """One fake server, scripted and read back the same way whichever dialect it speaks."""

    api: str  # native | openai
    fake: FakeOllama | FakeOpenAI

    @property
    def url(self) -> str:
        return self.fake.url

    @property
    def args(self) -> list[str]:
        """What `agent run`/`agent chat` need to reach it."""
        if self.api == "openai":
            return ["--api", "openai", "--host", self.url]
        return ["--host", self.url]

    @property
    def choices(self) -> Choices:
        return Choices(host=self.url, api=self.api)

    def answer(
        self,
        content: str = "",
        *,
        thinking: str = "",
        calls: Sequence[tuple[str, dict[str, Any]]] = (),
        eval_count: int = 20,
        token: int = 4,
        delay: float = 0.0,
    ) -> None:
        if isinstance(self.fake, FakeOllama):
            native = [tool_call(name, args, index=i) for i, (name, args) in enumerate(calls)]
            self.fake.enqueue(
                reply(
                    content,
                    thinking=thinking,
                    tool_calls=native,
                    eval_count=eval_count,
                    token=token,
                    delay=delay,
                )
            )
        else:
            self.fake.enqueue(
                Answer(
                    content,
                    thinking=thinking,
                    tool_calls=[Call(name, args) for name, args in calls],
                    completion_tokens=eval_count,
                    token=token,
                    delay=delay,
                )
            )

    def fail(self, kind: str) -> str:
        """Script a failure; returns words the one-line error must hold."""
        native = isinstance(self.fake, FakeOllama)
        if kind == "http-500":
            self.fake.enqueue(
                OllamaHttpError(500, "runner crashed")
                if native
                else OpenAIHttpError(500, "runner crashed")
            )
            return "HTTP 500: runner crashed"
        if kind == "error-mid-stream":
            if native:
                line = {"model": "qwen3:8b", "message": {"content": "Hi"}, "done": False}
                self.fake.enqueue(
                    Stream([line, b'{"error":"model runner has unexpectedly stopped"}\n'])
                )
            else:
                first = {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}
                error = {"error": {"message": "model runner has unexpectedly stopped"}}
                self.fake.enqueue(Events([first, error]))
            return "mid-stream: model runner has unexpectedly stopped"
        if kind == "garbage":
            if native:
                self.fake.enqueue(Stream([b"this is not json\n"]))
            else:
                self.fake.enqueue(Events([b"this is not json\n"], done=False))
            return "not JSON"
        if kind == "dropped":
            if native:
                line = {"model": "qwen3:8b", "message": {"content": "par"}, "done": False}
                self.fake.enqueue(Stream([line], drop=True))
            else:
                first = {"choices": [{"index": 0, "delta": {"content": "par"}}]}
                self.fake.enqueue(Events([first], done=False, drop=True))
            return "dropped mid-stream"
        if kind == "stall":
            if native:
                self.fake.enqueue(Stream([], stall=10))
            else:
                self.fake.enqueue(Events([], done=False, stall=10))
            return "sent nothing for 1 s (ollama.timeout)"
        raise ValueError(kind)

    def add_model(self, name: str, *, tools: bool = True) -> None:
        if isinstance(self.fake, FakeOllama):
            self.fake.add_model(name, ["completion", "tools"] if tools else ["completion"])
        else:
            self.fake.add_model(name, capabilities=["completion", *(["tool_use"] if tools else [])])

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return self.fake.chat_bodies

    def sent(self, index: int = -1) -> list[dict[str, Any]]:
        return self.bodies[index]["messages"]

    def results_sent(self, index: int = -1) -> list[dict[str, Any]]:
        """The tool results in a request, each checked to answer a call of the assistant
        message before it (by tool_call_id on /v1, by tool_name natively)."""
        messages = self.sent(index)
        results = []
        for i, message in enumerate(messages):
            if message["role"] != "tool":
                continue
            caller = next(m for m in reversed(messages[:i]) if m["role"] == "assistant")
            calls = caller["tool_calls"]
            if self.api == "openai":
                assert caller["content"] == "", "an assistant message with calls has content ''"
                assert all(isinstance(c["function"]["arguments"], str) for c in calls)
                assert message["tool_call_id"] in [c["id"] for c in calls]
            else:
                assert all(isinstance(c["function"]["arguments"], dict) for c in calls)
                assert message["tool_name"] in [c["function"]["name"] for c in calls]
            results.append(json.loads(message["content"]))
        return results

    def tools_offered(self, index: int = 0) -> bool:
        return "tools" in self.bodies[index]


@pytest.fixture(params=["native", "openai"])
def server(request: pytest.FixtureRequest, ollama: FakeOllama, openai: FakeOpenAI) -> Server:
    return Server(request.param, ollama if request.param == "native" else openai)


def no_traceback(stderr: str) -> bool:
    return "Traceback" not in stderr


def trace_lines(stderr: str) -> list[str]:
    """The trace lines of `agent run`, without notes (the openai backend says once what it
    assumes about the model)."""
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("note:")]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the claim, in one place -------------------------------------------------------------


def test_openai_mode_passes_the_same_end_to_end_suite(request: pytest.FixtureRequest) -> None:
    """Every scenario in this module takes `server`, so runs against both protocols."""
    module = sys.modules[__name__]
    scenarios = [
        name
        for name, fn in vars(module).items()
        if name.startswith("test_") and callable(fn) and name != request.node.name
    ]
    assert len(scenarios) >= 15
    for name in scenarios:
        params = getattr(module, name).__code__.co_varnames
        assert "server" in params, f"{name} does not run against both protocols"


# -- agent run ---------------------------------------------------------------------------


def test_a_read_puts_only_the_answer_on_stdout(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    server.answer(calls=[("read_file", {"path": "notes.txt"})])
    server.answer("Two lines: alpha, beta.")
    r = run_cli("run", *server.args, "what is in notes.txt?")
    assert r.code == 0, r.stderr
    assert r.stdout == "Two lines: alpha, beta.\n"
    assert trace_lines(r.stderr) == ["→ read_file notes.txt · allowed by policy · 2 lines, 11 B"]
    [result] = server.results_sent()
    assert result["success"] is True and result["content"] == "alpha\nbeta\n"


def test_json_output_has_every_field(run_cli: RunCli, server: Server, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\n")
    server.answer(
        calls=[("read_file", {"path": "notes.txt"}), ("read_file", {"path": "/etc/shadow"})]
    )
    server.answer("Done.", eval_count=7)
    r = run_cli("run", *server.args, "--json", "-m", "qwen3:8b", "read")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"answer", "model", "steps", "stop_reason", "tool_calls", "stats"}
    assert (data["answer"], data["model"], data["steps"]) == ("Done.", "qwen3:8b", 2)
    assert data["stop_reason"] == "answer"
    first, second = data["tool_calls"]
    assert first["name"] == "read_file" and first["arguments"] == {"path": "notes.txt"}
    assert first["decision"] == "allow" and first["result"]["content"] == "alpha\n"
    assert second["decision"] == "deny" and "blocked directory /etc" in second["result"]["error"]
    assert data["stats"]["eval_count"] == 20 + 7
    assert data["stats"]["prompt_eval_count"] == 200
    assert data["stats"]["total_duration"] > 0
    assert r.stdout.count("\n") == 1
    assert len(server.results_sent()) == 2


def test_thinking_is_shown_on_stderr_with_think(run_cli: RunCli, server: Server) -> None:
    server.answer("Answer.", thinking="Pondering deeply.")
    r = run_cli("run", *server.args, "--think", "q")
    assert r.code == 0, r.stderr
    assert r.stdout == "Answer.\n"
    assert "Pondering deeply." in r.stderr
    body = server.bodies[0]
    if server.api == "native":
        assert body["think"] is True
    else:
        assert "think" not in body and "reasoning_effort" not in body  # no switch on /v1
        # What had to be assumed about the model is said once, and not said again as a
        # second notice ("cannot think") that contradicts the thinking shown below it.
        assert r.stderr.count("does not say what 'qwen3:8b' can do") == 1
        assert "cannot think" not in r.stderr


def test_agent_models_json_says_only_what_the_server_said(run_cli: RunCli, server: Server) -> None:
    r = run_cli("models", *server.args, "--json")
    assert r.code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == ["qwen3:8b"]
    if server.api == "native":
        assert "tools" in rows[0]["capabilities"]
    else:  # /v1/models has no capabilities: unknown, not the tools the agent assumes
        assert rows[0]["capabilities"] is None


def test_thinking_is_not_shown_without_think(run_cli: RunCli, server: Server) -> None:
    server.answer("Answer.", thinking="Pondering deeply.")
    r = run_cli("run", *server.args, "q")
    assert r.code == 0 and "Pondering" not in r.stderr and "Pondering" not in r.stdout


def test_a_write_without_a_terminal_is_denied(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    server.answer(calls=[("write_file", {"path": "x.txt", "content": "x"})])
    server.answer("could not")
    r = run_cli("run", *server.args, "--json", "write x")
    assert r.code == 0, r.stderr
    assert not (workspace / "x.txt").exists()
    call = json.loads(r.stdout)["tool_calls"][0]
    assert call["decision"] == "deny" and "no one can be asked" in call["result"]["error"]
    [result] = server.results_sent()
    assert result["success"] is False


def test_yes_writes(run_cli: RunCli, server: Server, workspace: Path) -> None:
    server.answer(
        calls=[
            ("create_directory", {"path": "pkg"}),
            ("write_file", {"path": "pkg/a.py", "content": 'x = "é"\n'}),
        ]
    )
    server.answer("made")
    r = run_cli("run", *server.args, "--yes", "scaffold")
    assert r.code == 0, r.stderr
    assert (workspace / "pkg" / "a.py").read_text() == 'x = "é"\n'
    assert "allowed by --yes" in r.stderr


def test_exit_3_at_the_step_limit(run_cli: RunCli, server: Server, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a")
    for _ in range(3):
        server.answer("still going", calls=[("read_file", {"path": "a.txt"})])
    r = run_cli("run", *server.args, "--max-steps", "3", "--json", "loop")
    assert r.code == 3
    data = json.loads(r.stdout)
    assert data["stop_reason"] == "max_steps" and data["steps"] == 3
    assert "step limit reached after 3 model calls" in r.stderr


@pytest.mark.parametrize("kind", ["http-500", "error-mid-stream", "garbage", "dropped"])
def test_exit_1_for_server_and_stream_failures(run_cli: RunCli, server: Server, kind: str) -> None:
    words = server.fail(kind)
    r = run_cli("run", *server.args, "hi")
    assert r.code == 1, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("agent: ")]
    assert len(errors) == 1 and words in errors[0], r.stderr
    assert no_traceback(r.stderr) and r.stdout == ""


def test_exit_1_after_the_timeout_on_a_stalled_stream(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    (workspace / "c.yaml").write_text("ollama: {timeout: 1}\n")
    words = server.fail("stall")
    r = run_cli("run", *server.args, "-c", "c.yaml", "hi")
    assert r.code == 1 and words in r.stderr


def test_json_on_failure_still_prints_one_object(run_cli: RunCli, server: Server) -> None:
    server.fail("http-500")
    r = run_cli("run", *server.args, "--json", "hi")
    assert r.code == 1
    data = json.loads(r.stdout)
    assert data["stop_reason"] == "error" and "runner crashed" in data["error"]


def test_exit_1_when_the_server_is_unreachable(run_cli: RunCli, server: Server) -> None:
    url = f"http://127.0.0.1:{closed_port()}" + ("/v1" if server.api == "openai" else "")
    args = ["--api", server.api, "--host", url]
    r = run_cli("run", *args, "hi")
    assert r.code == 1
    assert r.stderr.startswith("agent: cannot reach ") and url in r.stderr
    assert "(connection refused)" in r.stderr and r.stderr.count("\n") == 1


def test_exit_1_when_the_model_is_unknown(run_cli: RunCli, server: Server) -> None:
    server.add_model("other:1b")  # (a server with one model serves it whatever the name)
    r = run_cli("run", *server.args, "-m", "nosuch:7b", "hi")
    assert r.code == 1
    assert "nosuch:7b" in r.stderr and r.stderr.count("\n") == 1
    assert server.bodies == []  # the model check comes before any chat request


def test_a_model_without_tools_gets_them_in_the_prompt(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    # agent.tool_mode auto: no `tools` field, the system prompt describes them, and the
    # model's <tool_call> text runs under the same policy. With the default aids the reply is
    # asked to hold to a JSON schema of the calls (Ollama's `format`, `response_format`):
    # a server that writes free text anyway is read as text, and the tool results go back
    # as labelled user messages (agent.aids: user_results).
    (workspace / "notes.txt").write_text("from the file\n")
    server.add_model("tiny:1b", tools=False)
    call = {"name": "read_file", "arguments": {"path": "notes.txt"}}
    server.answer(f"<tool_call>{json.dumps(call)}</tool_call>")
    server.answer("It says: from the file.")
    r = run_cli("run", *server.args, "-m", "tiny:1b", "what is in notes.txt?")
    assert r.code == 0, r.stderr
    assert r.stdout == "It says: from the file.\n"
    assert "described in the prompt" in r.stderr
    assert not server.tools_offered(0) and not server.tools_offered(1)
    system = server.sent(0)[0]["content"]
    assert "read_file" in system and '{"answer": "your answer"}' in system
    body = server.fake.chat_bodies[0]
    schema = body["format"] if server.api == "native" else body["response_format"]
    assert "read_file" in json.dumps(schema)
    label, _, text = server.sent(1)[-1]["content"].partition("\n")
    assert server.sent(1)[-1]["role"] == "user" and label == "[tool result of read_file]"
    result = json.loads(text)
    assert result["success"] is True and result["content"] == "from the file\n"


def test_a_model_without_tools_in_native_mode_gets_none(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    (workspace / "native.yaml").write_text("agent: {tool_mode: native}\n")
    server.add_model("tiny:1b", tools=False)
    server.answer("plain")
    r = run_cli("run", *server.args, "-c", "native.yaml", "-m", "tiny:1b", "hi")
    assert r.code == 0 and r.stdout == "plain\n"
    assert "does not support tools" in r.stderr
    assert not server.tools_offered()
    assert "<tool_call>" not in server.sent(0)[0]["content"]


def test_a_too_long_prompt_is_trimmed_and_sent_again(
    run_cli: RunCli, server: Server, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("".join(f"line {i}: value\n" for i in range(400)))
    message = "the prompt is longer than the context length currently available to the model"
    server.answer(calls=[("read_file", {"path": "big.txt"})])
    if isinstance(server.fake, FakeOllama):
        server.fake.enqueue(OllamaHttpError(400, message))
    else:
        server.fake.enqueue(OpenAIHttpError(400, message, code="context_length_exceeded"))
    server.answer("fits now")
    r = run_cli("run", *server.args, "--yes", "read big.txt")
    assert r.code == 0, r.stderr
    assert r.stdout == "fits now\n"
    assert "sending it once more" in r.stderr
    assert len(server.bodies) == 3
    refused, resent = server.bodies[1:]
    assert resent != refused  # never the refused request again


# -- the chat REPL -----------------------------------------------------------------------


def test_chat_asks_before_a_write_and_keeps_the_history(
    make_chat: MakeChat, server: Server, workspace: Path
) -> None:
    server.answer(calls=[("write_file", {"path": "a.txt", "content": "new\n"})])
    server.answer("Wrote it.")
    server.answer("You asked me to write a.txt.")
    chat = make_chat(choices=server.choices)
    assert chat.run("write a.txt" + ENTER, "y", "what did I ask?" + ENTER) == 0
    assert (workspace / "a.txt").read_text() == "new\n"
    assert "waiting for confirmation" in chat.text and "Wrote it." in chat.text
    sent = server.sent()
    users = [typed(m["content"]) for m in sent if m["role"] == "user"]
    assert users == ["write a.txt", "what did I ask?"]
    [result] = server.results_sent()
    assert result["success"] is True


def test_chat_n_with_a_reason_tells_the_model(
    make_chat: MakeChat, server: Server, workspace: Path
) -> None:
    server.answer(calls=[("write_file", {"path": "a.txt", "content": "new\n"})])
    server.answer("Understood.")
    chat = make_chat(choices=server.choices)
    chat.run("write a.txt" + ENTER, "n", "use b.txt instead" + ENTER)
    assert not (workspace / "a.txt").exists()
    [result] = server.results_sent()
    assert result["success"] is False and "use b.txt instead" in result["error"]


def test_chat_shows_thinking_after_think_on(make_chat: MakeChat, server: Server) -> None:
    server.answer("Answer.", thinking="Pondering deeply.")
    chat = make_chat(choices=server.choices)
    chat.run("/think on" + ENTER, "q" + ENTER)
    assert "Answer." in chat.text and "Pondering deeply." in chat.text


def test_chat_reports_a_server_error_and_goes_on(make_chat: MakeChat, server: Server) -> None:
    server.fail("http-500")
    server.answer("Back again.")
    chat = make_chat(choices=server.choices)
    assert chat.run("first" + ENTER, "second" + ENTER) == 0
    assert "runner crashed" in chat.text and "Back again." in chat.text
    assert "Traceback" not in chat.text


# -- agent chat in a pseudo-terminal -------------------------------------------------------


@pytest.fixture
def pty_chat(server: Server, ttys: Ttys) -> Chat:
    chat = ttys.chat(*server.args, cols=110, timeout=20)
    assert "metona-agent" in chat.text()
    return chat


@pytest.mark.pty
def test_agent_chat_in_a_terminal(pty_chat: Chat, server: Server, workspace: Path) -> None:
    if server.api == "openai":  # the model check says once what it had to assume
        assert "assuming it takes tools" in pty_chat.flat()  # said before the first prompt
    server.answer(calls=[("write_file", {"path": "todo.md", "content": "- milk\n"})])
    server.answer("Created todo.md.")
    pty_chat.line("make a todo list")
    pty_chat.wait("waiting for confirmation")
    pty_chat.press("y", then="[y] yes")
    pty_chat.wait_turn_end(then="Created todo.md.")
    assert (workspace / "todo.md").read_text() == "- milk\n"
    assert pty_chat.exit() == 0


@pytest.mark.pty
def test_agent_chat_exits_1_for_an_unknown_model(server: Server, ttys: Ttys) -> None:
    server.add_model("other:1b")
    chat = ttys.chat(*server.args, "-m", "ghost:1b", ready=False, timeout=20)
    chat.wait("ghost:1b")
    assert chat.wait_exit() == 1


def test_what_had_to_be_assumed_about_the_model_is_said_once_not_at_every_start(
    run_cli: RunCli, openai: FakeOpenAI
) -> None:
    """A server that does not say what its model can do: the note comes at the first start
    with this server and model, not at the next ones (with -v, every time)."""
    server = Server("openai", openai)
    said = "does not say what 'qwen3:8b' can do"
    counts = []
    for flags in ([], [], ["-v"], []):
        server.answer("Answer.")
        r = run_cli("run", *server.args, *flags, "q")
        assert r.code == 0, r.stderr
        counts.append(r.stderr.count(said))
    assert counts == [1, 0, 1, 0]
