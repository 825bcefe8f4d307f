"""`python -m bench.worker OP PARAMS-JSON`: one measured operation in a process of its own, so
that its peak RSS is its own (bench/spawner.py reads it) and its timing leaves out the
interpreter's start and the imports. Prints one JSON object: {"seconds": …, "detail": {…}}.

The agent is built as `agent run` builds it (cli/wiring.build_agent, from this process's
environment, which the parent points at a temp HOME); a tool is called as the agent calls it:
the policy resolves and checks the paths (Policy.decide), then the tool runs on them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the baselines' processes do without them
    from cli.loop.agent import Agent
    from cli.loop.approval import Approval, ApprovalRequest

Report = dict[str, Any]


def _refuse(request: ApprovalRequest) -> Approval:
    """Nothing measured may need a person: a question is a refusal, and shows in the result."""
    from cli.loop.approval import Approval

    return Approval(False, by="bench", reason="the benchmark answers no question")


def _agent(params: Mapping[str, Any], host: str = "http://127.0.0.1:9") -> Agent:
    from cli.config.loading import parse_config
    from cli.wiring import Choices, build_agent

    environ = dict(os.environ)
    return build_agent(
        Choices(host=host),
        parse_config(params.get("config", ""), "bench.yaml"),
        environ=environ,
        cwd=params["cwd"],
        home=environ["HOME"],
        approver=lambda _policy: _refuse,
    )


_LISTS = ("results", "entries")  # what a walk found: thousands of entries


def tool(params: Mapping[str, Any]) -> Report:
    """One call of tool `name` with `args`; the detail is its result without the lists."""
    from cli.tools import ALL_TOOLS

    agent = _agent(params)
    name, args = params["name"], params["args"]
    decision = agent.policy.decide(name, args)
    if decision.action == "deny":
        raise SystemExit(f"the policy denies {name} {args}: {decision.reason}")
    run = ALL_TOOLS[name].run
    started = time.perf_counter()
    result = run(agent.context, args, decision.paths)
    seconds = time.perf_counter() - started
    if not result.get("success"):
        raise SystemExit(f"{name} failed: {result}")
    return {"seconds": seconds, "detail": {k: v for k, v in result.items() if k not in _LISTS}}


def write_file(params: Mapping[str, Any]) -> Report:
    """write_file of `size` characters over a file of as many, `repeat` times (each with
    other content than the file holds), into the change store of this HOME. The time is
    the first write's, what one write_file in an `agent run` costs (the store is opened,
    and whatever it reads once per process is read, then); the later ones are detail."""
    from cli.tools import ALL_TOOLS

    agent = _agent(params)
    path, contents = _prepare_overwrite(params)
    run = ALL_TOOLS["write_file"].run
    times = []
    for index in range(params["repeat"]):
        args = {"path": path.name, "content": contents[index % 2]}
        paths = agent.policy.decide("write_file", args).paths  # resolved afresh: a new inode
        started = time.perf_counter()
        result = run(agent.context, args, paths)
        times.append(time.perf_counter() - started)
        if not result.get("success") or "change" not in result:
            raise SystemExit(f"write_file failed or kept no backup: {result}")
    store = agent.context.changes
    # Lines of the journal, counted without parsing it (history() would, and its memory
    # would count as the write's).
    held = 0
    if store is not None and store.journal.exists():
        with store.journal.open("rb") as journal:
            held = sum(1 for _ in journal)
    return {"seconds": times[0], "detail": {"later": times[1:], "changes": held}}


def write_by_hand(params: Mapping[str, Any]) -> Report:
    """The same durable overwrite written out by hand: the old content copied to a backup
    and fsynced, the new one to a temp file and fsynced, renamed over, the directory
    fsynced. The time is the first write's, as for write_file."""
    path, contents = _prepare_overwrite(params)
    backups = Path(params["backups"])
    backups.mkdir(parents=True, exist_ok=True)
    times = []
    for index in range(params["repeat"]):
        started = time.perf_counter()
        data = contents[index % 2].encode("utf-8")
        old = path.read_bytes()
        _durable(backups / f"backup-{index}", old)
        temp = path.with_name(f".{path.name}.tmp")
        _durable(temp, data)
        os.rename(temp, path)
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        times.append(time.perf_counter() - started)
    return {"seconds": times[0], "detail": {"later": times[1:]}}


def _prepare_overwrite(params: Mapping[str, Any]) -> tuple[Path, tuple[str, str]]:
    """The file to overwrite, holding the second of two contents of `size` characters."""
    from bench.fixtures import text_of_size

    size = params["size"]
    contents = (text_of_size(size, "write-a"), text_of_size(size, "write-b"))
    path = Path(params["cwd"]) / params["file"]
    path.write_text(contents[1], encoding="utf-8")
    return path, contents


def _durable(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def loop(params: Mapping[str, Any]) -> Report:
    """One turn of the real agent loop against the fake server at `url`, which the parent
    scripted (each step a read_file call, then an answer) and whose arrival times it reads."""
    from cli.loop.events import Finished, ToolResult

    agent = _agent(params, host=params["url"])
    started = time.perf_counter()
    events = list(agent.run([], params["prompt"]))
    seconds = time.perf_counter() - started
    finished = events[-1]
    if not isinstance(finished, Finished):
        raise SystemExit(f"the loop did not finish: {finished!r}")
    results = [e for e in events if isinstance(e, ToolResult)]
    failed = [e.result for e in results if not e.result.get("success")]
    if failed:
        raise SystemExit(f"{len(failed)} tool call(s) failed, the first: {failed[0]}")
    detail = {"model_steps": finished.steps, "stop": finished.stop_reason, "tools": len(results)}
    return {"seconds": seconds, "detail": detail}


def loop_baseline(params: Mapping[str, Any]) -> Report:
    """A plain client: POSTs the bodies the agent sent, one after another, reading each
    streamed answer line by line."""
    import requests

    bodies = json.loads(Path(params["bodies"]).read_text(encoding="utf-8"))
    url = params["url"] + "/api/chat"
    started = time.perf_counter()
    with requests.Session() as session:
        for body in bodies:
            with session.post(url, json=body, stream=True, timeout=60) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if line:
                        json.loads(line)
    return {"seconds": time.perf_counter() - started, "detail": {"requests": len(bodies)}}


OPS: dict[str, Callable[[Mapping[str, Any]], Report]] = {
    "tool": tool,
    "write_file": write_file,
    "write_by_hand": write_by_hand,
    "loop": loop,
    "loop_baseline": loop_baseline,
}


def main(argv: list[str]) -> int:
    op, params = argv[0], json.loads(argv[1])
    report = OPS[op](params)
    sys.stdout.write(json.dumps(report, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
