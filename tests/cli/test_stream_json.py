"""`agent run --output-format stream-json`: the real program in a subprocess against the fake
Ollama, its stdout read line by line while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from tests.conftest import RunCli, without_blocking
from tests.fakes.fake_ollama import FakeOllama, HttpError, Stream, reply, tool_call


def lines_of(stdout: str) -> list[dict[str, Any]]:
    """Every line of stdout is one JSON object; an object has a type."""
    assert stdout.endswith("\n")
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert all(isinstance(line, dict) and isinstance(line.get("type"), str) for line in lines)
    return lines


def of(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["type"] == kind]


def start_agent(ollama: FakeOllama, workspace: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "run", "--output-format", "stream-json", *args],
        cwd=workspace,
        env={**os.environ, "OLLAMA_HOST": ollama.url},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(stream: IO[str], kind: str) -> list[dict[str, Any]]:
    """Lines of stdout as the program writes them, up to the first of type `kind` (it is
    there before the program goes on: each line is flushed as it is written)."""
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["type"] != kind:
        line = without_blocking(stream.readline)
        assert line, f"stdout ended before a {kind} line: {seen}"
        seen.append(json.loads(line))
    return seen


def test_a_run_as_json_lines(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "notes.txt"})], eval_count=5),
        reply("Two lines: alpha, beta.", thinking="Let me see.", eval_count=7),
    )
    r = run_cli("run", "--output-format", "stream-json", "--think", "what is in notes.txt?")
    assert r.code == 0, r.stderr
    lines = lines_of(r.stdout)
    start, end = lines[0], lines[-1]
    assert start["type"] == "start" and start["version"] == 1
    assert start["model"] == "qwen3:8b" and start["tool_mode"] == "native"
    assert "read_file" in start["tools"] and start["limits"]["max_steps"] == 10
    assert start["host"] == ollama.url and start["cwd"] == str(workspace)
    # A step ends when its model call does; the calls it asked for run after it.
    assert [line["type"] for line in lines[1:4]] == ["step_end", "tool_call", "tool_result"]
    step, call, result = lines[1:4]
    assert call["name"] == "read_file" and call["arguments"] == {"path": "notes.txt"}
    assert call["decision"] == "allow" and call["outcome"] == "allowed"
    assert call["approved_by"] == "policy" and call["step"] == 1 and call["call"] == 1
    assert result["call"] == 1 and result["outcome"] == "allowed"
    assert result["result"]["content"] == "alpha\nbeta\n"
    assert step == {
        "type": "step_end",
        "step": 1,
        "tool_calls": 1,
        "done_reason": "stop",
        "usage": step["usage"],
    }
    assert step["usage"]["eval_count"] == 5 and step["usage"]["prompt_eval_count"] == 100
    assert "".join(t["text"] for t in of(lines, "thinking")) == "Let me see."
    texts = of(lines, "text")
    assert "".join(t["text"] for t in texts) == "Two lines: alpha, beta."
    assert len(texts) > 1 and {t["step"] for t in texts} == {2}  # deltas, as they came
    assert end["type"] == "end" and end["stop_reason"] == "answer"
    assert end["answer"] == "Two lines: alpha, beta."
    assert end["steps"] == 2 and end["tool_calls"] == 1
    assert end["usage"]["eval_count"] == 12 and "error" not in end
    assert [line["type"] for line in lines].count("end") == 1
    # The trace for a person stays on stderr.
    assert "→ read_file notes.txt · allowed by policy" in r.stderr


def test_a_refused_call_says_its_rule_and_reason(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "/etc/shadow"})]),
        reply("Cannot."),
    )
    r = run_cli("run", "--output-format", "stream-json", "read it")
    assert r.code == 0, r.stderr
    lines = lines_of(r.stdout)
    (call,) = of(lines, "tool_call")
    assert call["decision"] == "deny" and call["outcome"] == "denied"
    assert call["approved_by"] is None and call["rule"]
    assert "blocked directory /etc" in call["reason"]
    (result,) = of(lines, "tool_result")
    assert result["outcome"] == "denied" and result["result"]["success"] is False


def test_lines_come_as_the_run_goes(ollama: FakeOllama, workspace: Path) -> None:
    """Each line is flushed when it happens: the start and the first words are on stdout
    while the server still holds back the rest of the answer."""
    gate = threading.Event()
    answer = reply("one two three four", token=4)
    answer.gate, answer.gate_at = gate, 2
    ollama.enqueue(answer)
    proc = start_agent(ollama, workspace, "count")
    try:
        assert proc.stdout is not None
        seen = read_until(proc.stdout, "text")
        assert seen[0]["type"] == "start"
        assert seen[-1]["text"] == "one "
        gate.set()
        out, err = proc.communicate(timeout=60)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
    rest = lines_of(out)
    assert proc.returncode == 0, err
    assert rest[-1]["type"] == "end" and rest[-1]["answer"] == "one two three four"


def test_ctrl_c_ends_the_stream_with_an_interrupted_line(
    ollama: FakeOllama, workspace: Path
) -> None:
    gate = threading.Event()
    answer = reply("first words and then more", token=6)
    answer.gate, answer.gate_at = gate, 2
    ollama.enqueue(answer)
    proc = start_agent(ollama, workspace, "talk")
    try:
        assert proc.stdout is not None
        seen = read_until(proc.stdout, "text")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    rest = lines_of(out) if out else []
    end = (seen + rest)[-1]
    assert end["type"] == "end" and end["stop_reason"] == "interrupted"
    # What had come of the answer is kept: all that was streamed as text lines, and a piece
    # that arrived as the signal did (the fake sends two before it waits).
    streamed = "".join(line["text"] for line in seen + rest if line["type"] == "text")
    assert end["answer"].startswith(streamed) and end["answer"] in ("first ", "first words ")
    assert [line["type"] for line in seen + rest].count("end") == 1
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "interrupted" in err


def test_a_server_error_ends_the_stream_and_exits_1(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(HttpError(500, "boom"))
    r = run_cli("run", "--output-format", "stream-json", "hi")
    assert r.code == 1
    start, end = lines_of(r.stdout)
    assert start["type"] == "start"
    assert end["type"] == "end" and end["stop_reason"] == "error" and "boom" in end["error"]
    assert r.stderr.startswith("agent: ") and "boom" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_stream_broken_midway_keeps_what_came(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.enqueue(
        Stream(
            [
                {"model": "qwen3:8b", "message": {"role": "assistant", "content": "Hi"}},
                b'{"error":"an error was encountered while running the model"}',
            ]
        )
    )
    r = run_cli("run", "--output-format", "stream-json", "hi")
    assert r.code == 1
    lines = lines_of(r.stdout)
    assert [line["type"] for line in lines] == ["start", "text", "end"]
    assert lines[-1]["answer"] == "Hi" and lines[-1]["stop_reason"] == "error"


def test_a_model_the_server_lacks_still_starts_and_ends(run_cli: RunCli) -> None:
    r = run_cli("run", "--output-format", "stream-json", "-m", "nosuch:7b", "hi")
    assert r.code == 1
    start, end = lines_of(r.stdout)
    assert start["type"] == "start" and start["tool_mode"] is None and start["tools"] is None
    assert end["stop_reason"] == "error" and "ollama pull nosuch:7b" in end["error"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--output-format", "xml"), "expected one of text, json, stream-json"),
        (("--json", "--output-format", "stream-json"), "contradict"),
    ],
)
def test_output_format_usage_errors(run_cli: RunCli, args: tuple[str, ...], words: str) -> None:
    r = run_cli("run", *args, "hi")
    assert r.code == 2 and words in r.stderr and r.stdout == ""


def test_output_format_json_is_json_and_text_is_the_answer(
    run_cli: RunCli, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply("Done."), reply("Done."), reply("Done."))
    both = run_cli("run", "--json", "--output-format", "json", "hi")
    assert both.code == 0 and json.loads(both.stdout)["answer"] == "Done."
    alone = run_cli("run", "--output-format", "json", "hi")
    assert json.loads(alone.stdout)["stop_reason"] == "answer"
    assert run_cli("run", "--output-format", "text", "hi").stdout == "Done.\n"


# -- an empty answer -----------------------------------------------------------------------


@pytest.mark.parametrize("output", ["json", "stream-json"])
def test_an_empty_answer_is_stop_reason_empty_and_exit_3(
    run_cli: RunCli, ollama: FakeOllama, output: str
) -> None:
    ollama.enqueue(reply(""), reply(""))  # asked once more, empty again
    r = run_cli("run", "--output-format", output, "hi")
    assert r.code == 3, r.stderr
    last = json.loads(r.stdout.splitlines()[-1])
    assert last["stop_reason"] == "empty" and last["answer"] == ""
    assert "empty answer again" in r.stderr


def test_an_empty_answer_exits_3_and_stdout_stays_empty(
    run_cli: RunCli, ollama: FakeOllama
) -> None:
    ollama.enqueue(reply(""), reply(""))
    r = run_cli("run", "hi")
    assert r.code == 3 and r.stdout == ""


def test_notices_are_lines_too(run_cli: RunCli, ollama: FakeOllama) -> None:
    ollama.add_model("gemma3:4b", ["completion"])
    ollama.enqueue(reply("Hello."))
    r = run_cli("run", "--output-format", "stream-json", "-m", "gemma3:4b", "hi")
    assert r.code == 0, r.stderr
    lines = lines_of(r.stdout)
    assert lines[0]["type"] == "start" and lines[0]["tool_mode"] == "prompt"
    (notice,) = of(lines, "notice")
    assert "has no native tool support" in notice["text"]


def test_lines_survive_a_reader_splitting_on_unicode_line_breaks(
    ollama: FakeOllama, workspace: Path
) -> None:
    """U+2028, U+2029 and U+0085 in the model's text are escaped: a reader splitting lines
    as Python's str.splitlines() does still gets one JSON object a line."""
    ollama.enqueue(reply("a\u2028b\u2029c\x85d"))
    proc = start_agent(ollama, workspace, "hi")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert [json.loads(line)["type"] for line in lines][-1] == "end"
    assert json.loads(lines[-1])["answer"] == "a\u2028b\u2029c\x85d"


