"""A process that writes one file over and over through the real write path, for the crash
tests to kill, starve of disk or interrupt. Usage:

    python -m tests.fakes.writer_process TARGET STORE SIZE [COUNT] [--fsize BYTES]

It alternates between SIZE bytes of "a" and SIZE bytes of "b" (COUNT times; forever when
absent), prints "ready" once, and "wrote" after each write. With --fsize, the file size limit
is set (a full disk, as the writer sees it) and SIGXFSZ ignored, so the write gets EFBIG.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path

from cli.errors import ToolError
from cli.fs import reach, writing
from cli.journal.changes import ChangeStore


def main(argv: list[str]) -> int:
    fsize = None
    if "--fsize" in argv:
        at = argv.index("--fsize")
        fsize = int(argv[at + 1])
        del argv[at : at + 2]
    target_path, store_dir, size = argv[0], argv[1], int(argv[2])
    count = int(argv[3]) if len(argv) > 3 else None
    if fsize is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    store = ChangeStore(Path(store_dir))
    target = reach.Target(target_path, os.path.dirname(target_path), target_path)
    print("ready", flush=True)
    round_ = 0
    while count is None or round_ < count:
        data = (b"a" if round_ % 2 == 0 else b"b") * size
        try:
            writing.write(target, data, pending=store.pending)
        except ToolError as exc:
            print(f"error: {exc}", flush=True)
            return 1
        print("wrote", flush=True)
        round_ += 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
