"""The wire-neutral shapes the agent loop works with: tool calls, stream chunks, stats, models.

A backend (Ollama's native API today, an OpenAI-compatible server later) turns its own
protocol into these, so the loop never sees a wire format.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# JSON from the server or a model that nests deeper than this is refused before it is parsed:
# Python's json recurses once per level (a RecursionError far below what a line may hold), and
# so does everything that walks the value later. An Ollama line is about 6 levels deep, tool
# arguments a few more; nothing real comes near 64.
MAX_JSON_DEPTH = 64

# Strings are cut out before brackets are counted: a whole string (escapes included), or from
# a quote that never closes to the end. Each alternative runs to its end once, so the scan is
# linear in the text, and it never recurses.
_JSON_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|".*', re.DOTALL)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


_DECODER = json.JSONDecoder()


class JSONTooDeep(ValueError):
    """The JSON text nests deeper than MAX_JSON_DEPTH."""


def nests_deeper_than(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `text`, read as JSON, opens more than `limit` arrays/objects inside each other,
    brackets inside strings not counted. Checked without recursion and without parsing."""
    data = text.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # the common case, at C speed
    depth = 0
    # Not clamped at 0: json stops at the first bracket that closes nothing, so what comes
    # after it is never nested into.
    for byte in _JSON_STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def loads_json(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """json.loads for text from the server or a model: JSONTooDeep (a ValueError) when it nests
    deeper than `limit`, checked before parsing; ValueError when it is not JSON. Bytes are
    decoded as json.loads would (UTF-8, or UTF-16/32 by their first bytes). The agent's own
    files are read with a larger `limit` (cli/fs/stored.py): they wrap such JSON in their own."""
    if isinstance(text, bytes):
        if (
            text[:1] == b"{"
            and text[1:2] != b"\x00"  # UTF-16 or 32 little-endian: json.loads decodes those
            and text.count(b"[") + text.count(b"{") <= limit
        ):
            # The common case, a stream's chunk: UTF-8 (its first byte says so, as json's
            # detect_encoding would), no depth to check, parsed as json.loads parses it.
            decoded = text.decode("utf-8")  # UnicodeDecodeError is a ValueError
            value, end = _DECODER.raw_decode(decoded)
            if decoded[end:].strip(" \t\n\r"):
                raise ValueError(f"extra data after the JSON value at {end}")
            return value
        text = text.decode(json.detect_encoding(text))  # UnicodeDecodeError is a ValueError
    if nests_deeper_than(text, limit):
        raise JSONTooDeep(f"JSON nested deeper than {limit} levels")
    return json.loads(text)


# What sets the context on each OpenAI-compatible server, for the messages that say to load
# the model with a larger one.
SERVER_CONTEXT_FLAGS = (
    "llama-server: -c/--ctx-size; llama-cpp-python: --n_ctx; LM Studio: the model's Context "
    "Length, or lms load --context-length; vLLM: --max-model-len"
)

# A chat message as Ollama's /api/chat takes it: role, content, and optionally thinking,
# tool_calls, tool_name, tool_call_id. Kept as plain dicts so a session saves as JSON as is.
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for. `arguments` is always an object (parsed if it came as a
    string); `arguments_error` says why the model's arguments could not be used."""

    name: str
    arguments: Mapping[str, Any]
    id: str | None = None
    arguments_error: str | None = None
    # What the model sent as arguments when they could not be used (`arguments_error`): a
    # repair may still read them (a JSON object encoded twice). Not part of the call's value.
    raw_arguments: Any = field(default=None, compare=False, repr=False)
    # What a repair mended (cli/tools/repair.py), one short phrase each; () when nothing was.
    repairs: tuple[str, ...] = ()

    def to_message(self) -> dict[str, Any]:
        """The call as it goes back to the server in history: `arguments` must be an object
        (Ollama answers 400 to a string since v0.14)."""
        function: dict[str, Any] = {"name": self.name, "arguments": dict(self.arguments)}
        call: dict[str, Any] = {"function": function}
        if self.id:
            call["id"] = self.id
        return call


def tool_call(name: str, args: Any, call_id: str | None) -> ToolCall:
    """One tool call from the arguments a server sent — an object, a JSON string (whole, or
    concatenated from fragments), or nothing. Arguments that are not a JSON object become
    `arguments_error`, which the model reads back; the loop always sends an object back."""
    raw = args
    if isinstance(args, str):
        try:
            args = loads_json(args) if args.strip() else {}
        except JSONTooDeep:
            why = f"arguments nest deeper than {MAX_JSON_DEPTH} levels; send a flat object"
            return ToolCall(name, {}, call_id, why)
        except ValueError:
            return ToolCall(name, {}, call_id, "arguments are not valid JSON; send an object", raw)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, {}, call_id, "arguments must be a JSON object", raw)
    try:
        # Python's json reads NaN and Infinity, which JSON does not have: history holding
        # them could never be sent back (requests refuses to encode it).
        json.dumps(args, allow_nan=False)
    except ValueError:
        return ToolCall(name, {}, call_id, "arguments hold NaN or Infinity; send plain numbers")
    return ToolCall(name, args, call_id)


