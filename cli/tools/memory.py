"""What the model has seen of each file in this session, to notice when someone else changed
it since: a write over an edit the model never read fails with a conflict instead."""

from __future__ import annotations

from cli.fs.fingerprint import Fingerprint


class FileMemory:
    """Path → the fingerprint of the file when the model last read or wrote it."""

    def __init__(self) -> None:
        self._seen: dict[str, Fingerprint] = {}

    def remember(self, path: str, fingerprint: Fingerprint | None) -> None:
        if fingerprint is None:
            self._seen.pop(path, None)
        else:
            self._seen[path] = fingerprint

    def expected(self, path: str) -> Fingerprint | None:
        return self._seen.get(path)

    def clear(self) -> None:
        """A new conversation: the model has seen nothing yet."""
        self._seen.clear()


class EditFailures:
    """How many edit_file calls failed on each file in this turn: after two, the error
    suggests write_file with the whole content (small models often do better with whole files,
    aider's benchmarks found). The agent clears it at the start of every turn."""

    def __init__(self) -> None:
        self._count: dict[str, int] = {}

    def fail(self, path: str) -> int:
        """Count one more failure on `path`; how many there have been this turn."""
        self._count[path] = self._count.get(path, 0) + 1
        return self._count[path]

    def clear(self) -> None:
        self._count.clear()
