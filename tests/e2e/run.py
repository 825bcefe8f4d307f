"""`make e2e`: drive metona-agent against a real model served by llama-cpp-python.

Run tests/e2e/setup_env.py first (make e2e does). This starts the server, runs the tasks of
tasks.py (`agent run --api openai --json …` and `agent chat` in a pty) and prints a summary;
`--smoke` also runs the wire probes of smoke.py first. Scratch files (workspaces, the server
log) go to a fresh temp dir, printed at the start. Exit 0 when every task passed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server
import smoke
import tasks


def main() -> int:
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="metona-e2e-"))
    print(f"[e2e] scratch {scratch}", flush=True)
    try:
        with server.llama_server(n_ctx=4096, log_path=scratch / "server.log") as base_url:
            status = smoke.run(base_url) if "--smoke" in sys.argv[1:] else 0
            outcomes = tasks.run_all(base_url, scratch)
            failed = [o.name for o in outcomes if not o.passed]
            print(f"[e2e] {len(outcomes) - len(failed)} passed, {len(failed)} failed")
            status = status or (1 if failed else 0)
    except server.ServerError as exc:
        print(f"[e2e] error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("[e2e] interrupted; server stopped", file=sys.stderr)
        return 130
    print(f"[e2e] {'passed' if status == 0 else 'FAILED'} in {time.monotonic() - start:.1f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