MAX_LINE_BYTES = 8 * 1024 * 1024  # one NDJSON or SSE line; a real one is a few KB


class Overflow(Exception):
    """A stream that passed its byte limit (`what` is "stream"), or a line longer than
    MAX_LINE_BYTES ("line"). Each client says it in its own words."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def split_lines(pieces: Iterable[bytes], max_bytes: int) -> Iterator[bytes]:
    """The lines of a body that arrives in pieces, each as soon as its end arrives (the last
    one even without an end). Only new data is scanned for line ends, so a long line costs
    linear time however it is split. Raises Overflow."""
    pending: list[bytes] = []  # the unfinished line, in pieces
    pending_size = total = 0
    for data in pieces:
        total += len(data)
        if total > max_bytes:
            raise Overflow("stream")
        if data and pending_size == 0 and data.find(b"\n") == len(data) - 1:
            # The usual piece, one whole line (a server flushes one chunk a line): the same
            # as below, without the lists.
            if len(data) > MAX_LINE_BYTES + 1:
                raise Overflow("line")
            pending = [b""]
            yield data[:-1]
            continue
        *complete, rest = data.split(b"\n")
        if complete:
            complete[0] = b"".join((*pending, complete[0]))
            pending, pending_size = [], 0
        pending.append(rest)
        pending_size += len(rest)
        if pending_size > MAX_LINE_BYTES or any(len(c) > MAX_LINE_BYTES for c in complete):
            raise Overflow("line")
        yield from complete
    if pending:
        yield b"".join(pending)


@dataclass(frozen=True)
class Stats:
    """Counters from the final chunk of a model call (durations in nanoseconds, as Ollama)."""

    prompt_eval_count: int = 0
    eval_count: int = 0
    eval_duration: int = 0
    prompt_eval_duration: int = 0
    load_duration: int = 0
    total_duration: int = 0

    def __add__(self, other: Stats) -> Stats:
        return Stats(
            prompt_eval_count=self.prompt_eval_count + other.prompt_eval_count,
            eval_count=self.eval_count + other.eval_count,
            eval_duration=self.eval_duration + other.eval_duration,
            prompt_eval_duration=self.prompt_eval_duration + other.prompt_eval_duration,
            load_duration=self.load_duration + other.load_duration,
            total_duration=self.total_duration + other.total_duration,
        )

    @property
    def tokens_per_second(self) -> float:
        return self.eval_count / (self.eval_duration / 1e9) if self.eval_duration else 0.0


@dataclass(frozen=True)
class ChatChunk:
    """One normalised piece of a streamed answer. The last one has `done` set, and carries
    `done_reason` and `stats`; it may carry content or tool calls too."""

    content: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    done: bool = False
    done_reason: str | None = None
    stats: Stats | None = None


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)
    think: bool | str | None = None  # None: leave it out; a str is a level ("low" … "max")
    options: Mapping[str, Any] = field(default_factory=dict)
    keep_alive: str | int | None = None
    # A JSON schema the answer must hold to (cli/loop/constrained.py), sent only to a server
    # that says it can (ConstrainsReplies); None: free text.
    format: Mapping[str, Any] | None = None
    # "none": the tools are sent (the prompt's prefix stays the one the server holds) but no
    # call is wanted: the OpenAI-compatible API's tool_choice; Ollama has no such field (the
    # last message asks for none).
    tool_choice: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What the agent needs to know about a model before talking to it."""

    name: str
    capabilities: frozenset[str]
    # The context the model was trained for or, where `context_served`, the one the server
    # runs it with (llama-server's /props, vLLM's max_model_len, LM Studio's loaded model).
    context_length: int | None = None
    context_served: bool = False
    # The server runs the model with one context whatever a request says (an OpenAI-compatible
    # server): no num_ctx is sent, and history is fitted to what the server serves.
    fixed_context: bool = False
    size: int | None = None  # bytes on disk, when the server says
    parameter_size: str | None = None  # "8.2B", as the server writes it
    quantization: str | None = None  # "Q4_K_M"
    # Thinking takes a level (low | medium | high), and booleans are ignored: gpt-oss.
    thinks_in_levels: bool = False
    # What the user must know of how the server takes the model (a one-model server that
    # answers with its own): told at the model check, at every start.
    note: str = ""
    # What the backend had to assume because the server does not say (an OpenAI-compatible
    # server's capabilities): told the first time with this server and model (the commands
    # remember it: cli/commands/frame.py model_note).
    assumed_note: str = ""
    # The server did not say what the model can do; `capabilities` is what we assume.
    capabilities_assumed: bool = False

    @property
    def supports_tools(self) -> bool:
        return "tools" in self.capabilities

    @property
    def supports_thinking(self) -> bool:
        return "thinking" in self.capabilities


