"""How the disk matches names: exactly (Linux's usual file systems), or ignoring case and
Unicode normalisation (macOS's APFS and HFS+ by default, ext4/f2fs casefold directories,
SMB and many FUSE mounts), where `~/.SSH/ID_RSA` and `~/.ssh/id_rsa`, or the NFD and NFC
spellings of `café`, are one entry.

Found by looking at each directory, never assumed per OS: a name the directory holds is
looked up again with its case swapped and in its other normal form; the same (device,
inode) back means the directory folds. Containment is then decided on the path as the
disk names it (`on_disk`): each existing component spelled as its directory holds it, so
that a path the model spelled `/WS/Notes.txt` is the allowed `/ws/notes.txt` and
`~/.Local/State/metona-agent` the agent's own state. What does not exist yet has no spelling
on disk; dirs named in the policy are compared with it folded (`Places`) wherever their
directory folds or cannot be told.
"""

from __future__ import annotations

import itertools
import os
import stat
import unicodedata
from collections.abc import Iterable

# How many entries of a directory `folds` looks at for a name that can tell.
_PROBE_ENTRIES = 64
# How many entries of another fold `_entry_name` stats for the same file (an alias).
_ALIAS_ENTRIES = 10_000


# Code points HFS+ leaves out when it compares names (git's list, in its is_hfs_dotgit): on
# such a disk `.g\u200cit` opens `.git`.
_IGNORED: dict[int, None] = dict.fromkeys(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def fold(text: str) -> str:
    """`text` with case and normalisation folded, and the code points HFS+ ignores left
    out: equal for every spelling that a folding directory takes for one name (`/`, which
    no name holds, is kept)."""
    if text.isascii():
        return text.lower()
    decomposed = unicodedata.normalize("NFD", text.translate(_IGNORED))
    return unicodedata.normalize("NFC", decomposed.casefold())


def nfc(text: str) -> str:
    """`text` as the lists match it, which ignore normalisation: in normal form C
    (composed), without the code points HFS+ ignores."""
    return text if text.isascii() else unicodedata.normalize("NFC", text.translate(_IGNORED))


def _spellings(name: str) -> list[str]:
    """Other spellings of `name` that a folding directory takes for it and an exact one,
    in general, does not."""
    out = [name.swapcase(), unicodedata.normalize("NFD", name), unicodedata.normalize("NFC", name)]
    return [s for s in dict.fromkeys(out) if s != name and "/" not in s and "\x00" not in s]


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def name_folds(directory: str, name: str, info: os.stat_result) -> bool | None:
    """Does `directory`, which holds `name` (lstat `info`), find it under another spelling
    too? None: `name` has none to try (no cased letter, no composed character)."""
    tried = False
    for spelling in _spellings(name):
        try:
            other = os.lstat(os.path.join(directory, spelling))
        except OSError:
            tried = True  # not found (or not lookable): this spelling is another name
            continue
        if _same(other, info):
            return True
        tried = True  # another entry of its own: the directory tells them apart
    return False if tried else None


def on_disk(path: str) -> str:
    """`path` (absolute, `..` collapsed) with each component that exists spelled as its
    directory holds it: on a folding disk the name the model used may differ from the
    entry's. Components below the first that does not exist are kept as given. A symlink
    is not followed at the last component (the entry itself is named); above it, lookups
    follow links as the kernel does."""
    if not path.startswith("/"):
        return path
    out = "/"
    parts = [p for p in path.split("/") if p]
    for index, name in enumerate(parts):
        here = os.path.join(out, name)
        try:
            info = os.lstat(here)
        except (OSError, ValueError):
            return os.path.join(out, *parts[index:])
        if name not in (".", "..") and name_folds(out, name, info):
            here = os.path.join(out, _entry_name(out, name, info))
        out = here
    return out


def _entry_name(directory: str, name: str, info: os.stat_result) -> str:
    """The name `directory` holds for the entry `name` found (`info`): `name` itself if
    listed, else the listed name of the same fold that is the same file."""
    listing = _listing(directory)
    if listing is None:
        return name  # unlistable (execute-only): the spelling given is all there is
    names, by_fold = listing
    candidates: list[str] = by_fold.get(fold(name), [])
    if name in candidates:
        return name
    # Then any entry that is the same file: a disk may take other aliases (8.3 short names,
    # trailing dots) for a name.
    others = itertools.islice((n for n in names if n not in candidates), _ALIAS_ENTRIES)
    for candidate in itertools.chain(candidates, others):
        try:
            if _same(os.lstat(os.path.join(directory, candidate)), info):
                return candidate
        except OSError:
            continue
    return name


# A dir of at least this many entries keeps its listing while it is unchanged (its mtime,
# ctime, size and links the same): spelling a path in it then costs a stat, not a listing
# of the whole dir (each tool call resolves its paths twice, each component in turn).
CACHED_LISTING_MIN = 1000
_LISTINGS_KEPT = 8
_Listing = tuple[list[str], dict[str, list[str]]]
_LISTINGS: dict[tuple[int, int], tuple[tuple[int, int, int, int], _Listing]] = {}


def _listing(directory: str) -> _Listing | None:
    """`directory`'s names in the order listed, and by fold; None: it cannot be listed."""
    try:
        info = os.stat(directory)
    except (OSError, ValueError):
        return None
    key = (info.st_dev, info.st_ino)
    version = (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_nlink)
    kept = _LISTINGS.get(key)
    if kept is not None and kept[0] == version:
        return kept[1]
    try:
        with os.scandir(directory) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return None
    by_fold: dict[str, list[str]] = {}
    for n in names:
        by_fold.setdefault(fold(n), []).append(n)
    if len(names) >= CACHED_LISTING_MIN:
        _LISTINGS.pop(key, None)
        while len(_LISTINGS) >= _LISTINGS_KEPT:
            del _LISTINGS[next(iter(_LISTINGS))]
        _LISTINGS[key] = (version, (names, by_fold))
    return names, by_fold


_FOLDS: dict[tuple[int, int], bool] = {}


def folds(directory: str) -> bool | None:
    """Does a lookup in `directory` ignore case and normalisation? Probed on its own entries
    (the first that can tell), else on its own name in its parent when that is on the same
    device; remembered per directory (device, inode). None: nothing could tell (an empty
    directory at the root of its device, or one that cannot be read)."""
    try:
        info = os.stat(directory)
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    key = (info.st_dev, info.st_ino)
    if key in _FOLDS:
        return _FOLDS[key]
    answer: bool | None = None
    try:
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries):
                if count >= _PROBE_ENTRIES:
                    break
                try:
                    found = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                answer = name_folds(directory, entry.name, found)
                if answer is not None:
                    break
    except OSError:
        pass
    if answer is None:
        parent, name = os.path.split(os.path.normpath(directory))
        try:
            if name and os.stat(parent).st_dev == info.st_dev:
                answer = name_folds(parent, name, os.lstat(directory))
        except OSError:
            pass
    if answer is not None:
        _FOLDS[key] = answer
    return answer


