"""Model misbehaviour as properties (hypothesis): whatever a confused or hostile model sends,
the loop does not crash, nothing outside the allowed dirs changes, and a stream split
differently assembles the same message."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.backends.messages import ChatRequest
from cli.backends.ollama import OllamaClient
from cli.config.settings import TOOL_NAMES
from cli.errors import AgentError
from cli.loop.approval import Approval, ApprovalRequest
from tests.conftest import MakeAgent
from tests.fakes.fake_ollama import FakeOllama, Stream, reply, tool_call

# How many examples each property runs; the README's figures quote these.
LOOP_EXAMPLES = 300
SPLIT_EXAMPLES = 200


def examples(count: int) -> settings:
    return settings(
        max_examples=count,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        deadline=None,
        database=None,  # every run draws afresh; no state left in the checkout
    )


PARAMETER_NAMES = [
    "path", "content", "query", "recursive", "encoding", "start_line", "end_line",
    "max_depth", "include_hidden", "search_type", "max_results", "file_extensions",
    "command", "cwd", "timeout",
]  # fmt: skip


def outside_paths(outside: Path, home: Path) -> st.SearchStrategy[str]:
    """Paths a model might use to reach outside the workspace, and some ordinary ones."""
    names = st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
        min_size=1,
        max_size=12,
    )
    return st.one_of(
        st.sampled_from(
            [
                str(outside / "victim.txt"),
                str(outside),
                f"{outside}/sub/deep.txt",
                "../" * 12 + str(outside).lstrip("/") + "/victim.txt",
                "escape/victim.txt",  # a symlink in the workspace pointing outside
                "escape",
                "escape/../escape/victim.txt",
                "file-link",  # a symlink to the outside file
                "~/secret.txt",
                "~",
                "/proc/self/root" + str(outside) + "/victim.txt",
                ".",
                "./",
                "notes.txt",
                "new/dir/file.txt",
                "ünïcödé/文件.txt",
                "a" * 300,
                "trailing ",
                "'quoted.txt'",
                "nul\x00byte",
            ]
        ),
        names,
        st.builds(lambda a, b: f"{a}/{b}", names, names),
        st.builds(lambda a: f"../{a}", names),
    )


def argument_values(paths: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True),
        st.text(max_size=40), paths,
    )  # fmt: skip
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.text(max_size=5), scalars, max_size=3),
    )


def tool_calls(paths: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.one_of(st.sampled_from(TOOL_NAMES), st.text(max_size=20))
    keys = st.one_of(st.sampled_from(PARAMETER_NAMES), st.text(max_size=10))
    arguments = st.one_of(
        st.dictionaries(keys, argument_values(paths), max_size=5),
        st.fixed_dictionaries({"path": paths}),
        st.fixed_dictionaries({"path": paths, "content": st.text(max_size=50)}),
        st.fixed_dictionaries({"path": paths, "recursive": st.booleans()}),
        st.text(max_size=30),  # arguments sent as a (maybe broken) JSON string
    )
    return st.builds(lambda n, a: tool_call(n, a), names, arguments)


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below `root`: its kind and, for files, a hash of its content and mode."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                seen[str(path)] = "link:" + os.readlink(path)
            elif path.is_dir():
                seen[str(path)] = "dir"
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                seen[str(path)] = f"file:{digest}:{oct(path.stat().st_mode)}"
    return seen


def approve_everything(_request: ApprovalRequest) -> Approval:
    """The worst case: a user who says yes to every question."""
    return Approval(True, by="user")


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory, workspace: Path, home: Path) -> Path:
    root = tmp_path_factory.mktemp("outside")
    (root / "sub").mkdir()
    (root / "victim.txt").write_text("do not touch\n")
    (root / "sub" / "deep.txt").write_text("deep\n")
    (workspace / "escape").symlink_to(root)
    (workspace / "file-link").symlink_to(root / "victim.txt")
    (workspace / "notes.txt").write_text("inside\n")
    (home / "secret.txt").write_text("home secret\n")
    return root


@examples(LOOP_EXAMPLES)
@given(data=st.data())
def test_random_tool_calls_never_crash_nor_touch_outside(
    data: st.DataObject, make_agent: MakeAgent, ollama: FakeOllama, outside: Path, home: Path
) -> None:
    calls = data.draw(st.lists(tool_calls(outside_paths(outside, home)), min_size=1, max_size=6))
    before_outside, before_home = snapshot(outside), snapshot(home)
    # The fake outlives the examples (a function-scoped fixture): what an earlier example
    # left scripted or recorded must not be this one's.
    while ollama.pending:
        ollama.next_response()
    ollama.requests.clear()
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    harness = make_agent("policy: {confirm: all}\n")
    harness.agent.approver = approve_everything
    events = harness.run("go")  # raises if the loop crashed
    finished = events[-1]
    # Five identical failing calls in one step end the turn (cli/loop/guards.py STOP_AFTER): no
    # second request then.
    repeating = finished.stop_reason == "repeating"
    assert finished.answer == ("" if repeating else "done"), finished
    assert snapshot(outside) == before_outside
    # The agent's own state (journal, audit log) lives in home/.local: not the model's doing.
    ours = str(home / ".local")
    home_now = {k: v for k, v in snapshot(home).items() if not k.startswith(ours)}
    assert home_now == {k: v for k, v in before_home.items() if not k.startswith(ours)}
    # Every call got exactly one tool message, in order, and every result is an object.
    if repeating:
        assert len(ollama.chat_bodies) == 1
        return
    sent = [m for m in ollama.chat_bodies[-1]["messages"] if m["role"] == "tool"]
    assert len(ollama.chat_bodies) == 2 and len(sent) == len(calls)
    assert all(isinstance(json.loads(m["content"]), dict) for m in sent)


def ndjson(content: str, thinking: str, calls: list[dict[str, Any]], cuts: list[int]) -> bytes:
    """The answer as Ollama streams it, content and thinking cut at `cuts` into chunks."""
    lines: list[dict[str, Any]] = []
    base = {"model": "qwen3:8b", "created_at": "now", "done": False}
    for text, key in ((thinking, "thinking"), (content, "content")):
        points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
        for a, b in itertools.pairwise(points):
            lines.append({**base, "message": {"role": "assistant", "content": "", key: text[a:b]}})
    for call in calls:
        lines.append(
            {**base, "message": {"role": "assistant", "content": "", "tool_calls": [call]}}
        )
    lines.append(
        {
            **base,
            "done": True,
            "done_reason": "stop",
            "message": {"role": "assistant", "content": ""},
        }
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def pieces(data: bytes, cuts: list[int]) -> list[bytes | dict[str, Any]]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@examples(SPLIT_EXAMPLES)
@given(
    content=st.text(max_size=200),
    thinking=st.text(max_size=100),
    names=st.lists(st.sampled_from(["read_file", "list_directory", "nope"]), max_size=3),
    token_cuts=st.lists(st.integers(0, 400), max_size=30),
    split_a=st.lists(st.integers(0, 10_000), max_size=40),
    split_b=st.lists(st.integers(0, 10_000), max_size=40),
)
def test_a_stream_split_differently_assembles_the_same_message(
    ollama: FakeOllama,
    content: str,
    thinking: str,
    names: list[str],
    token_cuts: list[int],
    split_a: list[int],
    split_b: list[int],
) -> None:
    calls = [tool_call(n, {"path": f"f{i}.txt"}, call_id=f"call_{i}") for i, n in enumerate(names)]
    stream = ndjson(content, thinking, calls, token_cuts)
    client = OllamaClient(ollama.url)
    assembled = []
    for split in (split_a, split_b):
        ollama.enqueue(Stream(pieces(stream, split)))
        chunks = list(client.chat(ChatRequest(model="qwen3:8b", messages=[])))
        assembled.append(
            (
                "".join(c.content for c in chunks),
                "".join(c.thinking for c in chunks),
                [call for c in chunks for call in c.tool_calls],
                chunks[-1].done,
            )
        )
    assert assembled[0] == assembled[1]
    assert assembled[0][0] == content and assembled[0][1] == thinking
    assert [(c.name, c.id) for c in assembled[0][2]] == [
        (n, f"call_{i}") for i, n in enumerate(names)
    ]
    assert assembled[0][3] is True


def test_garbage_between_lines_is_an_error_never_a_crash(ollama: FakeOllama) -> None:
    for garbage in (b"\xff\xfe\n", b"{not json}\n", b"[1,2]\n", b'"text"\n', b"\x00" * 10 + b"\n"):
        ollama.enqueue(Stream([garbage]))
        with pytest.raises(AgentError):
            list(OllamaClient(ollama.url).chat(ChatRequest(model="qwen3:8b", messages=[])))


# -- reading a stream: lines and JSON as the standard library reads them -------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"")), max_size=12))
def test_split_lines_gives_the_lines_of_the_whole_body_however_it_is_cut(
    pieces: list[bytes],
) -> None:
    from cli.backends.messages import split_lines

    pieces = [p for p in pieces if p]  # a read never gives b""
    body = b"".join(pieces)
    expected = body.split(b"\n")
    got = list(split_lines(iter(pieces), 10**6))
    assert got == (expected if pieces else [])


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    ),
    st.sampled_from(["", " ", "\n", "\r\n", " x", "}"]),
)
def test_loads_json_reads_a_line_as_json_loads_does(value: object, tail: str) -> None:
    import json

    from cli.backends.messages import loads_json

    line = (json.dumps({"v": value}, ensure_ascii=False) + tail).encode("utf-8")
    try:
        expected: object = json.loads(line)
    except ValueError:
        expected = ValueError
    try:
        got: object = loads_json(line)
    except ValueError:
        got = ValueError
    assert got == expected


def test_five_identical_failing_calls_in_one_step_end_the_turn(
    make_agent: MakeAgent, ollama: FakeOllama
) -> None:
    """The case the property above allows for: the repeat guard stops the turn in its
    first step, so no second request is made, and the answer is empty."""
    calls = [tool_call("read_file", {})] * 6  # no path: invalid, five times and more
    ollama.enqueue(reply(tool_calls=calls), reply("done"))
    harness = make_agent("policy: {confirm: all}\n")
    harness.agent.approver = approve_everything
    finished = harness.run("go")[-1]
    assert (finished.stop_reason, finished.answer) == ("repeating", "")
    assert len(ollama.chat_bodies) == 1 and ollama.pending == 1
