"""`make e2e`'s eval: the built-in `agent eval` suite against the real SmolLM2-135M model,
with the aids off and on, and both pass rates printed (docs/eval.md keeps the table).

The whole suite takes the 135M model 13 (aids on) to 40 (off) minutes a pass on 2 cores
(46 tasks, up to 10 steps each), so `make e2e` runs the slice SLICE (one or two tasks of
every category) unless `--eval-all` asks for all of it; it says which. Each pass's results
are kept in the scratch dir (eval-off.json, eval-on.json), for `agent eval --compare`.

Both passes use one config: the server's protocol, no streaming (the server cannot stream
tool calls), its context, and answers capped at 384 tokens (a 135M model held to a JSON
schema may write one string until the context is full). No temperature is set, so each pass
runs at the temperature it would get on a user's machine: the agent's default with the aids
off, the model's profile's with them on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "cli"]
MODEL = "smollm2-135m"
# One or two tasks of each category: 18 of the suite's 46 (`agent eval --list`).
SLICE = (
    "read-version,read-third-line,search-fixme,count-lines-first,create-hello,create-gitignore,"
    "edit-typo,multi-edit-year,move-rename-file,tree-scaffold,delete-file,multi-first-lines,"
    "long-last-line,git-what-changed,cjk-create-file,recovery-wrong-name,refusal-env,"
    "conflict-changed-meanwhile"
)
CONFIG = """\
ollama:
  api: openai
  stream: false
  max_num_ctx: {n_ctx}
  options: {{num_predict: 384}}
"""


def run(base_url: str, scratch: Path, env: dict[str, str], n_ctx: int, whole: bool) -> int:
    """Both passes; prints their rates; 0 when `agent eval` ran (a low rate is a finding,
    not a failure of `make e2e`), 1 when it could not."""
    config = scratch / "eval.yaml"
    config.write_text(CONFIG.format(n_ctx=n_ctx), encoding="utf-8")
    only = [] if whole else ["--only", SLICE]
    which = "the whole suite" if whole else f"a slice of {SLICE.count(',') + 1} tasks"
    print(f"[e2e eval] {which} of agent eval, aids off then on (--eval-all: every task)")
    rates: dict[str, dict[str, Any]] = {}
    for aids in ("off", "on"):
        started = time.monotonic()
        argv = [*AGENT, "eval", "--api", "openai", "--host", base_url, "-m", MODEL,
                "-c", str(config), "--aids", aids, "--output-format", "json", *only]  # fmt: skip
        proc = subprocess.run(
            argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=4 * 3600
        )
        if proc.returncode not in (0, 3):
            print(
                f"[e2e eval] aids {aids}: agent eval exited {proc.returncode}: {proc.stderr[-500:]}"
            )
            return 1
        (scratch / f"eval-{aids}.json").write_text(proc.stdout, encoding="utf-8")
        data = json.loads(proc.stdout)
        rates[aids] = data["summary"]
        summary = data["summary"]
        low, high = summary["ci_low"], summary["ci_high"]
        print(
            f"[e2e eval] aids {aids}: {summary['passed']} of {summary['total']} passed "
            f"({summary['rate']:.0%}, 95% interval {low:.0%}-{high:.0%}) "
            f"in {time.monotonic() - started:.0f}s"
        )
    for category in rates["on"]["by_category"]:
        off = rates["off"]["by_category"].get(category, {})
        on = rates["on"]["by_category"][category]
        print(
            f"[e2e eval]   {category:<11} off {off.get('passed', 0)}/{off.get('total', 0)}"
            f"   on {on['passed']}/{on['total']}"
        )
    print(f"[e2e eval] results: {scratch}/eval-off.json, {scratch}/eval-on.json")
    return 0
