"""Enough of a file's identity to tell that it changed since it was looked at."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Fingerprint:
    """Enough of a file's identity to tell that it changed: an editor that saves in place
    changes the size or mtime, one that saves by rename changes the inode."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> Fingerprint:
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