class ChatBackend(Protocol):
    """The one small interface the loop and the UIs use to reach a model server."""

    @property
    def host(self) -> str: ...

    def chat(self, request: ChatRequest) -> Iterator[ChatChunk]: ...

    def list_models(self) -> list[str]: ...

    def model_info(self, model: str) -> ModelInfo: ...


@runtime_checkable
class ServesOneModel(Protocol):
    """Optional for a backend: the one model a server serves whatever a request names
    (llama-server, llama-cpp-python), or None. The default model gives way to it."""

    def only_model(self) -> str | None: ...


@runtime_checkable
class ConstrainsReplies(Protocol):
    """Optional for a backend: whether the server can hold an answer to a JSON schema
    (ChatRequest.format): Ollama's `format` since 0.5, `response_format` on the
    OpenAI-compatible servers. False once a server refused it."""

    def constrains_replies(self) -> bool: ...


@runtime_checkable
class Prewarms(Protocol):
    """Optional for a backend: send a request's prompt for the server to evaluate and keep in
    its cache, generating as little as the server allows (agent.prewarm). Raises
    BackendError as chat does; the answer, if any, is not read."""

    def prewarm(self, request: ChatRequest) -> None: ...


@runtime_checkable
class ReportsLoadedModels(Protocol):
    """Optional for a backend: the models loaded now, each with the context it was given
    (Ollama's /api/ps). Sizing prefers a loaded model's context, to avoid a reload."""

    def loaded_models(self) -> Mapping[str, int | None]: ...


def closest_models(name: str, names: Iterable[str], limit: int = 3) -> list[str]:
    """The server's names nearest to `name`, for a "not found" message: its own tags first
    (`llama3.1` → `llama3.1:8b`), then names that look alike."""
    names = list(dict.fromkeys(names))
    tagged = [n for n in names if n.split(":")[0] == name.split(":")[0]]
    alike = difflib.get_close_matches(name, names, n=limit, cutoff=0.6)
    return list(dict.fromkeys([*tagged, *alike]))[:limit]
