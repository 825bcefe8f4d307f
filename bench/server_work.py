"""The server's work: how many prompt tokens a server with a KV cache (llama.cpp, Ollama, LM
Studio, vLLM) must evaluate over a long session, against the tokens that were new.

Each session is the installed `agent run --yes --json` against a fake server that counts
every chat request as such a server pays for it (tests/fakes/server_work.py): everything after the
longest common prefix with the previous request, in tokens of the fake's own tokenizer, all
of it when Ollama reloads the model for another `num_ctx`. The model calls read_file on 40
distinct files, one a step, then answers; the files are large enough that the history
overflows the context at least twice. A conversation that only ever appends costs 1.0×; one
that compacts to a third of its budget when full costs about 1.5× in the steady state.

Sessions: an 8k and a 32k context on each protocol. Ollama: `ollama.max_num_ctx` 8192 or
32768, the model trained for 128k. OpenAI-compatible: a server that says its context as vLLM
does (`max_model_len` in /v1/models) and refuses a longer prompt in vLLM's words. The figures
are counts, not times: one run each, the same with --quick."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from bench import fixtures
from bench.context import AGENT, Bench, child_env
from bench.measure import spawn
from bench.report import SERVER_WORK
from bench.result import Result, skipped
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call
from tests.fakes.fake_openai import Answer, Call, FakeOpenAI
from tests.fakes.server_work import ServerWork, prompt_tokens

STEPS = 40
RATIO_TARGET = 1.5  # evaluated / new over a session
NUM_CTX_TARGET = 1  # num_ctx changes after a session's first request
MIN_COMPACTIONS = 2  # a session that overflows less does not test compaction
MODEL = "qwen3:8b"
TRAINED = 131_072  # the Ollama model's context: larger than any cap here
PROMPT = "Read every file here, one at a time, then say you are done."


@dataclass(frozen=True)
class Session:
    protocol: str  # "ollama" | "openai"
    context: int  # ollama.max_num_ctx, or the context the OpenAI-compatible server serves
    file_bytes: int  # each file read

    @property
    def name(self) -> str:
        return f"{self.protocol}_{self.context // 1024}k"


# Files sized so that each session's history (40 results) is three to four times its context.
SESSIONS = (
    Session("ollama", 8192, 2400),
    Session("openai", 8192, 2400),
    Session("ollama", 32768, 8000),
    Session("openai", 32768, 8000),
)


def server_work(b: Bench) -> list[Result]:
    results: list[Result] = []
    for session in SESSIONS:
        name = f"server_work_{session.name}"
        what = (
            f"{session.protocol} {session.context // 1024}k: prompt tokens the server evaluates "
            f"/ tokens that were new, {STEPS} read_file steps of {session.file_bytes:,} B"
        )
        if not AGENT.exists():
            missing = skipped(name, what, RATIO_TARGET, f"no console script at {AGENT}")
            missing.group = SERVER_WORK
            results.append(missing)
            continue
        try:
            work, exited, run = _run(b, session)
        except Exception as exc:  # one broken session must not hide the others
            error = f"{type(exc).__name__}: {exc}"
            results.append(Result(name, what, RATIO_TARGET, error=error, group=SERVER_WORK))
            continue
        results += _results(session, name, what, work, exited, run)
    return results


def _run(b: Bench, session: Session) -> tuple[ServerWork, Any, dict[str, Any]]:
    """One session: the agent run to its end; the server's count, how it exited, and what
    its --json said."""
    workspace, home = b.dir(f"ws-work-{session.name}"), b.dir(f"home-work-{session.name}")
    names = fixtures.text_files(workspace, STEPS, session.file_bytes, f"work-{session.name}")
    config = {
        "ollama": {"max_num_ctx": session.context, "model": MODEL},
        "agent": {"max_steps": STEPS + 5},
    }
    work = ServerWork()
    argv = [str(AGENT), "run", "--yes", "--json"]
    if session.protocol == "ollama":
        ollama = FakeOllama(server_work=work, follow_loads=True, prompt_tokens=prompt_tokens)
        ollama.add_model(MODEL, ["completion", "tools"], TRAINED)
        calls = [reply(tool_calls=[tool_call("read_file", {"path": n})]) for n in names]
        ollama.enqueue(*calls, reply("I have read every file."))
        server: FakeOllama | FakeOpenAI = ollama.start()
        env = child_env(home, OLLAMA_HOST=ollama.url)
    else:
        openai = FakeOpenAI(
            server_work=work,
            tokenizer=prompt_tokens,
            context=session.context,
            context_style="vllm",
        )
        openai.add_model(MODEL, max_model_len=session.context)
        answers = [Answer(tool_calls=[Call("read_file", {"path": n})]) for n in names]
        openai.enqueue(*answers, Answer("I have read every file."))
        server = openai.start()
        config["ollama"] |= {"api": "openai", "host": openai.url}
        env = child_env(home)
    config_dir = home / ".config" / "metona-agent"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        exited = spawn([*argv, PROMPT], env=env, cwd=workspace, check=False)
    finally:
        server.stop()
    try:
        said = json.loads(exited.stdout)
    except ValueError:
        said = {}
    if exited.code != 0 or said.get("stop_reason") != "answer":
        stderr = exited.stderr.strip().splitlines()
        raise RuntimeError(
            f"agent run exited {exited.code}, stop_reason {said.get('stop_reason')!r}, after "
            f"{work.requests} counted requests: {stderr[-1] if stderr else ''}"
        )
    return work, exited, said


def _results(
    session: Session, name: str, what: str, work: ServerWork, exited: Any, said: dict[str, Any]
) -> list[Result]:
    summary = work.summary()
    detail = {
        "protocol": session.protocol,
        "context": session.context,
        "file_bytes": session.file_bytes,
        "steps": said.get("steps"),
        **summary,
        "rows": [r.to_json() for r in work.rows],
    }
    error = ""
    if work.compactions < MIN_COMPACTIONS:
        error = (
            f"the history was changed {work.compactions} times, not ≥ {MIN_COMPACTIONS}: the "
            "session does not overflow its context enough to measure compaction"
        )
    ratio = Result(
        name,
        what,
        RATIO_TARGET,
        shows="n",
        value=work.ratio,
        ours=float(work.evaluated),
        baseline=float(work.new),
        rss_mb=exited.rss_mb,
        error=error,
        detail=detail,
        group=SERVER_WORK,
    )
    if session.protocol != "ollama":
        return [ratio]
    changes = Result(
        f"num_ctx_changes_{session.context // 1024}k",
        f"ollama {session.context // 1024}k: num_ctx changes after the session's first request "
        f"(sizes sent: {', '.join(map(str, summary['num_ctx'])) or 'none'})",
        NUM_CTX_TARGET,
        unit="n",
        shows="n",
        value=float(work.num_ctx_changes),
        rss_mb=exited.rss_mb,
        detail={"num_ctx": summary["num_ctx"], "session": name},
        group=SERVER_WORK,
    )
    return [ratio, changes]
