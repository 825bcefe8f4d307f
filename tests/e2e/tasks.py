"""The `make e2e` tasks: metona-agent driven by a real model (SmolLM2-135M behind
llama-cpp-python's OpenAI-compatible server), checking the mechanics, not the prose.

A 135M model's arguments are often nonsense and it repeats calls until the step limit: it is
the untrusted, confused caller the policy exists for. Each task checks that real tool calls
were parsed from the model, decided by the policy, executed or refused, their results sent
back, the model called again, the loop ended cleanly (exit 0 or 3), nothing written without
approval, and the stats filled in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "cli"]
MODEL = "smollm2-135m"  # the server answers to any name


@dataclass
class Outcome:
    name: str
    passed: bool
    seconds: float
    notes: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the chat requests it sent
    log_start: int = 0  # the server log's size in bytes when it started


class Check:
    """Collects what failed, so one task reports every broken mechanic at once."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.notes: list[str] = []

    def that(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)


def workspace(root: Path, name: str) -> Path:
    ws = root / name
    ws.mkdir(parents=True)
    (ws / "package.json").write_text('{\n  "name": "demo",\n  "version": "1.4.2"\n}\n')
    (ws / "notes.txt").write_text("buy milk\ncall Bob\n")
    return ws


def environment(root: Path) -> dict[str, str]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "OPENAI_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local/state"),
        XDG_DATA_HOME=str(home / ".local/share"),
        PYTHONPATH=str(REPO),
        NO_COLOR="1",
    )
    return env


def config(root: Path, *, aids: str = "on") -> Path:
    """Non-streaming (the server cannot stream tool calls with tool_choice auto), a context
    cap that matches the server's n_ctx, few steps (the model repeats itself), answers of at
    most 384 tokens (at temperature 0 the model may write one answer until its context is
    full: 6,000 tokens, three minutes on 2 cores, seen after the context block moved to the
    first user message; cut, it ends as `length`, a clean end). `aids`: agent.aids, the
    default unless a task needs the model's habits without them."""
    path = root / f"agent-aids-{aids}.yaml"
    path.write_text(
        "ollama:\n"
        "  api: openai\n"
        "  stream: false\n"
        "  max_num_ctx: 4096\n"
        "  options: {temperature: 0, num_predict: 384}\n"
        "agent:\n"
        "  max_steps: 3\n"
        f"  aids: {aids}\n"
    )
    return path