def _strict(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


@pytest.mark.parametrize("output", ["stream-json", "json"])
def test_an_mcp_result_holding_nan_keeps_the_output_json(
    ollama: FakeOllama, workspace: Path, output: str
) -> None:
    """A hostile MCP server answers {"ratio": NaN, "big": 1e999}: Python reads both, and
    json.dumps would write NaN and Infinity back, which is not JSON. They are null."""
    server = Path(__file__).resolve().parents[1] / "fakes" / "mcp_hostile_numbers.py"
    (workspace / "cfg.yaml").write_text(
        f"mcp:\n  servers:\n    n:\n      command: {sys.executable}\n      args: [{server}]\n"
        "policy:\n  tools:\n    mcp__n__stat: allow\n"
    )
    ollama.enqueue(reply(tool_calls=[tool_call("mcp__n__stat", {})]), reply("fine"))
    done = subprocess.run(
        [sys.executable, "-m", "cli", "run", "-c", "cfg.yaml", "--output-format", output, "go"],
        cwd=workspace,
        env={**os.environ, "OLLAMA_HOST": ollama.url},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    parsed = [json.loads(line, parse_constant=_strict) for line in done.stdout.splitlines()]
    assert parsed and '"ratio": null' in done.stdout


def _a_run_with_work_to_keep(ollama: FakeOllama, workspace: Path, *args: str) -> Any:
    """A run that has read a file (work worth saving) and is now streaming its answer
    without end, stopped at its first text line."""
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]),
        Stream(reply("a b c d e f").lines[:2], endless=True),
    )
    proc = start_agent(ollama, workspace, *args)
    assert proc.stdout is not None
    return proc, read_until(proc.stdout, "text")


