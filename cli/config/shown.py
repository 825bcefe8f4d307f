"""Things said once: a note the user has read need not come back at every start. Each is an
empty file under a state dir, named by the hash of what was said (and where): only whether
one exists is ever looked at, nothing is read back from it."""

from __future__ import annotations

import hashlib
from pathlib import Path


class ShownOnce:
    """Keys (any text) marked as shown, under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _file(self, key: str) -> Path:
        return self.directory / hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()

    def shown(self, key: str) -> bool:
        return self._file(key).exists()

    def mark(self, key: str) -> None:
        """Remember it as shown; a failure to (a read-only state dir) only means it is shown
        again next time."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._file(key).touch(mode=0o600)
        except OSError:
            pass

    def first_time(self, key: str) -> bool:
        """Not shown yet: True, and marked as shown from now on."""
        if self.shown(key):
            return False
        self.mark(key)
        return True
