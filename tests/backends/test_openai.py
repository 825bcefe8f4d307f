"""OpenAIClient against the fake OpenAI-compatible server: request shape, SSE streaming, tool
calls in fragments, servers that cannot stream tool calls, history, model checks, errors.

No mocks of our own code: the real client talks HTTP to a real (threaded, local) server that
speaks the /v1/chat/completions dialect. Injected: `sleep` (recorded, so backoff neither waits
nor goes unseen) and, where durations are checked, the clock.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from cli.backends.messages import MAX_LINE_BYTES, ChatChunk, ChatRequest, ToolCall
from cli.backends.openai import OpenAIClient, parse_arguments, wire_messages
from cli.backends.openai_models import ASSUMED_CAPABILITIES
from cli.backends.sending import BUSY_RETRIES
from cli.errors import (
    BackendError,
    ContextTooLong,
    ModelNotFound,
    ModelUnsupported,
    ServerTimeout,
    ServerUnreachable,
    StreamError,
)
from tests.conftest import MESSAGES, TOOLS, RecordingSleep
from tests.fakes.fake_openai import Answer, Call, Events, FakeOpenAI, HttpError, Json

MODEL = "qwen3:8b"  # the fake serves this one from the start
MakeClient = Callable[..., OpenAIClient]


@pytest.fixture
def make_client(openai: FakeOpenAI, sleeps: RecordingSleep) -> Iterator[MakeClient]:
    """A client on its own session (closed at teardown), sleeping through `sleeps`."""
    sessions: list[requests.Session] = []

    def make(base: str | None = None, **kwargs: Any) -> OpenAIClient:
        session = requests.Session()
        sessions.append(session)
        kwargs.setdefault("timeout", 10.0)
        return OpenAIClient(base or openai.url, session=session, sleep=sleeps, **kwargs)

    yield make
    for session in sessions:
        session.close()


@pytest.fixture
def client(make_client: MakeClient) -> OpenAIClient:
    return make_client()


def request(**kwargs: Any) -> ChatRequest:
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("messages", MESSAGES)
    return ChatRequest(**kwargs)


def chat(client: OpenAIClient, **kwargs: Any) -> list[ChatChunk]:
    return list(client.chat(request(**kwargs)))


def calls_of(chunks: list[ChatChunk]) -> list[ToolCall]:
    return [call for chunk in chunks for call in chunk.tool_calls]


def text_of(chunks: list[ChatChunk]) -> str:
    return "".join(chunk.content for chunk in chunks)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One raw SSE payload as servers stream it."""
    return {
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


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


def test_body_streams_with_usage_and_offers_tools_with_tool_choice_auto(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Answer("hi"))
    chat(client, tools=TOOLS)
    [body] = openai.chat_bodies
    assert body["model"] == MODEL
    assert body["messages"] == MESSAGES
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == "auto"  # llama-cpp-python never calls a tool without it
    [recorded] = [r for r in openai.requests if r.method == "POST"]
    assert recorded.path == "/v1/chat/completions"


def test_body_without_tools_has_no_tool_fields(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Answer("hi"))
    chat(client)
    body = openai.chat_bodies[0]
    assert "tools" not in body and "tool_choice" not in body


def test_options_are_mapped_and_the_rest_left_out(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Answer("hi"))
    options = {
        "num_ctx": 8192,  # the context size is the server's
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["</end>"],
        "num_predict": 256,
        "top_k": 40,
        "mirostat": 2,  # no meaning here
    }
    chat(client, options=options, keep_alive="5m")
    body = openai.chat_bodies[0]
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and body["seed"] == 7
    assert body["stop"] == ["</end>"] and body["max_tokens"] == 256 and body["top_k"] == 40
    for absent in ("num_ctx", "num_predict", "options", "mirostat", "keep_alive", "think"):
        assert absent not in body


@pytest.mark.parametrize("num_predict", [-1, -2, 0])
def test_unlimited_num_predict_sends_no_max_tokens(
    openai: FakeOpenAI, client: OpenAIClient, num_predict: int
) -> None:
    openai.enqueue(Answer("hi"))
    chat(client, options={"num_predict": num_predict})
    assert "max_tokens" not in openai.chat_bodies[0]


@pytest.mark.parametrize(
    ("think", "effort"),
    [("low", "low"), ("medium", "medium"), ("high", "high"), ("max", "high"), (True, None)],
)
def test_a_think_level_is_sent_as_reasoning_effort(
    openai: FakeOpenAI, client: OpenAIClient, think: Any, effort: str | None
) -> None:
    openai.enqueue(Answer("hi"))
    chat(client, think=think)
    body = openai.chat_bodies[0]
    assert body.get("reasoning_effort") == effort
    assert "think" not in body


def test_api_key_is_sent_as_bearer(openai: FakeOpenAI, make_client: MakeClient) -> None:
    openai.api_key = "sk-local"
    openai.enqueue(Answer("hi"))
    chat(make_client(api_key="sk-local"))
    headers = [r.headers for r in openai.requests]
    assert all(h.get("Authorization") == "Bearer sk-local" for h in headers)


def test_no_api_key_sends_no_authorization(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Answer("hi"))
    chat(client)
    assert "Authorization" not in openai.requests[0].headers


def test_trailing_slash_in_the_base_url_is_dropped(
    openai: FakeOpenAI, make_client: MakeClient
) -> None:
    openai.enqueue(Answer("hi"))
    client = make_client(openai.url + "/")
    assert client.host == openai.url
    chat(client)
    assert openai.requests[0].path == "/v1/chat/completions"


def test_chat_is_lazy_until_iterated(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Answer("hi"))
    stream = client.chat(request())
    assert openai.requests == []
    list(stream)
    assert len(openai.chat_bodies) == 1


# -- streaming -----------------------------------------------------------------------------


def test_content_arrives_in_order_and_the_done_chunk_is_last(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Answer("Hello, world. This is streamed.", token=3))
    chunks = chat(client)
    assert text_of(chunks) == "Hello, world. This is streamed."
    assert len([c for c in chunks if c.content]) > 5  # a delta at a time, not one piece
    assert [c.done for c in chunks].count(True) == 1 and chunks[-1].done
    assert chunks[-1].done_reason == "stop"


def test_first_delta_arrives_before_the_stream_ends(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Events([chunk({"content": "early"})], stall=3))
    stream = client.chat(request())
    first = next(stream)
    assert first.content == "early"
    stream.close()


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_from_either_reasoning_field(
    openai: FakeOpenAI, client: OpenAIClient, field: str
) -> None:
    openai.enqueue(Answer("Answer.", thinking="Let me think.", reasoning_field=field))
    chunks = chat(client)
    assert "".join(c.thinking for c in chunks) == "Let me think."
    assert text_of(chunks) == "Answer."
    first_thinking = next(i for i, c in enumerate(chunks) if c.thinking)
    first_content = next(i for i, c in enumerate(chunks) if c.content)
    assert first_thinking < first_content


def test_both_reasoning_fields_with_the_same_text_are_not_doubled(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Events(
            [
                chunk({"reasoning_content": "hmm", "reasoning": "hmm"}),
                chunk({"content": "ok"}, "stop"),
            ]
        )
    )
    chunks = chat(client)
    assert "".join(c.thinking for c in chunks) == "hmm"


def test_usage_in_the_last_chunk_becomes_stats(openai: FakeOpenAI, make_client: MakeClient) -> None:
    ticks = iter([0.0, 0.5, 2.0])  # request sent, first token, end

    openai.enqueue(Answer("Hi there", prompt_tokens=169, completion_tokens=15))
    chunks = chat(make_client(clock=lambda: next(ticks)))
    stats = chunks[-1].stats
    assert stats is not None
    assert stats.prompt_eval_count == 169 and stats.eval_count == 15
    assert stats.total_duration == 2_000_000_000
    assert stats.prompt_eval_duration == 500_000_000  # time to the first token
    assert stats.eval_duration == 1_500_000_000
    assert stats.tokens_per_second == pytest.approx(10.0)


def test_no_usage_counts_a_token_a_text_delta(openai: FakeOpenAI, client: OpenAIClient) -> None:
    # llama-cpp-python ignores stream_options: no usage chunk, one token per delta.
    openai.enqueue(Answer("Hi there you", usage=False, token=4))
    stats = chat(client)[-1].stats
    assert stats is not None and stats.prompt_eval_count == 0 and stats.eval_count == 3


def test_comments_blank_lines_and_other_fields_are_skipped(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Events(
            [
                b": ping - 2026-12-01\n\n",
                b"event: message\nid: 1\nretry: 100\n",
                b"data: " + json.dumps(chunk({"content": "a"})).encode() + b"\r\n\r\n",
                b"data:" + json.dumps(chunk({"content": "b"}, "stop")).encode() + b"\n\n",
            ]
        )
    )
    assert text_of(chat(client)) == "ab"


def test_an_event_split_across_network_chunks_is_reassembled(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    data = b"data: " + json.dumps(chunk({"content": "together"}, "stop")).encode() + b"\n\n"
    openai.enqueue(Events([data[:9], data[9:30], data[30:]]))
    assert text_of(chat(client)) == "together"


def test_nothing_after_done_is_read(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(
        Events(
            [chunk({"content": "x"}, "stop"), b"data: [DONE]\n\n", b"garbage after done\n"],
            done=False,
        )
    )
    assert text_of(chat(client)) == "x"


def test_a_stream_without_done_but_with_finish_reason_is_complete(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Events([chunk({"content": "x"}), chunk({}, "stop")], done=False))
    chunks = chat(client)
    assert text_of(chunks) == "x" and chunks[-1].done


def test_length_finish_reason_is_kept(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Answer("cut sho", finish_reason="length"))
    assert chat(client)[-1].done_reason == "length"


def test_a_server_that_ignores_stream_answers_in_one_piece(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    body = FakeOpenAI().completion(
        Answer("whole", tool_calls=[Call("read_file", {"path": "a"})]), MODEL
    )
    openai.enqueue(Json(body))
    chunks = chat(client)
    assert text_of(chunks) == "whole"
    assert [c.arguments for c in calls_of(chunks)] == [{"path": "a"}]
    assert len(openai.chat_bodies) == 1


# -- tool calls ----------------------------------------------------------------------------


def test_argument_fragments_cut_at_awkward_places_are_joined(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    arguments = {"path": 'café/notes "v2".txt', "start_line": 3, "nested": {"k": [1, "ü"]}}
    openai.enqueue(Answer(tool_calls=[Call("read_file", arguments, id="call_abc")]))
    chunks = chat(client, tools=TOOLS)
    [call] = calls_of(chunks)
    assert call == ToolCall("read_file", arguments, "call_abc")
    fragments = openai.fragments
    assert len(fragments) > 5
    assert any(f.endswith("\\u") for f in fragments), "a cut inside a \\u escape"
    assert any(f.startswith(":") for f in fragments), "a cut between a key and its colon"
    assert fragments[0] == '{"p', "a cut inside the first key"
    assert "".join(fragments) == json.dumps(arguments)


def test_calls_arrive_in_the_done_chunk_in_index_order(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Answer(
            "Reading both.",
            tool_calls=[Call("read_file", {"path": "a"}), Call("list_directory", {"path": "."})],
        )
    )
    chunks = chat(client, tools=TOOLS)
    assert all(not c.tool_calls for c in chunks[:-1])
    names = [c.name for c in chunks[-1].tool_calls]
    assert names == ["read_file", "list_directory"]
    assert text_of(chunks) == "Reading both."


def test_interleaved_deltas_of_two_calls_are_kept_apart(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    def call(index: int, **function: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, "function": function}]})

    openai.enqueue(
        Events(
            [
                chunk(
                    {"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "read_file"}}]}
                ),
                chunk(
                    {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "read_file"}}]}
                ),
                call(0, arguments='{"pa'),
                call(1, arguments='{"path"'),
                call(0, arguments='th": "a"}'),
                call(1, arguments=': "b"}'),
                chunk({}, "tool_calls"),
            ]
        )
    )
    calls = calls_of(chat(client))
    assert [(c.id, c.arguments) for c in calls] == [("c0", {"path": "a"}), ("c1", {"path": "b"})]


def test_every_call_at_index_0_with_its_own_id_stays_separate(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    whole = [
        {"index": 0, "id": f"c{n}", "function": {"name": "read_file", "arguments": arguments}}
        for n, arguments in enumerate(['{"path": "a"}', '{"path": "b"}'])
    ]
    openai.enqueue(Events([chunk({"tool_calls": [c]}) for c in whole] + [chunk({}, "tool_calls")]))
    calls = calls_of(chat(client))
    assert [c.arguments["path"] for c in calls] == ["a", "b"]


def test_name_and_id_repeated_in_every_delta_are_taken_once(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    # llama-cpp-python with a forced tool_choice, as seen from its server.
    def delta(arguments: str) -> dict[str, Any]:
        call = {"index": 0, "id": "call__0_read_file_cmpl-1", "type": "function"}
        call["function"] = {"name": "read_file", "arguments": arguments}
        return chunk({"role": None, "content": None, "tool_calls": [call]})

    openai.enqueue(
        Events(
            [
                delta('{"path"'),
                delta(': "a'),
                delta('.txt"}'),
                chunk({"tool_calls": None}, "tool_calls"),
            ]
        )
    )
    [call] = calls_of(chat(client))
    assert call == ToolCall("read_file", {"path": "a.txt"}, "call__0_read_file_cmpl-1")


def test_deltas_without_index_continue_the_last_call(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Events(
            [
                chunk({"tool_calls": [{"id": "x", "function": {"name": "read_file"}}]}),
                chunk({"tool_calls": [{"function": {"arguments": '{"path":'}}]}),
                chunk({"tool_calls": [{"function": {"arguments": ' "z"}'}}]}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    assert [c.arguments for c in calls_of(chat(client))] == [{"path": "z"}]


def test_arguments_sent_as_an_object_are_taken(openai: FakeOpenAI, client: OpenAIClient) -> None:
    delta = {"index": 0, "id": "o", "function": {"name": "read_file", "arguments": {"path": "p"}}}
    openai.enqueue(Events([chunk({"tool_calls": [delta]}, "tool_calls")]))
    assert calls_of(chat(client))[0].arguments == {"path": "p"}


def test_legacy_function_call_delta(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(
        Events(
            [
                chunk({"function_call": {"name": "read_file", "arguments": '{"path"'}}),
                chunk({"function_call": {"arguments": ': "f"}'}}, "function_call"),
            ]
        )
    )
    [call] = calls_of(chat(client))
    assert call.name == "read_file" and call.arguments == {"path": "f"}


def test_missing_ids_are_made_up_and_never_repeat(openai: FakeOpenAI, client: OpenAIClient) -> None:
    two = [Call("read_file", {"path": "a"}), Call("read_file", {"path": "b"})]
    openai.enqueue(Answer(tool_calls=two, ids=False), Answer(tool_calls=two[:1], ids=False))
    first = calls_of(chat(client, tools=TOOLS))
    assert [c.id for c in first] == ["call_0", "call_1"]
    history = [
        *MESSAGES,
        {"role": "assistant", "content": "", "tool_calls": [c.to_message() for c in first]},
        *({"role": "tool", "tool_call_id": c.id, "content": "{}"} for c in first),
    ]
    second = calls_of(chat(client, messages=history, tools=TOOLS))
    assert [c.id for c in second] == ["call_2"]


def test_made_up_ids_continue_after_those_in_a_resumed_history(
    openai: FakeOpenAI, make_client: MakeClient
) -> None:
    history = [
        *MESSAGES,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_7", "function": {}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "{}"},
    ]
    openai.enqueue(Answer(tool_calls=[Call("read_file", {"path": "a"})], ids=False))
    calls = calls_of(chat(make_client(), messages=history))  # a new client: a new session
    assert [c.id for c in calls] == ["call_8"]


@pytest.mark.parametrize(
    ("text", "arguments", "error"),
    [
        ('{"path": "a"}', {"path": "a"}, None),
        ("", {}, None),
        ("  ", {}, None),
        ("null", {}, None),
        ('{"path": "a"', {}, "not valid JSON"),
        ('["a"]', {}, "must be a JSON object"),
        ('{"n": NaN}', {}, "NaN or Infinity"),
        ('{"a":' * 100 + "1" + "}" * 100, {}, "nest deeper than"),
    ],
    ids=["object", "empty", "blank", "null", "cut", "array", "nan", "deep"],
)
def test_parse_arguments(text: str, arguments: dict[str, Any], error: str | None) -> None:
    call = parse_arguments("read_file", text, "id1")
    assert call.name == "read_file" and call.id == "id1"
    assert dict(call.arguments) == arguments
    if error is None:
        assert call.arguments_error is None
    else:
        assert call.arguments_error is not None and error in call.arguments_error


def test_bad_argument_json_from_the_server_becomes_arguments_error(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Answer(tool_calls=[Call("read_file", '{"path": "a"')]))
    [call] = calls_of(chat(client, tools=TOOLS))
    assert call.arguments == {} and "not valid JSON" in (call.arguments_error or "")


def test_endless_argument_fragments_hit_the_answer_cap(
    openai: FakeOpenAI, make_client: MakeClient
) -> None:
    head = chunk({"tool_calls": [{"index": 0, "id": "w", "function": {"name": "write_file"}}]})
    more = chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x" * 500}}]})
    openai.enqueue(Events([head, more], endless=True))
    with pytest.raises(StreamError) as info:
        chat(make_client(max_answer_chars=5000))
    assert "agent.max_answer_chars" in str(info.value)
    assert_one_line(info.value)


# -- servers that cannot stream tool calls -------------------------------------------------


def test_finish_reason_tool_calls_without_calls_is_asked_again_without_streaming(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Answer("Let me look.", tool_calls=[Call("read_file", {"path": "a"})], stream_calls=False)
    )
    chunks = chat(client, tools=TOOLS)
    first, second = openai.chat_bodies
    assert first["stream"] is True
    assert second["stream"] is False and "stream_options" not in second
    assert second["messages"] == first["messages"] and second["tools"] == TOOLS
    assert second["tool_choice"] == "auto"
    assert [c.arguments for c in calls_of(chunks)] == [{"path": "a"}]
    assert text_of(chunks) == "Let me look."  # streamed once, not again from the redo
    stats = chunks[-1].stats
    assert stats is not None and stats.eval_count == 40  # both attempts generated tokens


def test_an_empty_stream_is_asked_again_without_streaming(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Answer("Reading.", tool_calls=[Call("read_file", {"path": "a"})], empty_stream=True)
    )
    chunks = chat(client, tools=TOOLS)
    assert [b["stream"] for b in openai.chat_bodies] == [True, False]
    assert text_of(chunks) == "Reading."  # nothing was shown from the stream
    assert [c.arguments for c in calls_of(chunks)] == [{"path": "a"}]


def test_the_redo_does_not_reuse_the_connection_of_the_failed_stream(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    # llama-cpp-python: uvicorn resets the kept-alive connection whose stream failed.
    openai.reset_kept_alive = True
    openai.enqueue(Answer(tool_calls=[Call("read_file", {"path": "a"})], empty_stream=True))
    chunks = chat(client, tools=TOOLS)
    assert [c.arguments for c in calls_of(chunks)] == [{"path": "a"}]


def test_a_kept_alive_connection_reset_by_the_server_is_tried_once_more(
    openai: FakeOpenAI, make_client: MakeClient
) -> None:
    openai.reset_kept_alive = True
    openai.enqueue(Answer("one"), Answer("two"))
    client = make_client(stream=False)  # a whole body read: its connection is kept alive
    assert text_of(chat(client)) == "one"
    assert text_of(chat(client)) == "two"  # the reused connection was reset: a new one
    assert len(openai.chat_bodies) == 2


def test_a_stream_dropped_before_its_first_event_is_asked_again(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Events([b": ping\n\n"], done=False, drop=True),
        Answer(tool_calls=[Call("read_file", {"path": "a"})]),
    )
    chunks = chat(client, tools=TOOLS)
    assert [b["stream"] for b in openai.chat_bodies] == [True, False]
    assert len(calls_of(chunks)) == 1


def test_the_redo_happens_once(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(
        Events([chunk({}, "tool_calls")]),
        Json(FakeOpenAI().completion(Answer(finish_reason="tool_calls"), MODEL)),
    )
    chunks = chat(client, tools=TOOLS)
    assert len(openai.chat_bodies) == 2 and calls_of(chunks) == []
    assert chunks[-1].done


def test_stream_false_never_streams(openai: FakeOpenAI, make_client: MakeClient) -> None:
    openai.enqueue(Answer("Whole.", thinking="Thought.", tool_calls=[Call("read_file", {})]))
    chunks = chat(make_client(stream=False), tools=TOOLS)
    [body] = openai.chat_bodies
    assert body["stream"] is False and "stream_options" not in body
    assert text_of(chunks) == "Whole." and chunks[0].thinking == "Thought."
    assert [c.name for c in calls_of(chunks)] == ["read_file"]
    stats = chunks[-1].stats
    assert stats is not None and stats.eval_count == 20 and stats.total_duration > 0


# -- history in this dialect ---------------------------------------------------------------


def test_history_is_sent_in_this_dialect(openai: FakeOpenAI, client: OpenAIClient) -> None:
    history = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "I should read it.",
            "tool_calls": [
                {"id": "call_x", "function": {"name": "read_file", "arguments": {"path": "a"}}}
            ],
        },
        {"role": "tool", "tool_name": "read_file", "tool_call_id": "call_x", "content": '{"a":1}'},
    ]
    openai.enqueue(Answer("done"))
    chat(client, messages=history)
    sent = openai.chat_bodies[0]["messages"]
    assert sent == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_x", "content": '{"a":1}'},
    ]


def test_null_content_is_sent_as_an_empty_string() -> None:
    wire, _ = wire_messages([{"role": "assistant", "content": None, "tool_calls": []}])
    assert wire == [{"role": "assistant", "content": ""}]


def test_history_without_ids_gets_made_up_ones_that_pair_calls_with_results() -> None:
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "read_file", "arguments": {"path": "a"}}},
                {"function": {"name": "list_directory", "arguments": {"path": "."}}},
            ],
        },
        {"role": "tool", "tool_name": "read_file", "content": "r"},
        {"role": "tool", "tool_name": "list_directory", "content": "l"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "b"}}}],
        },
        {"role": "tool", "tool_name": "read_file", "content": "r2"},
    ]
    wire, free = wire_messages(history)
    ids = [c["id"] for m in wire if m["role"] == "assistant" for c in m["tool_calls"]]
    results = [m["tool_call_id"] for m in wire if m["role"] == "tool"]
    assert ids == ["call_h0", "call_h1", "call_h2"]
    assert results == ids
    assert free == 0  # the client's own call_<n> for new calls: apart from these
    again, _ = wire_messages(history)
    assert again == wire  # the same history, the same ids: a server's prompt cache still hits
    # A longer history (a new call the client named call_7) renames none of them.
    longer = [
        *history,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_7", "function": {}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": ""},
    ]
    grown, free = wire_messages(longer)
    assert grown[: len(wire)] == wire and free == 8


