"""`python -I -S bench/spawner.py REPORT ARGV...`: run ARGV (stdin, stdout, stderr, cwd and
environment are this process's) and write to the file REPORT, as JSON, when it started and
ended (time.monotonic(), the clock the fake server stamps requests with), its wait status
and its peak RSS.

Why not from the harness itself: a child's ru_maxrss counts the memory of the process it
was forked from (Linux carries the old mm's high-water mark across exec, and a vfork child
gets its parent's), so every program spawned by the harness would weigh at least the
harness's 40-odd MB. This process is ~9 MB (no site-packages): a child smaller than that
(grep, find) reads as ~9 MB, which no figure's target is about."""

import json
import os
import sys
import time


def main() -> int:
    report, argv = sys.argv[1], sys.argv[2:]
    started = time.monotonic()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, status, usage = os.wait4(pid, 0)
    ended = time.monotonic()
    with open(report, "w", encoding="utf-8") as file:
        json.dump(
            {"started": started, "ended": ended, "status": status, "maxrss_kb": usage.ru_maxrss},
            file,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
