"""Bounded and recursion-free, and only offered tools run: what a hostile server or model sends
(JSON nested without end, tool calls streamed forever, calls to tools nobody offered) and what
a model can build on disk (trees that match no filter, trees thousands of levels deep) ends in
one line, a refusal the model reads, or a result that says `truncated` — never a traceback,
never a hang, never a tool that was not offered."""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import MAX_JSON_DEPTH, nests_deeper_than
from cli.fs.walk import MAX_WALK_DEPTH
from cli.loop.events import ToolResult
from tests.conftest import MakeAgent, MakeChat, RunCli
from tests.fakes.fake_http import serve
from tests.fakes.fake_ollama import (
    FakeOllama,
    HttpError,
    Stream,
    _Handler,
    reply,
    tool_call,
)

DEEP = 100_000  # far past Python's recursion limit, far below the stream's line limit


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("agent: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    return lines[0]


def chunk(message: dict[str, Any]) -> dict[str, Any]:
    """One NDJSON line of an answer that is not done yet."""
    return {
        "model": "qwen3:8b",
        "created_at": "2026-11-29T12:00:00Z",
        "message": {"role": "assistant", "content": "", **message},
        "done": False,
    }


# -- JSON nested without end -----------------------------------------------------------------


class _DeepShow(_Handler):
    """Answers /api/show with a 200 whose body nests DEEP levels; the rest as the fake does."""

    def do_POST(self) -> None:
        if self.path != "/api/show":
            super().do_POST()
            return
        self._record()
        payload = b"[" * DEEP
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class DeepShowOllama(FakeOllama):
    def start(self) -> DeepShowOllama:
        self._server = serve(type("Handler", (_DeepShow,), {"fake": self}))
        return self


@pytest.fixture
def deep_show() -> Iterator[FakeOllama]:
    fake = DeepShowOllama().start()
    yield fake
    fake.stop()


def test_attack_hangs_and_tracebacks_nested_json_from_server(
    run_cli: RunCli, make_chat: MakeChat, ollama: FakeOllama, deep_show: FakeOllama
) -> None:
    deep_line = b"[" * DEEP + b"\n"
    # A line of the stream: one line, exit 1.
    ollama.enqueue(Stream([reply("Hi").lines[0], deep_line]))
    r = run_cli("run", "hello")
    assert r.code == 1
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in one_error_line(r.stderr)
    # An object nested that deep inside an ordinary-looking chunk: the same.
    nested = b'{"message": {"content": "x", "tool_calls": ' + b"[" * DEEP + b"\n"
    ollama.enqueue(Stream([nested]))
    r = run_cli("run", "hello")
    assert r.code == 1 and "nested deeper" in one_error_line(r.stderr)
    # The error body of an HTTP failure, read before any stream.
    ollama.enqueue(HttpError(500, body=b"[" * DEEP))
    r = run_cli("run", "hello")
    assert r.code == 1 and "HTTP 500" in one_error_line(r.stderr)
    # A non-stream body (/api/show) that nests that deep.
    r = run_cli("run", "hello", env={"OLLAMA_HOST": deep_show.url})
    assert r.code == 1
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in one_error_line(r.stderr)

    # The REPL stays up, says what happened, and the next question is answered.
    chat = make_chat()
    ollama.enqueue(Stream([deep_line]), reply("I am back."))
    assert chat.run("first question\r", "second question\r") == 0
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in chat.text
    assert "I am back." in chat.text and "Traceback" not in chat.text


def test_attack_hangs_and_tracebacks_nested_json_in_tool_arguments(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    """Arguments sent as a JSON string, and calls written as text, nested that deep: refused
    calls the model reads, and the run goes on."""
    deep = "[" * DEEP
    texts = [
        f"<tool_call>{deep}</tool_call>",
        '[TOOL_CALLS] [{"name": "write_file", "arguments": ' + deep,
        "<function=write_file><parameter=path>\nx.txt\n</parameter>"
        f"<parameter=content>\n{deep}\n</parameter></function>",
    ]
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", deep)]),
        *(reply(text, token=len(text)) for text in texts),
        reply("I give up."),
    )
    r = run_cli("run", "--yes", "go")
    assert r.code == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "I give up." and "Traceback" not in r.stderr
    errors = [result["error"] for result in tool_results(ollama.chat_bodies[-1])]
    assert len(errors) == 4
    assert all(f"deeper than {MAX_JSON_DEPTH} levels" in error for error in errors), errors
    assert list(workspace.iterdir()) == []  # nothing was written


def test_json_depth_is_counted_outside_strings_only() -> None:
    limit = MAX_JSON_DEPTH
    assert not nests_deeper_than("[" * limit + "]" * limit)
    assert nests_deeper_than("[" * (limit + 1))
    assert nests_deeper_than('{"a": ' * (limit + 1) + "1" + "}" * (limit + 1))
    assert not nests_deeper_than(json.dumps({"content": "[{" * 10_000}))
    assert not nests_deeper_than(json.dumps(["\\[" * 10_000, '"[[[' * 10_000]))
    assert nests_deeper_than(json.dumps(["\\", '"']) + "[" * (limit + 1))
    # A string that never ends holds everything after it; an escaped quote does not end it.
    assert not nests_deeper_than('["' + "[" * 10_000)
    assert not nests_deeper_than('["\\"' + "[" * 10_000)
    # Linear however the quotes fall (a backtracking scan would take hours on this).
    assert nests_deeper_than('"' + '\\"' * 1_000_000 + '"' + "[" * (limit + 1))


# -- tool calls streamed forever ---------------------------------------------------------------


def test_attack_hangs_and_tracebacks_endless_tool_call_stream(
    run_cli: RunCli, make_chat: MakeChat, ollama: FakeOllama, workspace: Path
) -> None:
    """A server that streams tool-call chunks and never says done: the answer ends at
    agent.max_answer_chars as endless text does, and none of the calls runs."""
    call = tool_call("write_file", {"path": "flood.txt", "content": "x" * 40})
    endless = Stream([chunk({"tool_calls": [call]})], endless=True)
    (workspace / "c.yaml").write_text("agent: {max_answer_chars: 5000}\n")
    ollama.enqueue(endless)
    r = run_cli("run", "--yes", "-c", "c.yaml", "go", timeout=30)
    assert r.code == 1
    line = one_error_line(r.stderr)
    assert "passed 5000 characters without ending" in line and "tool calls" in line
    assert not (workspace / "flood.txt").exists()

    chat = make_chat("agent: {max_answer_chars: 5000}\n")
    ollama.enqueue(endless, reply("I am back."))
    assert chat.run("first question\r", "second question\r") == 0
    assert "without ending" in chat.text and "I am back." in chat.text
    assert not (workspace / "flood.txt").exists()


def test_many_calls_within_the_cap_still_arrive_whole(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    calls = [tool_call("read_file", {"path": "a.txt"}) for _ in range(40)]
    ollama.enqueue(reply(tool_calls=calls), reply("ok"))
    events = make_agent("agent: {max_answer_chars: 5000}\n").run("go")
    assert sum(isinstance(e, ToolResult) for e in events) == 32
    assert len(tool_results(ollama.chat_bodies[-1])) == 40


# -- walks: every visit counts ------------------------------------------------------------------


BIG_RESULTS = "policy: {limits: {max_tool_result_chars: 10000000%s}}\n"


def tool_result(
    make_agent: MakeAgent, ollama: FakeOllama, limits: str, name: str, **args: Any
) -> dict[str, Any]:
    """Run one call through the agent as the model would make it; its result as the model gets
    it. `limits`: more policy.limits, e.g. ", max_search_files: 5"."""
    ollama.enqueue(reply(tool_calls=[tool_call(name, args)]), reply("done"))
    events = make_agent(BIG_RESULTS % limits).run("go")
    (result,) = [e.result for e in events if isinstance(e, ToolResult)]
    assert result["success"] is True, result
    return dict(result)


def searched(make_agent: MakeAgent, ollama: FakeOllama, limits: str, **args: Any) -> Any:
    return tool_result(make_agent, ollama, limits, "search_files", **args)


def listed(make_agent: MakeAgent, ollama: FakeOllama, limits: str, **args: Any) -> Any:
    return tool_result(make_agent, ollama, limits, "list_directory", **args)


def wide_tree(root: Path, dirs: int, files: int, suffix: str = ".txt") -> int:
    """`dirs` directories of `files` files each; returns how many entries that is."""
    for d in range(dirs):
        sub = root / f"dir{d:03}"
        sub.mkdir()
        for f in range(files):
            (sub / f"file{f:03}{suffix}").write_text("needle\n")
    return dirs * (files + 1)


def test_attack_hangs_and_tracebacks_search_filter_matches_nothing(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    total = wide_tree(workspace, dirs=30, files=20)
    yaml = ", max_search_files: 100"
    result = searched(make_agent, ollama, yaml, path=".", query="needle", file_extensions=[".py"])
    assert result["truncated"] is True and "max_search_files" in result["note"]
    assert result["results"] == [] and result["files_scanned"] == 0
    assert result["entries_visited"] == 100 < total  # directories and skipped files counted
    # A tree within the cap is searched to the end and says so.
    yaml = f", max_search_files: {total}"
    result = searched(make_agent, ollama, yaml, path=".", query="needle", file_extensions=[".py"])
    assert result["entries_visited"] == total and result["truncated"] is False


def test_search_counts_hidden_and_noise_entries_too(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    for n in range(60):
        (workspace / f".hidden{n}").write_text("needle\n")
    (workspace / "node_modules").mkdir()
    for n in range(60):
        (workspace / "node_modules" / f"m{n}.js").write_text("needle\n")
    yaml = ", max_search_files: 50"
    result = searched(make_agent, ollama, yaml, path=".", query="needle")
    assert result["truncated"] is True and result["entries_visited"] == 50
    assert result["results"] == []


def test_attack_hangs_and_tracebacks_list_directory_cap(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    total = wide_tree(workspace, dirs=30, files=20)
    yaml = ", max_list_entries: 50"
    result = listed(make_agent, ollama, yaml, path=".", recursive=True, filter_extension=".py")
    assert result["truncated"] is True and "max_list_entries" in result["note"]
    assert result["entries_visited"] == 50 < total
    assert {e["type"] for e in result["entries"]} == {"directory"}  # no .py file: dirs only
    # Directories alone count as much as files: a tree of nothing but directories.
    (workspace / "only_dirs").mkdir()
    for n in range(100):
        (workspace / "only_dirs" / f"d{n:03}" / "inner").mkdir(parents=True)
    result = listed(make_agent, ollama, yaml, path="only_dirs", recursive=True)
    assert result["truncated"] is True
    assert result["entries_visited"] == result["total"] == 50
    # Within the cap: all of it, not truncated.
    everything = total + 1 + 100 * 2  # only_dirs, its directories and theirs
    yaml = f", max_list_entries: {everything}"
    result = listed(make_agent, ollama, yaml, path=".", recursive=True, filter_extension=".py")
    assert result["entries_visited"] == everything and result["truncated"] is False


# -- trees deeper than anyone should nest ---------------------------------------------------------

LEVELS = 2000


def deep_chain(top: Path, levels: int, files_at: dict[int, str]) -> None:
    """top/d/d/…/d, `levels` deep, built through dir fds (its paths are longer than PATH_MAX);
    files_at[depth] is a file name to create in the directory at that depth."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth in range(1, levels + 1):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if depth in files_at:
                made = os.open(files_at[depth], os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(made, b"needle\n")
                os.close(made)
    finally:
        os.close(fd)


def remove_chain(top: Path) -> None:
    """Take top/d/d/… apart one level at a time, without recursion and without one fd per
    level: empty top/d of its files, lift top/d/d into its place, repeat."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while "d" in os.listdir(fd):
            level = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            try:
                names = os.listdir(level)
                for name in names:
                    if name != "d":
                        os.unlink(name, dir_fd=level)
                if "d" in names:
                    os.rename("d", "lifted", src_dir_fd=level, dst_dir_fd=fd)
            finally:
                os.close(level)
            os.rmdir("d", dir_fd=fd)
            if "lifted" in os.listdir(fd):
                os.rename("lifted", "d", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


@pytest.fixture
def deep_tree(workspace: Path) -> Iterator[Path]:
    top = workspace / "deep"
    top.mkdir()
    deep_chain(top, LEVELS, {10: "shallow.txt", LEVELS: "bottom.txt"})
    yield top
    remove_chain(top)


@pytest.fixture
def common_fd_limit() -> Iterator[None]:
    """The soft fd limit most desktops start processes with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_attack_hangs_and_tracebacks_deep_tree(
    make_agent: MakeAgent, ollama: FakeOllama, deep_tree: Path, common_fd_limit: None
) -> None:
    result = searched(make_agent, ollama, "", path="deep", query="needle")
    assert [r["path"] for r in result["results"]] == ["deep/" + "d/" * 10 + "shallow.txt"]
    assert result["truncated"] is True
    assert f"deeper than {MAX_WALK_DEPTH} levels" in result["note"]
    assert result["entries_visited"] == MAX_WALK_DEPTH + 1  # each level's dir, and one file

    result = listed(make_agent, ollama, "", path="deep", recursive=True, max_depth=LEVELS * 2)
    deepest = max(e["name"].count("/") + 1 for e in result["entries"])
    assert deepest == MAX_WALK_DEPTH
    assert result["truncated"] is True
    assert f"deeper than {MAX_WALK_DEPTH} levels" in result["note"]


def test_a_listing_as_deep_as_asked_is_not_truncated(
    make_agent: MakeAgent, ollama: FakeOllama, deep_tree: Path
) -> None:
    result = listed(make_agent, ollama, "", path="deep", recursive=True, max_depth=5)
    assert result["truncated"] is False and len(result["entries"]) == 5


# -- only offered tools run ------------------------------------------------------------------------


def test_attack_tools_not_offered_still_run(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    # A model without tool support, in native mode, gets no tools; it sends a call anyway.
    # The policy would allow the write (confirm: none), and the approver says yes. Written
    # as text, a call to a tool that was not offered is text, not a call (the answer).
    ollama.add_model("gemma:2b", ["completion"])
    write = {"path": "pwned.txt", "content": "model was here\n"}
    text_call = "<tool_call>" + json.dumps({"name": "write_file", "arguments": write})
    ollama.enqueue(
        reply(tool_calls=[tool_call("write_file", write)]),
        reply(text_call + "</tool_call>"),
    )
    harness = make_agent(
        "policy: {confirm: none}\nagent: {tool_mode: native}\n",
        model="gemma:2b",
        answers=[True] * 5,
    )
    events = harness.run("go")
    assert all("tools" not in body for body in ollama.chat_bodies)
    assert not (workspace / "pwned.txt").exists()
    assert harness.approver.requests == []  # refused before the policy or a person was asked
    refusals = tool_results(ollama.chat_bodies[-1])
    assert len(refusals) == 1
    assert refusals[0]["success"] is False
    assert "'write_file' was not offered" in refusals[0]["error"]
    assert "does not support tools" in refusals[0]["error"]
    assert events[-1].stop_reason == "answer" and text_call in events[-1].answer


def test_a_disabled_tool_is_refused_as_not_offered(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "keep.txt").write_text("keep\n")
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("delete_file", {"path": "keep.txt"}),
                tool_call("read_file", {"path": "keep.txt"}),
            ]
        ),
        reply('<tool_call>{"name": "delete_file", "arguments": {"path": "keep.txt"}}</tool_call>'),
        reply("ok"),
    )
    harness = make_agent("policy: {tools: {delete_file: deny}}\n", answers=[True] * 5)
    events = harness.run("go")
    offered = [t["function"]["name"] for t in ollama.chat_bodies[0]["tools"]]
    assert "delete_file" not in offered
    assert (workspace / "keep.txt").read_text() == "keep\n"
    first, read = tool_results(ollama.chat_bodies[-1])
    assert first["success"] is False
    assert "'delete_file' was not offered" in first["error"]
    assert "read_file" in first["hint"]  # what it may call instead
    assert read["success"] is True and read["content"] == "keep\n"  # offered: runs as ever
    # Written as text, a call to a tool that is not offered is text: the answer, not run.
    assert len(ollama.chat_bodies) == 2
    assert events[-1].stop_reason == "answer" and "delete_file" in events[-1].answer