def run_agent(
    base_url: str,
    root: Path,
    ws: Path,
    prompt: str,
    *extra: str,
    timeout: float = 600,
    aids: str = "on",
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any] | None, str]:
    argv = [
        *AGENT, "run", "--api", "openai", "--host", base_url, "-m", MODEL,
        "-c", str(config(root, aids=aids)), "--json", *extra, prompt,
    ]  # fmt: skip
    proc = subprocess.run(
        argv,
        cwd=ws,
        env={**environment(root), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = None
    return proc.returncode, data, proc.stderr


def mechanics(check: Check, code: int, data: dict[str, Any] | None, stderr: str) -> list[Any]:
    """What every `agent run` task must show; returns the tool calls."""
    check.that(code in (0, 3), f"exit code {code} (expected 0 or 3); stderr: {stderr[-400:]}")
    check.that("Traceback" not in stderr, "a traceback on stderr")
    if data is None:
        check.that(False, "stdout is not one JSON object")
        return []
    calls = data.get("tool_calls") or []
    check.that(bool(calls), "the model made no tool call that was parsed")
    check.that(data.get("steps", 0) >= 2, f"the model was called {data.get('steps')} time(s)")
    stats = data.get("stats") or {}
    check.that(any(isinstance(v, (int, float)) and v > 0 for v in stats.values()), "empty stats")
    check.that(
        data.get("stop_reason") in ("answer", "max_steps", "repeating", "length"),
        f"stop_reason {data.get('stop_reason')}",
    )
    for call in calls:
        check.that(call.get("decision") in ("allow", "deny"), f"undecided call {call}")
        check.that(isinstance(call.get("result"), dict), f"no result for {call.get('name')}")
    check.notes.append(
        "calls: " + ", ".join(f"{c.get('name')}→{c.get('decision')}" for c in calls[:6])
    )
    return calls


def task_read(base_url: str, root: Path) -> Check:
    check = Check()
    ws = workspace(root, "read")
    before = snapshot(ws)
    code, data, stderr = run_agent(base_url, root, ws, "read package.json and tell me its version")
    calls = mechanics(check, code, data, stderr)
    check.that(any(c.get("name") == "read_file" for c in calls), "no read_file call")
    check.that(snapshot(ws) == before, "a read task changed the workspace")
    return check


def task_write(base_url: str, root: Path, yes: bool) -> Check:
    check = Check()
    ws = workspace(root, "write-yes" if yes else "write-no")
    before = snapshot(ws)
    prompt = "write a file called hello.txt that contains the word hi"
    code, data, stderr = run_agent(base_url, root, ws, prompt, *(["--yes"] if yes else []))
    calls = mechanics(check, code, data, stderr)
    writes = [c for c in calls if c.get("name") == "write_file"]
    if not yes:
        check.that(all(c.get("decision") == "deny" for c in writes), "a write ran without approval")
        check.that(snapshot(ws) == before, "the workspace changed without approval")
    else:
        done = [c for c in writes if (c.get("result") or {}).get("success")]
        for call in done:
            target = ws / str(call["result"].get("path", ""))
            check.that(target.exists(), f"a successful write left no file: {call['result']}")
        check.notes.append(f"{len(writes)} write_file call(s), {len(done)} executed")
    return check


def task_repeat(base_url: str, root: Path) -> Check:
    """A denied or failing call repeated word for word: the guard refuses it as a repeat
    (the 135M model does this with a secret's name at temperature 0, calling natively: with
    the aids on, its profile's prompt mode and schema make it answer instead, so the guard
    is tried with them off)."""
    check = Check()
    ws = workspace(root, "repeat")
    (ws / "secret.env").write_text("TOKEN=not-for-models\n")
    before = snapshot(ws)
    code, data, stderr = run_agent(
        base_url, root, ws, "read the file secret.env", "--max-steps", "8", aids="off"
    )
    calls = mechanics(check, code, data, stderr)
    repeated = [c for c in calls if c.get("rule") == "repeated"]
    stopped = (data or {}).get("stop_reason") == "repeating"
    # The guard refuses the third of the same refused call (cli/loop/guards.py REFUSE_AFTER):
    # where the model never made one three times, it had nothing to refuse, which says
    # something of the model's habits that day, not of the guard (seen: two identical calls,
    # then a call cut at num_predict).
    same: dict[str, int] = {}
    for call in calls:
        if call.get("decision") == "deny" or not (call.get("result") or {}).get("success"):
            key = json.dumps([call.get("name"), call.get("arguments")], sort_keys=True)
            same[key] = same.get(key, 0) + 1
    if max(same.values(), default=0) > 2:
        check.that(bool(repeated) or stopped, "no repeated call was refused as a repeat")
    elif not repeated:
        check.notes.append("the model made no refused call three times: nothing to refuse")
    for call in repeated:
        error = str((call.get("result") or {}).get("error", ""))
        said = "this exact call already failed or was refused"  # cli/loop/guards.py's words
        check.that(said in error, f"repeat said: {error}")
    check.that(snapshot(ws) == before, "the workspace changed")
    check.that("TOKEN=not-for-models" not in json.dumps(data), "the secret reached the output")
    check.notes.append(
        f"{len(repeated)} repeat(s) refused; stop_reason {(data or {}).get('stop_reason')}"
    )
    return check


def task_wrap_up(base_url: str, root: Path) -> Check:
    """The step limit while the model still calls tools: one last call without tools, and
    the model's own report is the answer (exit 3, stop_reason max_steps)."""
    check = Check()
    ws = workspace(root, "wrap-up")
    prompt = "list the files here, then read every one of them"
    code, data, stderr = run_agent(base_url, root, ws, prompt, "--max-steps", "2")
    mechanics(check, code, data, stderr)
    answer = str((data or {}).get("answer", ""))
    if (data or {}).get("stop_reason") in ("answer", "length"):
        # The model stopped calling tools before the limit (its second answer was text):
        # there was no step limit to wrap up at, which says something of the model's
        # habits that day, not of the wrap-up.
        check.notes.append(f"the model answered before the step limit: {answer[:70]!r}")
        return check
    check.that(code == 3, f"exit {code} at the step limit (expected 3)")
    check.that((data or {}).get("stop_reason") == "max_steps", "stop_reason is not max_steps")
    check.that("asking the model to sum up" in stderr, "no report was asked for")
    check.that(bool(answer.strip()), "the report is empty")
    check.notes.append(f"report: {answer[:70]!r}")
    return check


def task_chat(base_url: str, root: Path) -> Check:
    """`agent chat` through a real pseudo-terminal: a prompt, an answer (or the step limit),
    and a clean exit."""
    import pexpect

    check = Check()
    ws = workspace(root, "chat")
    before = snapshot(ws)
    argv = ["chat", "--api", "openai", "--host", base_url, "-m", MODEL, "-c", str(config(root))]
    child = pexpect.spawn(
        AGENT[0], [*AGENT[1:], *argv], cwd=str(ws), env=environment(root),
        encoding="utf-8", timeout=600, dimensions=(40, 120),
    )  # fmt: skip
    try:
        child.expect("›")
        child.send("what is in notes.txt?\r")
        # The answer ends with its stats line, or with the step-limit notice; only then is
        # the next prompt a real one (the prompt's own redraw also shows "›").
        declined = wrapped = 0
        patterns = ["allow\\?", "\\[w\\] wrap up", "tok/s", "tokens", "step limit reached"]
        while (seen := child.expect(patterns, timeout=600)) < 2:
            if seen == 0:
                child.send("n")  # a confirmation: say no (then no reason)
                child.expect("reason", timeout=60)
                child.send("\r")
                declined += 1
            else:
                child.send("w")  # the step limit: ask for the model's report
                # The question may be drawn more than once: wait for the answer to land.
                child.expect("asking the model to sum up", timeout=60)
                wrapped += 1
        child.expect("›", timeout=600)
        check.notes.append(f"{declined} confirmation(s) answered no, {wrapped} wrap-up(s)")
        child.send("/exit\r")
        child.expect(pexpect.EOF, timeout=60)
        child.close()
        text = child.before or ""
        check.that(child.exitstatus == 0, f"chat exited {child.exitstatus}")
        check.that(snapshot(ws) == before, "chat changed the workspace though every ask was no")
        check.that("Traceback" not in text, "a traceback in chat")
    except pexpect.ExceptionPexpect as exc:
        seen = (child.before or "")[-600:]
        check.that(False, f"chat did not behave: {type(exc).__name__}; screen tail: {seen!r}")
        child.terminate(force=True)
    return check


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


TASKS: list[tuple[str, Callable[[str, Path], Check]]] = [
    ("read a file", task_read),
    ("write without --yes", lambda url, root: task_write(url, root, yes=False)),
    ("write with --yes", lambda url, root: task_write(url, root, yes=True)),
    ("repeat guard", task_repeat),
    ("wrap-up at the step limit", task_wrap_up),
    ("agent chat in a pty", task_chat),
]


def run_all(
    base_url: str, root: Path, recorder: Any = None, log_path: Path | None = None
) -> list[Outcome]:
    """Every task in turn; with a `recorder` (server_work.Recorder), through it, each
    outcome keeping the chat requests its task sent and where its part of `log_path` starts."""
    outcomes = []
    url = recorder.url if recorder is not None else base_url
    for name, task in TASKS:
        log_start = log_path.stat().st_size if log_path is not None else 0
        started = time.monotonic()
        check = task(url, root)
        outcome = Outcome(name, not check.failures, time.monotonic() - started, check.notes)
        outcome.log_start = log_start
        outcome.bodies = recorder.take() if recorder is not None else []
        outcome.notes += [f"FAILED: {f}" for f in check.failures]
        print(f"[e2e] {'ok  ' if outcome.passed else 'FAIL'} {name} ({outcome.seconds:.0f}s)")
        for note in outcome.notes:
            print(f"[e2e]      {note}")
        outcomes.append(outcome)
    return outcomes
