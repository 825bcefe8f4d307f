"""`make e2e`: drive metona-agent against a real model served by llama-cpp-python.

Run tests/e2e/setup_env.py first (make e2e does). This starts the server, runs the tasks of
tasks.py (`agent run --api openai --json …` and `agent chat` in a pty) and prints a summary,
then `agent eval` with the aids off and on (evaluate.py: a slice of the suite, or all of it
with `--eval-all`; `--no-eval` skips it) and prints both pass rates; `--smoke` also runs the
wire probes of smoke.py first. Scratch files (workspaces, the server log, the eval results)
go to a fresh temp dir, printed at the start. Exit 0 when every task passed and the eval ran.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import evaluate
import prefix
import server
import server_work
import smoke
import tasks

N_CTX = 8192  # SmolLM2's own context; the tasks' config caps theirs at 4096


def main() -> int:
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="metona-e2e-"))
    print(f"[e2e] scratch {scratch}", flush=True)
    log_path = scratch / "server.log"
    try:
        with (
            server.llama_server(n_ctx=N_CTX, log_path=log_path) as base_url,
            server_work.Recorder(base_url) as recorder,
        ):
            status = smoke.run(base_url) if "--smoke" in sys.argv[1:] else 0
            outcomes = tasks.run_all(base_url, scratch, recorder, log_path)
            failed = [o.name for o in outcomes if not o.passed]
            print(f"[e2e] {len(outcomes) - len(failed)} passed, {len(failed)} failed")
            status = status or (1 if failed else 0)
            tasks_end = log_path.stat().st_size  # the eval's requests are not the tasks'
            warm, lines = prefix.run(recorder.url, scratch, recorder, log_path)
            for line in lines:
                print(f"[e2e] {line}", flush=True)
            status = status or (0 if warm else 1)
            if "--no-eval" not in sys.argv[1:]:
                env = tasks.environment(scratch)
                whole = "--eval-all" in sys.argv[1:]
                status = evaluate.run(base_url, scratch, env, N_CTX, whole) or status
        report_server_work(outcomes, log_path, scratch / "server-work.json", tasks_end)
    except server.ServerError as exc:
        print(f"[e2e] error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("[e2e] interrupted; server stopped", file=sys.stderr)
        return 130
    print(f"[e2e] {'passed' if status == 0 else 'FAILED'} in {time.monotonic() - start:.1f}s")
    return status


def report_server_work(
    outcomes: list[tasks.Outcome], log_path: Path, kept: Path, end: int | None = None
) -> None:
    """The server's prompt evaluation per task, from its log (read once it has stopped),
    against the new tokens; printed, not part of the exit status. Each task's requests and
    counts are kept in `kept`."""
    log = log_path.read_bytes().decode("latin-1")  # one character a byte: offsets hold
    ends = [o.log_start for o in outcomes[1:]] + [len(log) if end is None else end]
    try:
        works = [
            server_work.measure(o.name, o.bodies, log, o.log_start, end)
            for o, end in zip(outcomes, ends, strict=True)
        ]
    except (RuntimeError, OSError, ValueError) as exc:
        print(f"[e2e] server work: not measured: {exc}")
        return
    for line in server_work.report(works):
        print(f"[e2e] {line}")
    detail = [{**vars(w), "bodies": o.bodies} for w, o in zip(works, outcomes, strict=True)]
    kept.write_text(json.dumps(detail, indent=1), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