def test_results_answer_calls_by_name_when_they_come_out_of_order() -> None:
    history = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "read_file", "arguments": {}}},
                {"function": {"name": "list_directory", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_name": "list_directory", "content": "l"},
        {"role": "tool", "tool_name": "read_file", "content": "r"},
    ]
    wire, _ = wire_messages(history)
    assert [m.get("tool_call_id") for m in wire[1:]] == ["call_h1", "call_h0"]


def test_ids_in_the_history_are_kept_and_not_reused() -> None:
    history = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "function": {}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": ""},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "x"}}]},
        {"role": "tool", "content": ""},
    ]
    wire, _ = wire_messages(history)
    assert [m.get("tool_call_id") for m in wire if m["role"] == "tool"] == ["call_0", "call_h0"]


# -- the model check and the model list ----------------------------------------------------


def test_list_models_is_sorted(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.add_model("b-model")
    openai.add_model("a-model")
    assert client.list_models() == ["a-model", "b-model", MODEL]
    assert openai.requests[0].path == "/v1/models"


def test_model_info_assumes_tools_and_says_so(client: OpenAIClient) -> None:
    info = client.model_info(MODEL)
    assert info.capabilities == ASSUMED_CAPABILITIES
    assert info.supports_tools and not info.supports_thinking
    said = info.assumed_note  # said the first time only (cli/commands/frame.py model_note)
    assert "does not say what" in said and "assuming it takes tools" in said and not info.note
    assert info.context_length is None


def test_capabilities_the_server_reports_are_used(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.add_model("lms", capabilities=["tool_use", "reasoning"])
    openai.add_model("plain", capabilities=["completion"])
    thinker = client.model_info("lms")
    assert thinker.supports_tools and thinker.supports_thinking
    assert thinker.note == thinker.assumed_note == ""
    assert not client.model_info("plain").supports_tools


def test_model_info_for_an_unknown_model_names_the_closest(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.add_model("llama3.1:8b")
    with pytest.raises(ModelNotFound) as info:
        client.model_info("llama3.1")
    message = str(info.value)
    assert "model 'llama3.1' is not served by" in message and "llama3.1:8b" in message
    assert "-m" in message
    assert_one_line(info.value)


def test_a_server_with_one_model_serves_it_whatever_the_name(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    # llama-cpp-python: /v1/models lists its .gguf path, and any name in a request works.
    openai.models = {"/models/smollm2-135m-instruct.gguf": {"owned_by": "me"}}
    info = client.model_info("smollm2")
    assert info.name == "smollm2" and info.supports_tools
    assert "serves only '/models/smollm2-135m-instruct.gguf'" in info.note  # every start
    assert "assuming it takes tools" in info.assumed_note


def test_a_server_without_models_is_trusted(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.models_endpoint = False
    info = client.model_info("anything")
    assert info.supports_tools and info.assumed_note
    with pytest.raises(BackendError) as listing:
        client.list_models()
    assert "-m" in str(listing.value)


def test_a_base_url_without_v1_fails_the_model_check(
    openai: FakeOpenAI, make_client: MakeClient
) -> None:
    with pytest.raises(BackendError) as info:
        make_client(openai.root).model_info(MODEL)  # the /v1 left out
    assert "/models does not exist (HTTP 404)" in str(info.value)
    assert "usually ends in /v1" in str(info.value)


def test_the_model_list_is_fetched_once_for_several_models(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.add_model("other")
    client.model_info(MODEL)
    client.model_info("other")
    assert [r.path for r in openai.requests] == ["/v1/models"]


def test_context_length_from_vllm_max_model_len(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.add_model("vllm-model", max_model_len=16384, owned_by="vllm")
    assert client.model_info("vllm-model").context_length == 16384


def test_context_length_from_llama_server_props(openai: FakeOpenAI, client: OpenAIClient) -> None:
    meta = {"n_ctx_train": 131072, "n_params": 135_000_000, "size": 270_000_000}
    openai.add_model("smollm2", owned_by="llamacpp", meta=meta)
    openai.props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}
    info = client.model_info("smollm2")
    assert info.context_length == 8192  # what it runs with, not what it was trained for
    assert info.size == 270_000_000 and info.parameter_size == "135M"
    assert any(r.path == "/props" for r in openai.requests)


def test_context_length_falls_back_to_the_trained_length(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.add_model("smollm2", owned_by="llamacpp", meta={"n_ctx_train": 2048})
    assert client.model_info("smollm2").context_length == 2048  # no /props here


def test_props_is_not_probed_for_other_servers(openai: FakeOpenAI, client: OpenAIClient) -> None:
    client.model_info(MODEL)
    assert all(r.path != "/props" for r in openai.requests)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"models": []}', "no model list"),
        (b"<html>Ollama is running</html>", "not JSON"),
        (b"[" * 100_000, "nested deeper than"),
    ],
    ids=["no-list", "html", "deep"],
)
def test_a_models_answer_that_is_no_model_list_is_an_error(
    openai: FakeOpenAI, client: OpenAIClient, body: bytes, words: str
) -> None:
    openai.models_body = body
    with pytest.raises(BackendError) as info:
        client.list_models()
    assert words in str(info.value)
    assert_one_line(info.value)


# -- errors ----------------------------------------------------------------------------------


def test_unreachable_server(make_client: MakeClient) -> None:
    base = f"http://127.0.0.1:{free_port()}/v1"
    client = make_client(base)
    for attempt in (lambda: chat(client), client.list_models, lambda: client.model_info(MODEL)):
        with pytest.raises(ServerUnreachable) as info:
            attempt()
        message = str(info.value)
        assert base in message and "connection refused" in message and "--host" in message
        assert_one_line(info.value)


def test_unknown_host_name(make_client: MakeClient) -> None:
    with pytest.raises(ServerUnreachable) as info:
        chat(make_client("http://nonexistent.invalid:1234/v1"))
    assert "cannot resolve host 'nonexistent.invalid'" in str(info.value)
    assert_one_line(info.value)


def test_tls_to_a_plain_http_server(openai: FakeOpenAI, make_client: MakeClient) -> None:
    with pytest.raises(ServerUnreachable) as info:
        chat(make_client(openai.url.replace("http://", "https://")))
    assert "TLS handshake failed" in str(info.value)
    assert_one_line(info.value)


def test_read_timeout_before_the_first_event(openai: FakeOpenAI, make_client: MakeClient) -> None:
    openai.enqueue(HttpError(200, header_delay=3))
    with pytest.raises(ServerTimeout) as info:
        chat(make_client(timeout=0.5))
    assert "sent nothing for 0.5 s (ollama.timeout)" in str(info.value)


def test_read_timeout_mid_stream(openai: FakeOpenAI, make_client: MakeClient) -> None:
    openai.enqueue(Events([chunk({"content": "par"})], stall=3))
    with pytest.raises(ServerTimeout):
        chat(make_client(timeout=0.5))


@pytest.mark.parametrize("env", ["OPENAI_API_KEY", "LMSTUDIO_KEY"])
def test_401_without_a_key_names_the_variable(
    openai: FakeOpenAI, make_client: MakeClient, env: str
) -> None:
    openai.api_key = "sk-right"
    with pytest.raises(BackendError) as info:
        chat(make_client(api_key_env=env))
    message = str(info.value)
    assert "HTTP 401" in message and f"${env}" in message and "Invalid API key" in message
    assert_one_line(info.value)


def test_401_with_a_wrong_key_says_to_check_it(openai: FakeOpenAI, make_client: MakeClient) -> None:
    openai.api_key = "sk-right"
    with pytest.raises(BackendError) as info:
        make_client(api_key="sk-wrong").model_info(MODEL)
    assert "check the key in $OPENAI_API_KEY" in str(info.value)


def test_404_for_an_unknown_model_in_chat(openai: FakeOpenAI, client: OpenAIClient) -> None:
    with pytest.raises(ModelNotFound) as info:
        chat(client, model="ghost:1b")
    assert "model 'ghost:1b' not found" in str(info.value)
    assert_one_line(info.value)


def test_404_for_the_path_suggests_v1(openai: FakeOpenAI, make_client: MakeClient) -> None:
    with pytest.raises(BackendError) as info:
        chat(make_client(openai.root))  # the /v1 left out
    message = str(info.value)
    assert "/chat/completions does not exist (HTTP 404)" in message and "/v1" in message
    assert not isinstance(info.value, ModelNotFound)


def test_400_shows_the_servers_message(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(HttpError(400, "messages[1].content: Input should be a valid string"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "HTTP 400: messages[1].content: Input should be a valid string" in str(info.value)


def test_400_about_tool_choice_says_how_to_enable_tools(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        HttpError(400, '"auto" tool choice requires --enable-auto-tool-choice to be set')
    )
    with pytest.raises(ModelUnsupported) as info:
        chat(client, tools=TOOLS)
    assert "--enable-auto-tool-choice" in str(info.value)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (
            "This model's maximum context length is 2048 tokens. However, you requested 3000 "
            "tokens (2900 in the messages, 100 in the completion).",
            "context_length_exceeded",
        ),
        ("the request exceeds the available context size, try increasing it", None),
        ("prompt too big", "exceed_context_size_error"),
    ],
    ids=["vllm-llama-cpp-python", "llama-server", "by-code"],
)
def test_context_errors_are_context_too_long(
    openai: FakeOpenAI, client: OpenAIClient, message: str, code: str | None
) -> None:
    openai.enqueue(HttpError(400, message, code=code))
    with pytest.raises(ContextTooLong) as info:
        chat(client)
    # The fix is the server's: its context is what it was loaded with (issue 20: never advise
    # a cap that is not the limit).
    assert "-c/--ctx-size" in str(info.value) and "max_num_ctx" not in str(info.value)
    assert_one_line(info.value)


def test_a_context_error_mid_stream_is_context_too_long(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(
        Events([{"error": {"message": "context length exceeded", "type": "server_error"}}])
    )
    with pytest.raises(ContextTooLong):
        chat(client)


@pytest.mark.parametrize(
    "event",
    [
        b'data: {"error": {"message": "model crashed\\nbadly", "code": 500}}\n\n',
        b'data: {"object": "error", "message": "model crashed badly"}\n\n',
        b'event: error\ndata: {"message": "model crashed badly"}\n\n',
    ],
    ids=["openai", "vllm", "event-error"],
)
def test_an_error_event_mid_stream(openai: FakeOpenAI, client: OpenAIClient, event: bytes) -> None:
    openai.enqueue(Events([chunk({"content": "Hi"}), event]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "error mid-stream: model crashed badly" in str(info.value)
    assert_one_line(info.value)


def test_http_500_with_an_openai_error_body(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(HttpError(500, "runner crashed"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "HTTP 500: runner crashed" in str(info.value)


def test_http_error_with_a_multiline_html_body_is_one_line(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(HttpError(502, body=b"<html>\n<h1>502 Bad Gateway</h1>\n</html>"))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "HTTP 502" in str(info.value)
    assert_one_line(info.value)


def test_503_is_retried_with_backoff(
    openai: FakeOpenAI, client: OpenAIClient, sleeps: RecordingSleep
) -> None:
    openai.enqueue(HttpError(503, "loading model"), HttpError(429, "slow down"), Answer("ok"))
    assert text_of(chat(client)) == "ok"
    assert sleeps.calls == [0.5, 1.0]


def test_503_every_time_gives_up(
    openai: FakeOpenAI, client: OpenAIClient, sleeps: RecordingSleep
) -> None:
    openai.enqueue(*[HttpError(503, "busy")] * (BUSY_RETRIES + 1))
    with pytest.raises(BackendError) as info:
        chat(client)
    assert "busy" in str(info.value) and len(sleeps.calls) == BUSY_RETRIES


def test_a_line_that_is_no_sse_is_an_error(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Events([b'{"model": "x", "done": false}\n'], done=False))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "not JSON in server-sent events" in str(info.value)


def test_data_that_is_not_json_is_an_error(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Events([b"data: {oops\n\n"]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "not JSON" in str(info.value) and "{oops" in str(info.value)


def test_data_nested_too_deep_is_an_error(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Events([b"data: " + b"[" * 100_000 + b"\n\n"]))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "nested deeper than" in str(info.value)


def test_a_connection_dropped_mid_stream(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Events([chunk({"content": "par"})], done=False, drop=True))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "dropped mid-stream" in str(info.value)


def test_a_stream_that_ends_before_the_answer_is_complete(
    openai: FakeOpenAI, client: OpenAIClient
) -> None:
    openai.enqueue(Events([chunk({"content": "par"})], done=False))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "ended before the answer was complete" in str(info.value)


def test_an_oversized_line_is_refused(openai: FakeOpenAI, client: OpenAIClient) -> None:
    openai.enqueue(Events([b"data: " + b"x" * (MAX_LINE_BYTES + 10)], done=False))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "longer than" in str(info.value)


def test_the_stream_size_is_capped(openai: FakeOpenAI, make_client: MakeClient) -> None:
    client = make_client()
    client.max_stream_bytes = 50_000
    openai.enqueue(Events([b": " + b"k" * 5000 + b"\n\n"], endless=True))
    with pytest.raises(StreamError) as info:
        chat(client)
    assert "passed 50000 bytes" in str(info.value)
