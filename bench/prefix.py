"""The prompt's prefix across runs and at chat's start: what a server with a KV cache must
evaluate for the first request of a run made after another run, and for chat's first message.

Cross-run cases: the installed `agent run` twice against one fake server that counts every
chat request as such a server pays for it (tests/fakes/server_work.py: the system message, the
tools, then the other messages; everything after the longest common prefix with the previous
request), the second run in another directory, in another project with an AGENTS.md, or on
another day (a fixed clock: the two runs' time zones are 26 hours apart, so their dates always
differ). The figure is what the second run's request evaluated / its context block and its
message (counted in the same run): 1.0× when nothing before them, the system prompt and the
~1.5k tokens of tool definitions, is evaluated again.

Chat's first message: the installed `agent chat` in a pseudo-terminal, with agent.prewarm on
and off; the figure is what the first message evaluated with prewarm / without it.

Counts, not times: one run each, the same with --quick."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import yaml

from bench.context import AGENT, Bench, child_env
from bench.measure import spawn
from bench.report import SERVER_WORK
from bench.result import Result, skipped
from tests.fakes.context import AHEAD, BEHIND, block_of, first_user_text
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.fake_openai import Answer, FakeOpenAI
from tests.fakes.server_work import ServerWork, tokenize

MODEL = "qwen3:8b"
CROSS_TARGET = 1.25  # evaluated / (context block + message)
PREWARM_TARGET = 0.25  # chat's first message with prewarm / without
PROTOCOLS = ("ollama", "openai")
CASES = {
    "other_dir": "another directory",
    "agents_md": "another project with an AGENTS.md",
    "next_day": "the same directory on another day",
}


def prefix(b: Bench) -> list[Result]:
    results: list[Result] = []
    for protocol in PROTOCOLS:
        for case, said in CASES.items():
            name = f"cross_run_{case}_{protocol}"
            what = (
                f"{protocol}: a run after a run, in {said}: tokens its request evaluated / its "
                "context block and message"
            )
            results.append(
                _guarded(name, what, CROSS_TARGET, functools.partial(_cross, b, protocol, case))
            )
        name = f"chat_first_message_prewarm_{protocol}"
        what = f"{protocol}: chat's first message, tokens evaluated with agent.prewarm / without"
        results.append(_guarded(name, what, PREWARM_TARGET, functools.partial(_chat, b, protocol)))
    for result in results:
        result.group = SERVER_WORK
    return results


def _guarded(name: str, what: str, target: float, measure: Any) -> Result:
    if not AGENT.exists():
        return skipped(name, what, target, f"no console script at {AGENT}")
    try:
        ours, baseline, detail = measure()
    except Exception as exc:  # one broken case must not hide the others
        return Result(name, what, target, error=f"{type(exc).__name__}: {exc}")
    value = ours / baseline if baseline else None
    return Result(
        name, what, target, shows="n", value=value, ours=ours, baseline=baseline, detail=detail
    )


def _server(protocol: str, work: ServerWork) -> tuple[FakeOllama | FakeOpenAI, dict[str, Any]]:
    """A started fake server of `protocol` counting into `work`, and the config for it."""
    if protocol == "ollama":
        ollama = FakeOllama(server_work=work)
        ollama.add_model(MODEL, ["completion", "tools"], 131_072)
        return ollama.start(), {"ollama": {"model": MODEL, "host": ollama.url}}
    openai = FakeOpenAI(server_work=work)
    openai.add_model(MODEL)
    server = openai.start()
    return server, {"ollama": {"model": MODEL, "api": "openai", "host": openai.url}}


def _answer(server: FakeOllama | FakeOpenAI, text: str) -> None:
    server.enqueue(reply(text) if isinstance(server, FakeOllama) else Answer(text))


def _fresh(b: Bench, name: str, config: dict[str, Any]) -> Path:
    home = b.dir(name)
    config_dir = home / ".config" / "metona-agent"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return home


def _cross(b: Bench, protocol: str, case: str) -> tuple[float, float, dict[str, Any]]:
    work = ServerWork()
    server, config = _server(protocol, work)
    try:
        home = _fresh(b, f"home-prefix-{case}-{protocol}", config)
        first = b.dir(f"ws-prefix-{case}-{protocol}-a")
        second = first if case == "next_day" else b.dir(f"ws-prefix-{case}-{protocol}-b")
        for project in {first, second}:
            (project / ".git").mkdir(exist_ok=True)
        if case == "agents_md":
            (second / "AGENTS.md").write_text("Run the tests with `make check`.\n")
        later = AHEAD if case == "next_day" else BEHIND
        runs = ((first, "list the files", BEHIND), (second, "what is in this project?", later))
        for cwd, prompt, tz in runs:
            _answer(server, "ok")
            env = child_env(home, TZ=tz)
            exited = spawn([str(AGENT), "run", prompt], env=env, cwd=cwd, check=False)
            if exited.code != 0:
                raise RuntimeError(f"agent run exited {exited.code}: {exited.stderr[-300:]}")
    finally:
        server.stop()
    body = server.chat_bodies[-1]
    text = first_user_text(body)
    block = block_of(text)
    if not block:
        raise RuntimeError("the request's first user message has no context block")
    expected = len(tokenize(block)) + len(tokenize(text[len(block) :]))
    row = work.rows[-1]
    detail = {
        "requests": work.requests,
        "compactions": 0,
        "evaluated": row.evaluated,
        "new": expected,
        "tokens": row.tokens,
        "lcp": row.lcp,
    }
    return float(row.evaluated), float(expected), detail


def _chat(b: Bench, protocol: str) -> tuple[float, float, dict[str, Any]]:
    evaluated = {}
    for prewarm in (True, False):
        work = ServerWork()
        server, config = _server(protocol, work)
        config["agent"] = {"prewarm": prewarm}
        try:
            side = "on" if prewarm else "off"
            home = _fresh(b, f"home-prewarm-{protocol}-{side}", config)
            cwd = b.dir(f"ws-prewarm-{protocol}-{side}")
            _answer(server, "Hello there.")
            _talk(home, cwd, server, prewarm)
        finally:
            server.stop()
        evaluated[prewarm] = work.rows[-1].evaluated
    detail = {
        "requests": 2,
        "compactions": 0,
        "evaluated": evaluated[True],
        "new": evaluated[False],
    }
    return float(evaluated[True]), float(evaluated[False]), detail


def _talk(home: Path, cwd: Path, server: FakeOllama | FakeOpenAI, prewarm: bool) -> None:
    """`agent chat` in a pseudo-terminal: one message once the prewarm (if any) is in."""
    import pexpect

    env = {**child_env(home), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(str(AGENT), ["chat"], cwd=str(cwd), env=env, encoding="utf-8", timeout=60)
    try:
        child.expect("›")
        deadline = time.monotonic() + 30
        while prewarm and not server.prewarm_bodies:
            if time.monotonic() > deadline:
                raise RuntimeError("no prewarm reached the server")
            time.sleep(0.05)
        child.send("hello\r")
        child.expect("Hello there.")
        child.expect("›")
    finally:
        child.terminate(force=True)
