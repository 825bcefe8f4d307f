"""The read gate: the one check that every byte a tool returns from a file passes first.

read_file's content, edit_file's quoted lines, search_files' matching lines and git_diff's
sections come from files; before any of it is returned, the file — its identity taken with
fstat on the file as opened, never through a symlink (for a file git read itself: the
work-tree file, opened the same way) — passes `check`, which refuses it as

hidden           a secret by name, or inside a blocked dir (the policy's `hides`)
secret           a secret under another name: a hard link to one (Policy.secret_of)
outside_allowed  outside the allowed dirs, unless below the path the policy decided on for
                 this call (a read outside them is always put to a person)
hard_link        a regular file with other names, unless it is the very file the policy put
                 to a person for this call (read_file, edit_file): its content is shared with
                 a name that may be a secret or lie outside the allowed dirs
too_large        larger than the cap of the tool reading it

The first two are never returned, whoever asks. The next two need a person: read_file and
edit_file ask before they run (cli/safety/policy.py) and are let through here only for what was
asked; search_files and git_diff, which read many files and cannot ask in the middle of
their output, leave such a file's content out, count it and say so.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cli.errors import ToolError
from cli.fs.paths import FileId, is_within
from cli.fs.reading import Gate
from cli.fs.wording import too_large
from cli.tools.base import ToolContext

HIDDEN = "hidden"
SECRET = "secret"
OUTSIDE = "outside_allowed"
HARD_LINK = "hard_link"
TOO_LARGE = "too_large"
RULES = (HIDDEN, SECRET, OUTSIDE, HARD_LINK, TOO_LARGE)
# What a person may let through (read_file asks them); the rest is never returned.
FOR_A_PERSON = frozenset({OUTSIDE, HARD_LINK})


@dataclass(frozen=True)
class Refusal:
    rule: str  # one of RULES
    reason: str  # one line naming the file: why its content is not returned


class Refused(ToolError):
    """A read the gate refused (raised through cli/fs/reading.py's read hook)."""

    def __init__(self, refusal: Refusal) -> None:
        hint = "read_file it (again): a person is asked" if refusal.rule in FOR_A_PERSON else ""
        super().__init__(refusal.reason, hint)
        self.refusal = refusal


def check(
    ctx: ToolContext,
    path: str,
    info: os.stat_result,
    *,
    max_bytes: int,
    under: str | None = None,
    asked: FileId | None = None,
    hides: Callable[[str], bool] | None = None,
) -> Refusal | None:
    """Why the content of the file at `path` (absolute, symlinks resolved; `info` its fstat
    as opened) must not be returned, or None.

    under   the path argument the policy decided on for this call: what lies below it was
            put to a person if it is outside the allowed dirs (None: nothing was)
    asked   the regular file the policy put to a person for its hard links in this call
            (read_file's and edit_file's checked file; None: nothing was)
    hides   the policy's `hides`, or a walk's cheaper per-entry form of it (ctx.walk_hides)
    """
    if (hides or ctx.hides)(path):
        return Refusal(
            HIDDEN, f"{ctx.show(path)} is a secret or inside a blocked directory; it is never read"
        )
    regular = stat.S_ISREG(info.st_mode)
    linked = regular and info.st_nlink > 1
    secret = ctx.secret_of(info.st_dev, info.st_ino) if linked else None
    if secret:
        return Refusal(
            SECRET,
            f"{ctx.show(path)} is {secret} under another name (a hard link to it), a secret; "
            "it is never read",
        )
    if ctx.roots and ctx.root_of(path) is None and not (under and is_within(path, under)):
        return Refusal(OUTSIDE, f"{ctx.show(path)} is outside the allowed directories")
    if linked and not _asked_about(asked, info):
        return Refusal(
            HARD_LINK,
            f"{ctx.show(path)} has {info.st_nlink - 1} other name(s) (hard links), which may be "
            "secrets or lie outside the allowed directories: its content is shared with them",
        )
    if regular and info.st_size > max_bytes:
        return Refusal(TOO_LARGE, str(too_large(ctx.show(path), info.st_size, max_bytes)))
    return None


@dataclass(frozen=True)
class Reads:
    """How one tool call reads through the gate: `check`'s arguments but the file's."""

    ctx: ToolContext
    max_bytes: int
    under: str | None = None
    asked: FileId | None = None
    hides: Callable[[str], bool] | None = None

    def check(self, path: str, info: os.stat_result) -> Refusal | None:
        return check(
            self.ctx,
            path,
            info,
            max_bytes=self.max_bytes,
            under=self.under,
            asked=self.asked,
            hides=self.hides,
        )

    def hook(self, path: str) -> Gate:
        """`check` as cli/fs/reading.py's read hook: raises Refused, so nothing of a refused
        file is read."""

        def gate(info: os.stat_result) -> None:
            refusal = self.check(path, info)
            if refusal is not None:
                raise Refused(refusal)

        return gate


def _asked_about(asked: FileId | None, info: os.stat_result) -> bool:
    """Is this the very file a person was asked about for its hard links?"""
    return (
        asked is not None
        and asked.links > 1
        and (asked.device, asked.inode) == (info.st_dev, info.st_ino)
    )


# -- saying what was left out -----------------------------------------------------------------

_WHY = {
    HIDDEN: "it is a secret or in a blocked directory",
    SECRET: "it is a secret under another name (a hard link to one)",
    OUTSIDE: "it is outside the allowed directories (read it with read_file to be asked)",
    HARD_LINK: "it has other hard links (read it with read_file to be asked)",
    TOO_LARGE: "it is larger than read_file reads (policy.limits.max_read_bytes)",
}


def left_out(counts: Mapping[str, int], noun: str = "section") -> list[str]:
    """One phrase per rule that left something out: "1 file's section left out: it has other
    hard links (read it with read_file to be asked)"."""
    return [
        f"{files(counts[rule], noun)} left out: {_WHY[rule]}" for rule in RULES if counts.get(rule)
    ]


def files(count: int, noun: str) -> str:
    """The count in words: "1 file's section", "2 files' sections"."""
    return f"1 file's {noun}" if count == 1 else f"{count} files' {noun}s"
