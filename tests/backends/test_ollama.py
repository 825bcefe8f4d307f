"""OllamaClient against the fake Ollama server: request shape, streaming, tool calls, errors.

No mocks of our own code: the real client talks HTTP to a real (threaded, local) server that
speaks Ollama's NDJSON protocol. The only injected piece is `sleep`, recorded so the 503
backoff neither waits nor goes unseen.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

import cli.backends.messages
from cli.backends.messages import ChatChunk, ChatRequest, Stats, ToolCall
from cli.backends.ollama import BUSY_RETRIES, OllamaClient
from cli.backends.ollama_dialect import parse_chunk, parse_tool_call
from cli.errors import (
    BackendError,
    ModelNotFound,
    ModelUnsupported,
    ServerTimeout,
    ServerUnreachable,
    StreamError,
)
from tests.conftest import MESSAGES, TOOLS, RecordingSleep
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, reply, tool_call

MODEL = "qwen3:8b"  # the fake knows this one from the start
MakeClient = Callable[..., OllamaClient]


@pytest.fixture
def make_client(ollama: FakeOllama, sleeps: RecordingSleep) -> Iterator[MakeClient]:
    """A client on its own session (closed at teardown), sleeping through `sleeps`."""
    sessions: list[requests.Session] = []

    def make(
        host: str | None = None, *, timeout: float = 10.0, api_key: str | None = None
    ) -> OllamaClient:
        session = requests.Session()
        sessions.append(session)
        return OllamaClient(
            host or ollama.url, session=session, timeout=timeout, api_key=api_key, sleep=sleeps
        )

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def client(make_client: MakeClient) -> OllamaClient:
    return make_client()


def request(**kwargs: Any) -> ChatRequest:
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("messages", MESSAGES)
    return ChatRequest(**kwargs)


def chat(client: OllamaClient, **kwargs: Any) -> list[ChatChunk]:
    return list(client.chat(request(**kwargs)))


def line(message: dict[str, Any] | None = None, *, done: bool = False, **extra: Any) -> dict:
    """One raw NDJSON object as Ollama streams it."""
    data: dict[str, Any] = {
        "model": MODEL,
        "created_at": "2026-11-29T12:00:00Z",
        "message": {"role": "assistant", "content": "", **(message or {})},
        "done": done,
    }
    if done:
        data.setdefault("done_reason", "stop")
    data.update(extra)
    return data


def assert_one_line(err: BaseException) -> None:
    text = str(err)
    assert text, "an error must say something"
    assert "\n" not in text and "\r" not in text, f"multi-line error message: {text!r}"
    if isinstance(err, BackendError):
        assert err.message == text


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- request shape -------------------------------------------------------------------------


def test_chat_body_has_model_messages_stream_and_options(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(reply("hi"))
    options = {"num_ctx": 8192, "temperature": 0.2, "stop": ["</end>"]}
    chat(client, options=options)
    assert len(ollama.chat_bodies) == 1
    body = ollama.chat_bodies[0]
    assert body["model"] == MODEL
    assert body["messages"] == MESSAGES
    assert body["stream"] is True
    assert body["options"] == options
    recorded = [r for r in ollama.requests if r.path == "/api/chat"]
    assert recorded[0].method == "POST"


def test_chat_body_omits_tools_think_and_keep_alive_by_default(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(reply("hi"))
    chat(client)
    body = ollama.chat_bodies[0]
    assert "tools" not in body
    assert "think" not in body
    assert "keep_alive" not in body
    assert body["options"] == {}


def test_chat_body_sends_tools_when_given(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply("hi"))
    chat(client, tools=TOOLS)
    assert ollama.chat_bodies[0]["tools"] == TOOLS


def test_chat_body_omits_empty_tools(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply("hi"))
    chat(client, tools=[])
    assert "tools" not in ollama.chat_bodies[0]


@pytest.mark.parametrize("think", [True, False])
def test_chat_body_sends_think_as_given(
    ollama: FakeOllama, client: OllamaClient, think: bool
) -> None:
    ollama.enqueue(reply("hi"))
    chat(client, think=think)
    assert ollama.chat_bodies[0]["think"] is think


@pytest.mark.parametrize("keep_alive", ["10m", 0, 300])
def test_chat_body_sends_keep_alive_when_given(
    ollama: FakeOllama, client: OllamaClient, keep_alive: str | int
) -> None:
    ollama.enqueue(reply("hi"))
    chat(client, keep_alive=keep_alive)
    assert ollama.chat_bodies[0]["keep_alive"] == keep_alive
    assert type(ollama.chat_bodies[0]["keep_alive"]) is type(keep_alive)


def _header(ollama: FakeOllama, name: str) -> str | None:
    headers = {k.lower(): v for k, v in ollama.requests[-1].headers.items()}
    return headers.get(name.lower())


def test_api_key_sends_bearer_authorization(ollama: FakeOllama, make_client: MakeClient) -> None:
    ollama.enqueue(reply("hi"))
    chat(make_client(api_key="sekrit-123"))
    assert _header(ollama, "Authorization") == "Bearer sekrit-123"
    make_client(api_key="sekrit-123").version()
    assert _header(ollama, "Authorization") == "Bearer sekrit-123"


def test_no_api_key_sends_no_authorization(ollama: FakeOllama, make_client: MakeClient) -> None:
    ollama.enqueue(reply("hi"))
    chat(make_client())
    assert _header(ollama, "Authorization") is None
    make_client(api_key="").version()
    assert _header(ollama, "Authorization") is None


def test_trailing_slash_in_host_is_dropped(ollama: FakeOllama, make_client: MakeClient) -> None:
    client = make_client(ollama.url + "/")
    assert client.host == ollama.url
    assert client.version() == ollama.version
    assert ollama.requests[-1].path == "/api/version"


def test_chat_is_lazy_until_iterated(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply("hi"))
    stream = client.chat(request())
    assert ollama.chat_bodies == []
    assert next(stream).content == "hi"
    assert len(ollama.chat_bodies) == 1


# -- accumulation --------------------------------------------------------------------------


def test_content_chunks_arrive_in_order(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply("Hello, world!", token=3))
    chunks = chat(client)
    assert [c.content for c in chunks] == ["Hel", "lo,", " wo", "rld", "!", ""]
    assert [c.done for c in chunks] == [False] * 5 + [True]
    assert all(c.stats is None and c.done_reason is None for c in chunks[:-1])


def test_thinking_then_content_chunks_arrive_in_order(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(reply("The answer.", thinking="Let me think.", token=5))
    chunks = chat(client)
    assert [c.thinking for c in chunks] == ["Let m", "e thi", "nk.", "", "", "", ""]
    assert [c.content for c in chunks] == ["", "", "", "The a", "nswer", ".", ""]
    assert "".join(c.thinking for c in chunks) == "Let me think."
    assert "".join(c.content for c in chunks) == "The answer."


def test_final_chunk_carries_done_reason_and_stats(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(reply("x", done_reason="length", eval_count=50, prompt_eval_count=321))
    final = chat(client)[-1]
    assert final.done is True
    assert final.done_reason == "length"
    assert final.stats == Stats(
        prompt_eval_count=321,
        eval_count=50,
        eval_duration=1_000_000_000,
        prompt_eval_duration=200_000_000,
        load_duration=10_000_000,
        total_duration=1_500_000_000,
    )


def test_stats_tokens_per_second(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply("x", eval_count=50))
    stats = chat(client)[-1].stats
    assert stats is not None
    assert stats.tokens_per_second == pytest.approx(50.0)
    assert Stats(eval_count=30, eval_duration=2_000_000_000).tokens_per_second == 15.0
    assert Stats(eval_count=30, eval_duration=0).tokens_per_second == 0.0


def test_chunk_with_thinking_and_content_together(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"thinking": "t", "content": "c"}), line(done=True)]))
    first = chat(client)[0]
    assert (first.thinking, first.content) == ("t", "c")


def test_line_split_across_network_chunks_is_reassembled(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    """A UTF-8 character cut between two TCP chunks must come out whole."""
    raw = json.dumps(line({"content": "héllo ✓"}), ensure_ascii=False).encode() + b"\n"
    cut = raw.index("✓".encode()) + 1  # in the middle of the three-byte character
    ollama.enqueue(Stream([raw[:cut], raw[cut:], line(done=True)], delay=0.05))
    chunks = chat(client)
    assert chunks[0].content == "héllo ✓"
    assert chunks[-1].done


def test_final_line_without_newline_is_still_read(ollama: FakeOllama, client: OllamaClient) -> None:
    final = json.dumps(line({"content": "end"}, done=True, eval_count=7)).encode()
    ollama.enqueue(Stream([line({"content": "a"}), final]))
    chunks = chat(client)
    assert [c.content for c in chunks] == ["a", "end"]
    assert chunks[-1].done and chunks[-1].stats is not None
    assert chunks[-1].stats.eval_count == 7


def test_blank_lines_are_skipped(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([b"\n", line({"content": "a"}), b"  \n", line(done=True)]))
    chunks = chat(client)
    assert [c.content for c in chunks] == ["a", ""]


def test_nothing_after_the_done_line_is_read(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"content": "a"}), line(done=True), b"garbage after done\n"]))
    chunks = chat(client)
    assert [c.done for c in chunks] == [False, True]


# -- tool calls ----------------------------------------------------------------------------


def _calls(chunks: list[ChatChunk]) -> list[ToolCall]:
    return [call for chunk in chunks for call in chunk.tool_calls]


def test_tool_call_in_a_middle_chunk(ollama: FakeOllama, client: OllamaClient) -> None:
    call = tool_call("read_file", {"path": "a.txt"}, call_id="call_1")
    ollama.enqueue(reply("ok", tool_calls=[call]))
    chunks = chat(client, tools=TOOLS)
    carriers = [i for i, c in enumerate(chunks) if c.tool_calls]
    assert carriers == [len(chunks) - 2]
    assert not chunks[-1].tool_calls
    assert _calls(chunks) == [ToolCall("read_file", {"path": "a.txt"}, "call_1")]
    assert chunks[-1].done_reason == "stop"


def test_tool_call_only_in_the_final_done_chunk(ollama: FakeOllama, client: OllamaClient) -> None:
    call = tool_call("read_file", {"path": "b.txt"})
    ollama.enqueue(reply(tool_calls=[call], calls_in_final=True))
    chunks = chat(client, tools=TOOLS)
    assert len(chunks) == 1
    assert chunks[0].done
    assert chunks[0].tool_calls == (ToolCall("read_file", {"path": "b.txt"}),)
    assert chunks[0].stats is not None


def test_several_calls_in_one_chunk_keep_order(ollama: FakeOllama, client: OllamaClient) -> None:
    calls = [
        tool_call("read_file", {"path": "z"}, index=0),
        tool_call("list_dir", {"path": "."}, index=0),  # some models send all with index 0
        tool_call("grep", {"pattern": "x"}, index=0),
    ]
    ollama.enqueue(reply(tool_calls=calls))
    names = [c.name for c in _calls(chat(client, tools=TOOLS))]
    assert names == ["read_file", "list_dir", "grep"]


def test_calls_across_two_chunks_keep_arrival_order(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(
        Stream(
            [
                line({"tool_calls": [tool_call("second_by_index", {}, index=1)]}),
                line({"content": "between"}),
                line({"tool_calls": [tool_call("first_by_index", {}, index=0)]}, done=True),
            ]
        )
    )
    names = [c.name for c in _calls(chat(client, tools=TOOLS))]
    assert names == ["second_by_index", "first_by_index"]


def test_string_arguments_are_parsed(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", '{"path": "c.txt", "limit": 5}')]))
    (call,) = _calls(chat(client, tools=TOOLS))
    assert call.arguments == {"path": "c.txt", "limit": 5}
    assert call.arguments_error is None
    assert call.to_message()["function"]["arguments"] == {"path": "c.txt", "limit": 5}


def test_unparseable_string_arguments_give_arguments_error(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    bad = '{"path": "c.txt",'
    ollama.enqueue(reply(tool_calls=[tool_call("read_file", bad, call_id="call_9")]))
    (call,) = _calls(chat(client, tools=TOOLS))
    assert call.name == "read_file"
    assert call.id == "call_9"
    assert call.arguments == {}
    assert call.arguments_error is not None
    assert "JSON" in call.arguments_error
    assert call.to_message()["function"]["arguments"] == {}


def test_tool_call_id_is_kept(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(
        reply(
            tool_calls=[
                tool_call("a", {}, call_id="call_k3x9p2ab"),
                tool_call("b", {}),
            ]
        )
    )
    calls = _calls(chat(client, tools=TOOLS))
    assert [c.id for c in calls] == ["call_k3x9p2ab", None]
    assert calls[0].to_message() == {
        "function": {"name": "a", "arguments": {}},
        "id": "call_k3x9p2ab",
    }
    assert "id" not in calls[1].to_message()


@pytest.mark.parametrize("arguments", ["missing", None, ""])
def test_missing_or_null_arguments_become_empty_object(
    ollama: FakeOllama, client: OllamaClient, arguments: Any
) -> None:
    raw: dict[str, Any] = {"function": {"index": 0, "name": "list_dir"}}
    if arguments != "missing":
        raw["function"]["arguments"] = arguments
    ollama.enqueue(Stream([line({"tool_calls": [raw]}), line(done=True)]))
    (call,) = _calls(chat(client, tools=TOOLS))
    assert call == ToolCall("list_dir", {})
    assert call.to_message() == {"function": {"name": "list_dir", "arguments": {}}}


@pytest.mark.parametrize(
    "arguments",
    [{"path": "x"}, '{"path": "x"}', "not json", "[1, 2]", [1, 2], 42, None],
)
def test_to_message_always_has_object_arguments(arguments: Any) -> None:
    call = parse_tool_call({"function": {"name": "read_file", "arguments": arguments}})
    function = call.to_message()["function"]
    assert function["name"] == "read_file"
    assert isinstance(function["arguments"], dict)
    json.dumps(call.to_message())  # goes back to the server as is


def test_to_message_copies_arguments() -> None:
    call = parse_tool_call({"function": {"name": "f", "arguments": {"a": 1}}})
    message = call.to_message()
    message["function"]["arguments"]["a"] = 2
    assert call.arguments == {"a": 1}


# -- streaming really streams --------------------------------------------------------------


def test_first_chunk_arrives_before_the_stream_ends(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(reply("abcdefghijklmnopqrst", token=4, delay=0.2))  # 5 content + final
    start = time.monotonic()
    arrivals: list[float] = []
    for _ in client.chat(request()):
        arrivals.append(time.monotonic() - start)
    total = time.monotonic() - start
    assert len(arrivals) == 6
    assert total >= 0.8  # the server really paced the lines
    assert arrivals[0] < total / 2
    assert arrivals == sorted(arrivals)
    assert arrivals[2] < total * 0.75  # chunks keep trickling in, not in one burst at the end


def test_consumer_can_stop_early(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"content": "tick"})], endless=True), reply("after"))
    stream = client.chat(request())
    first = [next(stream) for _ in range(3)]
    stream.close()
    assert [c.content for c in first] == ["tick"] * 3
    # the client (and the server) are still usable afterwards
    assert "".join(c.content for c in chat(client)) == "after"


# -- errors: connection ----------------------------------------------------------------------


def test_unreachable_server(make_client: MakeClient) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    client = make_client(host)
    with pytest.raises(ServerUnreachable) as info:
        chat(client)
    message = str(info.value)
    assert host in message
    assert "ollama serve" in message
    assert "OLLAMA_HOST" in message
    assert_one_line(info.value)
    with pytest.raises(ServerUnreachable):
        client.list_models()
    with pytest.raises(ServerUnreachable):
        client.model_info(MODEL)


def test_connection_dropped_mid_stream(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"content": "par"}), line({"content": "tial"})], drop=True))
    received: list[str] = []
    with pytest.raises(StreamError) as info:
        for chunk in client.chat(request()):
            received.append(chunk.content)
    assert received == ["par", "tial"]
    assert "dropped" in str(info.value)
    assert ollama.url in str(info.value)
    assert_one_line(info.value)


def test_stream_ending_without_done_line(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"content": "a"}), line({"content": "b"})]))
    received: list[str] = []
    with pytest.raises(StreamError) as info:
        for chunk in client.chat(request()):
            received.append(chunk.content)
    assert received == ["a", "b"]
    assert "ended before the answer was complete" in str(info.value)
    assert_one_line(info.value)


def test_empty_stream_is_an_error(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([]))
    with pytest.raises(StreamError, match="ended before"):
        chat(client)


def test_read_timeout_mid_stream(ollama: FakeOllama, make_client: MakeClient) -> None:
    client = make_client(timeout=0.5)
    stall = 3.0
    ollama.enqueue(Stream([line({"content": "slow"})], stall=stall))
    received: list[str] = []
    start = time.monotonic()
    with pytest.raises(ServerTimeout) as info:
        for chunk in client.chat(request()):
            received.append(chunk.content)
    elapsed = time.monotonic() - start
    assert received == ["slow"]
    assert elapsed < stall / 2, f"gave up after {elapsed:.2f}s: the stall, not the timeout"
    message = str(info.value)
    assert "ollama.timeout" in message
    assert "0.5 s" in message
    assert_one_line(info.value)


def test_read_timeout_before_first_line(ollama: FakeOllama, make_client: MakeClient) -> None:
    client = make_client(timeout=0.5)
    ollama.enqueue(Stream([], stall=3.0))
    start = time.monotonic()
    with pytest.raises(ServerTimeout, match=r"ollama\.timeout"):
        chat(client)
    assert time.monotonic() - start < 1.5


# -- errors: HTTP status ---------------------------------------------------------------------


def test_unknown_model_from_chat(ollama: FakeOllama, client: OllamaClient) -> None:
    with pytest.raises(ModelNotFound) as info:
        chat(client, model="nosuch:7b")
    message = str(info.value)
    assert "ollama pull nosuch:7b" in message
    assert "'nosuch:7b'" in message
    assert_one_line(info.value)
    assert ollama.chat_bodies[0]["model"] == "nosuch:7b"


def test_unknown_model_from_model_info(client: OllamaClient) -> None:
    with pytest.raises(ModelNotFound) as info:
        client.model_info("ghost:1b")
    assert "ollama pull ghost:1b" in str(info.value)
    assert_one_line(info.value)


def test_404_with_old_wording_is_still_model_not_found(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(HttpError(404, "model 'qwen3:8b' not found, try pulling it first"))
    with pytest.raises(ModelNotFound, match=r"ollama pull qwen3:8b"):
        chat(client)


def test_model_without_tool_support(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(400, "registry.ollama.ai/library/qwen3:8b does not support tools"))
    with pytest.raises(ModelUnsupported) as info:
        chat(client, tools=TOOLS)
    assert "does not support tools" in str(info.value)
    assert MODEL in str(info.value)
    assert_one_line(info.value)


def test_model_without_thinking_support(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(400, '"qwen3:8b" does not support thinking'))
    with pytest.raises(ModelUnsupported) as info:
        chat(client, think=True)
    assert "does not support thinking" in str(info.value)
    assert "--think" in str(info.value)
    assert_one_line(info.value)


def test_embedding_model_cannot_chat(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(400, '"qwen3:8b" does not support chat'))
    with pytest.raises(ModelUnsupported, match="cannot chat"):
        chat(client)


def test_other_400_is_a_plain_ollama_error(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(400, "missing request body"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert type(info.value) is BackendError
    assert "missing request body" in str(info.value)
    assert "400" in str(info.value)


def test_http_500_with_json_error(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(500, "boom"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert type(info.value) is BackendError
    assert "boom" in str(info.value)
    assert "500" in str(info.value)
    assert ollama.url in str(info.value)
    assert_one_line(info.value)


def test_http_error_with_openai_style_error_object(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    body = json.dumps({"error": {"message": "quota exceeded", "type": "x"}}).encode()
    ollama.enqueue(HttpError(429, body=body))
    with pytest.raises(BackendError, match="HTTP 429: quota exceeded"):
        chat(client)


def test_http_error_with_non_json_body(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(502, body=b"upstream proxy failure"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "502" in str(info.value)
    assert "upstream proxy failure" in str(info.value)
    assert_one_line(info.value)


def test_http_error_with_empty_body_uses_reason(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(502, body=b""))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "HTTP 502" in str(info.value)
    assert "Bad Gateway" in str(info.value)


def test_http_error_with_long_body_is_truncated(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(HttpError(500, body=b"x" * 5000))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "x" * 200 in str(info.value)
    assert len(str(info.value)) < 400


def test_http_error_with_multiline_html_body_is_one_line(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    page = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body>\r\n</html>"
    ollama.enqueue(HttpError(502, body=page))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "502" in str(info.value)
    assert_one_line(info.value)


def test_http_error_with_multiline_json_error_is_one_line(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.enqueue(HttpError(500, "llama runner process has terminated:\nexit status 2"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "exit status 2" in str(info.value)
    assert_one_line(info.value)


# -- errors: 503 busy and retries ------------------------------------------------------------


BUSY = "server busy, please try again.  maximum pending requests exceeded"


def test_503_is_retried_with_backoff(
    ollama: FakeOllama, client: OllamaClient, sleeps: RecordingSleep
) -> None:
    ollama.enqueue(HttpError(503, BUSY), HttpError(503, BUSY), reply("finally"))
    chunks = chat(client)
    assert "".join(c.content for c in chunks) == "finally"
    assert chunks[-1].done
    assert len(ollama.chat_bodies) == 3
    assert sleeps.calls == [0.5, 1.0]
    assert ollama.pending == 0


def test_503_every_time_gives_up_after_retries(
    ollama: FakeOllama, client: OllamaClient, sleeps: RecordingSleep
) -> None:
    ollama.enqueue(*[HttpError(503, BUSY) for _ in range(BUSY_RETRIES + 2)])
    with pytest.raises(BackendError) as info:
        chat(client)
    message = str(info.value)
    assert "busy" in message
    assert f"tried {BUSY_RETRIES + 1} times" in message
    assert_one_line(info.value)
    assert len(ollama.chat_bodies) == BUSY_RETRIES + 1
    assert ollama.pending == 1  # it stopped asking
    assert len(sleeps.calls) == BUSY_RETRIES
    assert sleeps.calls == sorted(sleeps.calls)
    assert all(a < b for a, b in zip(sleeps.calls, sleeps.calls[1:], strict=False))


def test_non_503_errors_are_not_retried(
    ollama: FakeOllama, client: OllamaClient, sleeps: RecordingSleep
) -> None:
    ollama.enqueue(HttpError(500, "boom"), reply("never"))
    with pytest.raises(BackendError):
        chat(client)
    assert len(ollama.chat_bodies) == 1
    assert sleeps.calls == []


# -- errors: mid-stream ----------------------------------------------------------------------


def test_error_line_mid_stream(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(
        Stream(
            [
                line({"content": "I will"}),
                {"error": "failed to parse JSON: unexpected end of JSON input"},
            ]
        )
    )
    received: list[str] = []
    with pytest.raises(StreamError) as info:
        for chunk in client.chat(request()):
            received.append(chunk.content)
    assert received == ["I will"]
    assert "failed to parse JSON: unexpected end of JSON input" in str(info.value)
    assert "mid-stream" in str(info.value)
    assert_one_line(info.value)


def test_multiline_error_line_mid_stream_is_one_line(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    # Ollama's "error parsing tool call: raw='...'" quotes the model's raw output.
    ollama.enqueue(Stream([{"error": 'error parsing tool call: raw=\'{\n  "name": "read\''}]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "error parsing tool call" in str(info.value)
    assert_one_line(info.value)


def test_undecodable_line(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([line({"content": "a"}), b"<html>not json</html>\n", line(done=True)]))
    received: list[str] = []
    with pytest.raises(StreamError) as info:
        for chunk in client.chat(request()):
            received.append(chunk.content)
    assert received == ["a"]
    assert "not JSON" in str(info.value)
    assert "<html>not json" in str(info.value)
    assert_one_line(info.value)


def test_binary_garbage_line(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.enqueue(Stream([b"\xff\xfe\x00\x01garbage\r\n"]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "not JSON" in str(info.value)
    assert_one_line(info.value)


@pytest.mark.parametrize("raw", [b"[1, 2]\n", b'"text"\n', b"42\n", b"null\n"])
def test_line_that_is_not_an_object(ollama: FakeOllama, client: OllamaClient, raw: bytes) -> None:
    ollama.enqueue(Stream([raw, line(done=True)]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "not a JSON object" in str(info.value)
    assert_one_line(info.value)


def test_oversized_line_growing_without_newline(
    ollama: FakeOllama, client: OllamaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.backends.messages, "MAX_LINE_BYTES", 1024)
    piece = b"x" * 300
    ollama.enqueue(Stream([b'{"message": {"content": "', *([piece] * 10)], delay=0.02))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "longer than" in str(info.value)
    assert_one_line(info.value)


def test_line_just_under_the_limit_is_accepted(
    ollama: FakeOllama, client: OllamaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.backends.messages, "MAX_LINE_BYTES", 4096)
    content = "y" * 2000
    raw = json.dumps(line({"content": content})).encode()
    ollama.enqueue(Stream([raw[:1000], raw[1000:] + b"\n", line(done=True)], delay=0.02))
    assert chat(client)[0].content == content


def test_oversized_complete_line_is_rejected(
    ollama: FakeOllama, client: OllamaClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli.backends.messages, "MAX_LINE_BYTES", 1024)
    big = json.dumps(line({"content": "z" * 4000})).encode() + b"\n"  # one chunk, one read
    ollama.enqueue(Stream([big, line(done=True)]))
    with pytest.raises(StreamError, match="longer than"):
        chat(client)


# -- other endpoints -----------------------------------------------------------------------


def test_list_models_sorted(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.add_model("zephyr:7b")
    ollama.add_model("llama3.1:8b")
    ollama.add_model("gemma3:4b")
    assert client.list_models() == ["gemma3:4b", "llama3.1:8b", MODEL, "zephyr:7b"]
    assert ollama.requests[-1].method == "GET"
    assert ollama.requests[-1].path == "/api/tags"


def test_model_info_capabilities_and_context_length(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    info = client.model_info(MODEL)
    assert info.name == MODEL
    assert info.supports_tools
    assert info.supports_thinking
    assert info.context_length == 40960
    recorded = ollama.requests[-1]
    assert (recorded.method, recorded.path, recorded.body) == (
        "POST",
        "/api/show",
        {"model": MODEL},
    )


def test_model_info_without_tools_or_thinking(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.add_model("tiny:1b", ["completion"], context_length=2048)
    info = client.model_info("tiny:1b")
    assert info.capabilities == frozenset({"completion"})
    assert not info.supports_tools
    assert not info.supports_thinking
    assert info.context_length == 2048


def test_version(ollama: FakeOllama, client: OllamaClient) -> None:
    ollama.version = "0.41.2"
    assert client.version() == "0.41.2"
    assert ollama.requests[-1].path == "/api/version"


def test_non_ollama_json_endpoint_is_reported(make_client: MakeClient, ollama: FakeOllama) -> None:
    # GET /api/tags on something that answers 404 for it: a plain BackendError with the status.
    client = make_client(ollama.url + "/not-ollama")
    with pytest.raises(BackendError) as info:
        client.list_models()
    assert "404" in str(info.value)
    assert_one_line(info.value)


# -- parse_chunk / parse_tool_call ---------------------------------------------------------


def test_parse_chunk_without_message() -> None:
    chunk = parse_chunk({"done": False})
    assert chunk == ChatChunk()


@pytest.mark.parametrize("message", [None, "text", ["a"], 3])
def test_parse_chunk_message_not_an_object(message: Any) -> None:
    chunk = parse_chunk({"message": message, "done": False})
    assert (chunk.content, chunk.thinking, chunk.tool_calls) == ("", "", ())


@pytest.mark.parametrize("content", [None, 5, ["a"], {"text": "a"}, True])
def test_parse_chunk_content_not_a_string(content: Any) -> None:
    chunk = parse_chunk({"message": {"content": content, "thinking": content}})
    assert chunk.content == ""
    assert chunk.thinking == ""


@pytest.mark.parametrize("tool_calls", [None, "read_file", {"function": {"name": "x"}}, 1])
def test_parse_chunk_tool_calls_not_a_list(tool_calls: Any) -> None:
    chunk = parse_chunk({"message": {"content": "c", "tool_calls": tool_calls}})
    assert chunk.tool_calls == ()
    assert chunk.content == "c"


def test_parse_chunk_done_without_stats() -> None:
    chunk = parse_chunk({"done": True})
    assert chunk.done
    assert chunk.done_reason is None
    assert chunk.stats == Stats()


def test_parse_chunk_odd_stat_values_become_zero() -> None:
    chunk = parse_chunk(
        {"done": True, "eval_count": "12", "eval_duration": True, "total_duration": 9.5}
    )
    assert chunk.stats == Stats()


def test_parse_chunk_not_done_ignores_done_reason_and_stats() -> None:
    chunk = parse_chunk({"done": False, "done_reason": "stop", "eval_count": 3})
    assert chunk.done_reason is None
    assert chunk.stats is None


def test_parse_chunk_keeps_non_object_tool_call_as_error() -> None:
    chunk = parse_chunk({"message": {"tool_calls": ["oops", tool_call("ok", {"a": 1})]}})
    assert [c.name for c in chunk.tool_calls] == ["", "ok"]
    assert chunk.tool_calls[0].arguments_error == "the tool call is not an object"
    assert chunk.tool_calls[1].arguments == {"a": 1}


def test_parse_tool_call_flat_shape_without_function_wrapper() -> None:
    call = parse_tool_call({"name": "grep", "arguments": {"pattern": "x"}, "id": "c1"})
    assert call == ToolCall("grep", {"pattern": "x"}, "c1")


@pytest.mark.parametrize("raw", [None, "read_file", 3, ["read_file"]])
def test_parse_tool_call_not_an_object(raw: Any) -> None:
    call = parse_tool_call(raw)
    assert call.name == ""
    assert call.arguments == {}
    assert call.arguments_error is not None


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "3", [1, 2], 7, "true"])
def test_parse_tool_call_arguments_not_an_object(arguments: Any) -> None:
    call = parse_tool_call({"function": {"name": "f", "arguments": arguments}, "id": "c"})
    assert call.arguments == {}
    assert call.id == "c"
    assert call.arguments_error == "arguments must be a JSON object"


def test_parse_tool_call_odd_name_and_id() -> None:
    call = parse_tool_call({"id": 17, "function": {"name": 5, "arguments": {}}})
    assert call.name == ""
    assert call.id is None
    assert call.arguments_error is None


def test_parse_tool_call_whitespace_string_arguments() -> None:
    assert parse_tool_call({"function": {"name": "f", "arguments": "  \n"}}) == ToolCall("f", {})


# -- added with the fake server's header_delay, show_errors and old-server modes ------------------


def test_read_timeout_before_the_headers(ollama: FakeOllama, make_client: MakeClient) -> None:
    ollama.enqueue(HttpError(200, header_delay=3))
    client = make_client(timeout=0.5)
    started = time.monotonic()
    with pytest.raises(ServerTimeout, match=r"ollama\.timeout"):
        list(client.chat(ChatRequest(model="qwen3:8b", messages=[])))
    assert time.monotonic() - started < 2.5


def test_503_on_show_is_retried(
    ollama: FakeOllama, make_client: MakeClient, sleeps: RecordingSleep
) -> None:
    ollama.show_errors.append(HttpError(503, "server busy, please try again."))
    info = make_client().model_info("qwen3:8b")
    assert info.supports_tools
    assert list(sleeps.calls) == [0.5]


def test_old_server_without_capabilities_is_assumed_to_do_tools(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    ollama.add_model("old:1", ["completion"], report_capabilities=False)
    info = client.model_info("old:1")
    assert info.supports_tools and not info.supports_thinking


def test_nan_in_arguments_is_an_error_the_model_can_fix() -> None:
    call = parse_tool_call({"function": {"name": "read_file", "arguments": '{"start_line": NaN}'}})
    assert call.arguments == {} and "NaN" in (call.arguments_error or "")
    call = parse_tool_call({"function": {"name": "read_file", "arguments": {"x": float("inf")}}})
    assert call.arguments == {} and call.arguments_error


# -- one connection for a whole turn -------------------------------------------------------


def test_steps_of_a_turn_share_one_connection(ollama: FakeOllama, client: OllamaClient) -> None:
    """The end of each stream is read after the done chunk, so the connection goes back to
    the pool: a 10-step turn opens one, not ten (each one more a round trip, and a TLS
    handshake for a remote server)."""
    for n in range(10):
        ollama.enqueue(reply(f"step {n}"))
        assert chat(client)[-1].done
    clients = {r.client for r in ollama.requests_to("/api/chat")}
    assert len(clients) == 1, clients


def test_a_stream_that_does_not_end_after_done_costs_at_most_a_fifth_of_a_second(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    """A server that sends its done chunk but holds the body open: the client waits 0.2 s
    for the end, then closes the connection as it did before, and the next call opens a
    new one."""
    stalled = reply("slow end")
    ollama.enqueue(Stream(stalled.lines, stall=3.0), reply("next"))
    started = time.monotonic()
    assert chat(client)[-1].done
    assert time.monotonic() - started < 2.0
    assert "".join(c.content for c in chat(client)) == "next"  # the next call works
    clients = [r.client for r in ollama.requests_to("/api/chat")]
    assert len(clients) == 2 and clients[0] != clients[1]


def test_a_server_that_goes_on_sending_after_done_is_cut_off_in_a_fifth_of_a_second(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    """After its done chunk the server keeps sending (every 10 ms, for ever): the wait for
    the stream's end is 0.2 s in all, not per read, and the next call opens a fresh
    connection."""
    ollama.enqueue(Stream(reply("then more").lines, endless=True), reply("next"))
    started = time.monotonic()
    assert chat(client)[-1].done
    assert time.monotonic() - started < 1.0
    assert "".join(c.content for c in chat(client)) == "next"
    clients = [r.client for r in ollama.requests_to("/api/chat")]
    assert len(clients) == 2 and clients[0] != clients[1]


@pytest.mark.parametrize("drip", [b"X-Trailer: 1\r\n", b"0"], ids=["trailer lines", "a size line"])
def test_a_body_end_that_drips_forever_is_cut_off_in_a_fifth_of_a_second(drip: bytes) -> None:
    """After the done chunk the server sends the body's end a few bytes every 0.1 s: trailer
    lines without the blank one, or a chunk-size line that never ends. One read of a chunked
    body takes all of it, and the socket's timeout is per recv: only the watchdog, running
    from before the first read, bounds the wait."""
    done = json.dumps({"message": {"role": "assistant", "content": "hi"}, "done": True})
    line = done.encode() + b"\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
    head += b"Transfer-Encoding: chunked\r\n\r\n"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                head + b"%x\r\n%s\r\n" % (len(line), line) + (b"0\r\n" if b":" in drip else b"")
            )
            ends = time.monotonic() + 5  # a client with no bound fails, not hangs
            with contextlib.suppress(OSError):
                while not stop.wait(0.1) and time.monotonic() < ends:
                    conn.sendall(drip)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = OllamaClient(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=30)
    try:
        started = time.monotonic()
        chunks = list(client.chat(ChatRequest(model="m", messages=MESSAGES)))
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
        server.close()
    assert chunks[-1].done and chunks[-1].content == "hi"
    assert took < 1.5, took


def test_a_kept_alive_connection_the_server_dropped_is_tried_once_more(
    ollama: FakeOllama, client: OllamaClient
) -> None:
    """The steps of a turn share a connection; a server that drops it between two steps
    (an idle close racing the next request) costs a new connection, not the turn."""
    ollama.reset_kept_alive = True
    ollama.enqueue(reply("one"), reply("two"))
    assert "".join(c.content for c in chat(client)) == "one"
    assert "".join(c.content for c in chat(client)) == "two"
    clients = [r.client for r in ollama.requests_to("/api/chat")]
    assert len(clients) == 2 and clients[0] != clients[1]
