"""`python -m cli` runs the same app as the `agent` console script."""

import os
import sys

# `python -m cli` puts the current directory first on sys.path (the console script puts its
# own bin directory there). The model writes files in that directory, and a module it wrote
# there (rich.py, resource.py, …) would be what a later import of ours finds: some imports
# wait until they are needed, which may be after a tool call. `cli` itself is imported
# already; the directory goes, as `python -P` leaves it out.
first = sys.path[0] if sys.path and not getattr(sys.flags, "safe_path", False) else None
if first is not None and os.path.realpath(first or os.curdir) == os.path.realpath(os.curdir):
    del sys.path[0]

from cli.app import main  # noqa: E402  (after the sys.path fix above)

if __name__ == "__main__":
    main()
