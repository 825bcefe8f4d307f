"""`make e2e`: drive metona-agent against a real model served by llama-cpp-python.

Run tests/e2e/setup_env.py first (make e2e does). For now this starts the server and runs the
wire smoke check (smoke.py); the `agent run --api openai --json ...` tasks come next.
Scratch files (the server log) go to a fresh temp dir, printed at the start.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server
import smoke


def main() -> int:
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="metona-e2e-"))
    print(f"[e2e] scratch {scratch}", flush=True)
    try:
        with server.llama_server(log_path=scratch / "server.log") as base_url:
            status = smoke.run(base_url)
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
