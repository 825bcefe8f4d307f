"""Probe what a running OpenAI-compatible server sends on the wire, and print it.

    python tests/e2e/smoke.py http://127.0.0.1:PORT/v1     # a server already running
    python tests/e2e/smoke.py                              # starts one through server.py

Each probe prints the raw SSE lines (or the JSON body) and a one-line summary: tool-call deltas
and how `arguments` arrived (fragments or whole), finish_reason, usage, ids. Probes: streaming
and non-streaming with one `read_file` tool (with and without a system message), the second turn
with the tool result in history, tool_choice forced to the tool, a plain streamed answer, and a
prompt longer than n_ctx.
Exit status 1 only if the server does not do the basics (answer every probe without dying, and
return a parseable tool call without streaming); the other findings are reported, not judged.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Relative path"}},
                "required": ["path"],
            },
        },
    }
]
SYSTEM: dict[str, Any] = {
    "role": "system",
    "content": "You are a coding agent. Use the tools to read files.",
}
USER: dict[str, Any] = {"role": "user", "content": "read package.json and tell me its version"}
FORCED = {"type": "function", "function": {"name": "read_file"}}
PACKAGE_JSON = '{"name": "demo", "version": "1.4.2"}'


def request_body(
    messages: list[dict[str, Any]], *, stream: bool, tools: bool = True, choice: Any = "auto"
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "any", "messages": messages, "max_tokens": 96}
    if tools:
        body |= {"tools": TOOLS, "tool_choice": choice}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def clip(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text)} chars]"


def probe(base_url: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Send one request, print what came back, and return a summary."""
    print(f"\n=== {name} (stream={body.get('stream', False)})", flush=True)
    start = time.monotonic()
    summary: dict[str, Any] = {"probe": name}
    try:
        resp = requests.post(
            base_url + "/chat/completions", json=body, stream=True, timeout=(5, 300)
        )
        summary["status"] = resp.status_code
        print(f"HTTP {resp.status_code} {resp.headers.get('content-type')}")
        if body.get("stream") and resp.ok:
            summary |= read_stream(resp)
        else:
            text = resp.text
            print(clip(text, 2000))
            summary |= read_json(text)
    except requests.RequestException as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
        print(f"!! {summary['error']}")
    summary["seconds"] = round(time.monotonic() - start, 1)
    print("summary:", json.dumps(summary))
    return summary


def read_stream(resp: requests.Response) -> dict[str, Any]:
    chunks: list[dict[str, Any]] = []
    other: list[str] = []
    done = False
    try:
        for line in resp.iter_lines(decode_unicode=True):
            if not line:
                continue
            print("  " + clip(line, 900))
            if line.startswith("data: "):
                data = line[len("data: ") :]
                if data == "[DONE]":
                    done = True
                else:
                    chunks.append(json.loads(data))
            else:
                other.append(line)
    except requests.RequestException as exc:  # the server dropped the stream mid-way
        return {"stream_error": f"{type(exc).__name__}: {exc}", **tally(chunks, done, other)}
    return tally(chunks, done, other)


def tally(chunks: list[dict[str, Any]], done: bool, other: list[str]) -> dict[str, Any]:
    fragments: dict[int, list[str]] = {}
    ids, names, finish, content = set(), set(), [], []
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                ids.add(call.get("id"))
                names.add((call.get("function") or {}).get("name"))
                arg = (call.get("function") or {}).get("arguments")
                if arg is not None:
                    fragments.setdefault(call.get("index", -1), []).append(arg)
            if choice.get("finish_reason"):
                finish.append(choice["finish_reason"])
    return {
        "chunks": len(chunks),
        "empty_stream": not chunks and not done,
        "done_marker": done,
        "non_data_lines": other[:3],
        "tool_call_ids": sorted(str(i) for i in ids),
        "tool_names": sorted(str(n) for n in names),
        "argument_fragments": {str(k): v for k, v in fragments.items()},
        "finish_reasons": finish,
        "usage": usage,
        "content": "".join(content)[:200],
    }