def deepest_existing(path: str) -> str:
    """`path` or its nearest ancestor that exists."""
    here = path
    while not os.path.lexists(here):
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return here


def _within(path: str, root: str) -> bool:
    # cli.fs.paths.is_within, repeated: paths imports this module.
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root.rstrip("/") + "/")


class Places:
    """Dirs a path may be inside of — blocked dirs, the agent's own state — decided as the
    disk decides: each dir spelled as on disk, and compared folded too where the directory
    it is (or would be created) in folds or cannot be told. A dir that must keep paths OUT
    errs that way: on an exact disk below a folding one, `/MNT/x` may count as inside
    `/mnt/x` though it is another dir."""

    def __init__(self, dirs: Iterable[str]) -> None:
        spelled: list[str] = []
        for d in dirs:
            spelled += [d, on_disk(d)]
        self.dirs = tuple(dict.fromkeys(spelled))
        self._set = frozenset(self.dirs)
        # (folded, as spelled) for each dir whose directory folds or cannot be told.
        self._folded = tuple((fold(d), d) for d in self.dirs if folds(_probe_dir(d)) is not False)
        self._folded_set = frozenset(key for key, _ in self._folded)

    def holding(self, path: str) -> str | None:
        """The dir that holds `path` (absolute), or None."""
        found = next((d for d in self.dirs if _within(path, d)), None)
        if found is not None or not self._folded:
            return found
        key = fold(path)
        return next((d for folded, d in self._folded if _within(key, folded)), None)

    def has(self, path: str) -> bool:
        """Is `path` one of the dirs itself (a walk's entry whose parent is in none)?"""
        return path in self._set or (bool(self._folded) and fold(path) in self._folded_set)


def _probe_dir(path: str) -> str:
    """Where to ask whether lookups of `path`'s names fold: the dir itself when it exists
    (its entries), else the nearest existing ancestor (where it would be created)."""
    here = deepest_existing(path)
    return here if os.path.isdir(here) else os.path.dirname(here)