def _sigterm_mid_answer(ollama: FakeOllama, workspace: Path, *args: str) -> tuple[int, str, str]:
    """`agent run [args] "read a"`, given SIGTERM while its second model call streams without
    end (the file read before it is work worth saving): exit code, stdout, stderr."""
    (workspace / "a.txt").write_text("a\n")
    ollama.enqueue(
        reply(tool_calls=[tool_call("read_file", {"path": "a.txt"})]),
        Stream(reply("a b c d e f").lines[:2], endless=True),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", *args, "read a"],
        cwd=workspace,
        env={**os.environ, "OLLAMA_HOST": ollama.url},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while len(ollama.chat_bodies) < 2:  # the second call is under way (it never ends)
            assert proc.poll() is None
            threading.Event().wait(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def _saved_runs(home: Path) -> list[Path]:
    return sorted((home / ".local/share/metona-agent/sessions").glob("run-*"))


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_end_the_stream_and_keep_the_work(
    ollama: FakeOllama, workspace: Path, home: Path, sig: str
) -> None:
    """`timeout 60 agent run --output-format stream-json …` sends SIGTERM, a closed terminal
    SIGHUP: the run ends as after Ctrl-C — its one `end` line, the work saved — and exits
    128 + the signal's number."""
    number = getattr(signal, sig)
    proc, seen = _a_run_with_work_to_keep(ollama, workspace, "read a")
    try:
        proc.send_signal(number)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = seen + (lines_of(out) if out else [])
    assert [line["type"] for line in lines].count("end") == 1, (lines[-3:], err)
    assert lines[-1]["type"] == "end" and lines[-1]["stop_reason"] == "interrupted"
    assert proc.returncode == 128 + number
    assert "Traceback" not in err and f"agent: stopped by {sig}" in err
    assert "agent chat --resume run-" in err and len(_saved_runs(home)) == 1


def test_sigterm_ends_a_json_run_with_its_object(
    ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    code, out, err = _sigterm_mid_answer(ollama, workspace, "--output-format", "json")
    record = json.loads(out)
    assert record["stop_reason"] == "interrupted" and record["error"] == "stopped by SIGTERM"
    assert code == 143 and "Traceback" not in err
    assert len(_saved_runs(home)) == 1


def test_ctrl_c_again_and_again_cannot_cut_the_wind_down_short(
    ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    """A wrapper that forwards Ctrl-C while the terminal sends it too: SIGINTs keep coming
    while the run winds down. The first ends the run; the others are ignored, so the `end`
    line is written and the work saved all the same."""
    proc, seen = _a_run_with_work_to_keep(ollama, workspace, "read a")
    try:
        while proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            threading.Event().wait(0.0005)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = seen + (lines_of(out) if out else [])
    assert [line["type"] for line in lines].count("end") == 1, (lines[-3:], err)
    assert lines[-1]["stop_reason"] == "interrupted"
    assert proc.returncode == 130 and "Traceback" not in err
    assert "agent chat --resume run-" in err and len(_saved_runs(home)) == 1


def test_sigterm_ends_a_text_run_with_the_work_kept(
    ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    code, _out, err = _sigterm_mid_answer(ollama, workspace)
    assert code == 143 and "Traceback" not in err
    assert "agent: stopped by SIGTERM; the work so far is saved" in err
    assert len(_saved_runs(home)) == 1


def test_sighup_with_stdout_gone_still_keeps_the_work(
    ollama: FakeOllama, workspace: Path, home: Path
) -> None:
    """A closed terminal: the reader of stdout is gone too. The `end` line cannot be
    written, but the work is saved all the same."""
    proc, _seen = _a_run_with_work_to_keep(ollama, workspace, "read a")
    try:
        assert proc.stdout is not None
        proc.stdout.close()
        proc.send_signal(signal.SIGHUP)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(_saved_runs(home)) == 1, err
    assert "Traceback" not in err, err