def read_json(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        return {"body": clip(text, 200)}
    if "choices" not in body:
        return {"error_body": body}
    choice = body["choices"][0]
    message = choice.get("message") or {}
    return {
        "finish_reason": choice.get("finish_reason"),
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls"),
        "usage": body.get("usage"),
    }


def run(base_url: str) -> int:
    results = [
        probe(base_url, "tools, no system message", request_body([USER], stream=True)),
        probe(base_url, "tools, system message", request_body([SYSTEM, USER], stream=True)),
        probe(base_url, "tools, no system message", request_body([USER], stream=False)),
    ]
    first = probe(base_url, "tools, system message", request_body([SYSTEM, USER], stream=False))
    results.append(first)
    calls = first.get("tool_calls") or []
    if not (first.get("status") == 200 and calls):
        print("\nFAIL: no tool call from a non-streaming request", file=sys.stderr)
        return 1
    call = calls[0]
    json.loads(call["function"]["arguments"])  # must parse
    assistant: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
    result: dict[str, Any] = {"role": "tool", "tool_call_id": call["id"], "content": PACKAGE_JSON}
    history = [SYSTEM, USER, assistant, result]
    results += [
        probe(base_url, "turn 2, tool result in history", request_body(history, stream=False)),
        probe(base_url, "turn 2, tool result in history", request_body(history, stream=True)),
        probe(
            base_url,
            "turn 2 without the tool message (prompt_tokens to compare)",
            request_body(history[:3], stream=False),
        ),
        probe(
            base_url,
            "turn 2, assistant content null",
            request_body([SYSTEM, USER, {**assistant, "content": None}, result], stream=False),
        ),
        probe(
            base_url,
            "tool_choice forced to read_file",
            request_body([SYSTEM, USER], stream=True, choice=FORCED),
        ),
        probe(
            base_url,
            "plain answer, no tools",
            {**request_body([USER], stream=True, tools=False), "max_tokens": 24},
        ),
    ]
    huge = {"role": "user", "content": "word " * 5000}
    results += [  # indices 10-12
        probe(base_url, "prompt over n_ctx", request_body([SYSTEM, huge], stream=False)),
        probe(base_url, "prompt over n_ctx", request_body([SYSTEM, huge], stream=True)),
        probe(
            base_url,
            "prompt over n_ctx, no tools",
            request_body([SYSTEM, huge], stream=False, tools=False),
        ),
    ]
    print("\n=== all summaries")
    for summary in results:
        print(json.dumps(summary))
    findings(results)
    broken = [s["probe"] for s in results if "error" in s or "stream_error" in s]
    if broken:
        print(f"\nFAIL: transport errors (server died?) in: {broken}", file=sys.stderr)
        return 1
    return 0


def findings(r: list[dict[str, Any]]) -> None:
    """What the summaries say, in the terms a client's author needs."""
    auto, forced, plain = r[1], r[8], r[9]
    tokens = [(r[i].get("usage") or {}).get("prompt_tokens") for i in (4, 6)]
    lines = [
        f"streamed tool call, tool_choice auto: {describe_stream(auto)}",
        f"streamed tool call, tool_choice forced: {describe_stream(forced)}",
        f"streamed plain answer: {describe_stream(plain)}",
        f"usage in any stream: {any(x.get('usage') for x in r if 'chunks' in x)}",
        f"non-streaming tool call: finish_reason={r[3].get('finish_reason')!r}, "
        f"content={r[3].get('content')!r}, arguments whole",
        f"tool result reaches the prompt: prompt_tokens {tokens[0]} with it, {tokens[1]} without",
        f"assistant content null in history: HTTP {r[7].get('status')}",
        f"prompt over n_ctx: HTTP {r[10].get('status')} "
        f"{(r[10].get('error_body') or {}).get('error', {}).get('code')!r} without streaming; "
        f"streaming: {describe_stream(r[11])}",
    ]
    print("\n=== findings\n" + "\n".join("- " + line for line in lines))


def describe_stream(s: dict[str, Any]) -> str:
    if s.get("empty_stream"):
        return f"HTTP {s.get('status')}, then nothing (no chunk, no [DONE], no error)"
    frags = s.get("argument_fragments") or {}
    return (
        f"HTTP {s.get('status')}, {s.get('chunks')} chunks, finish_reason "
        f"{s.get('finish_reasons')}, arguments in {[len(v) for v in frags.values()]} fragments"
    )


def main() -> int:
    if len(sys.argv) > 1:
        return run(sys.argv[1].rstrip("/"))
    with server.llama_server() as base_url:
        return run(base_url)


if __name__ == "__main__":
    sys.exit(main())
