"""A FUSE passthrough that looks names up as macOS's APFS does: ignoring case and Unicode
normalisation, keeping each name as it was created (`.SSH/ID_RSA` opens `.ssh/id_rsa`; the
NFD spelling of `café` opens the NFC one; a new `Notes.TXT` is stored as `Notes.TXT`), and
as HFS+ does, leaving some invisible code points out (`.g\u200cit` opens `.git`).

    python tests/fakes/casefold_fs.py BACKING MOUNTPOINT

mounts BACKING (a plain directory) at MOUNTPOINT in the foreground until `fusermount -u
MOUNTPOINT`. Inode numbers are the backing files' own (`use_ino`), so hard links and the
identity checks of the agent see what they would see on the real disk. No caching of
entries or attributes in the kernel: a rename through one spelling is seen at once through
every other. Needs fusepy (the `dev` extra), libfuse2 and /dev/fuse (tests/fs/test_casefold.py).
"""

from __future__ import annotations

import errno
import os
import sys
import unicodedata
from typing import Any

from fuse import FUSE, FuseOSError, Operations

# What HFS+ leaves out of names when it compares them (git's list): `.g\u200cit` is `.git`.
IGNORED = dict.fromkeys(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def fold(name: str) -> str:
    """The key under which two names are the same entry: case and normalisation folded,
    and the code points HFS+ ignores left out."""
    decomposed = unicodedata.normalize("NFD", name.translate(IGNORED))
    return unicodedata.normalize("NFC", decomposed.casefold())


_STAT_KEYS = (
    "st_mode",
    "st_ino",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
)


def _attrs(info: os.stat_result) -> dict[str, Any]:
    out = {key: getattr(info, key) for key in _STAT_KEYS}
    for key in ("st_atime", "st_mtime", "st_ctime"):  # fusepy with use_ns reads these as ns
        out[key] = out.pop(f"{key}_ns")
    out["st_blocks"] = info.st_blocks
    return out


class CaseFold(Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)

    # -- names ----------------------------------------------------------------------------

    def _real(self, path: str) -> str:
        """The backing path for `path`: each component that exists under another spelling
        (same fold) is that entry; one that does not is kept as given (a new name)."""
        here = self.backing
        for name in (p for p in path.split("/") if p):
            exact = os.path.join(here, name)
            if os.path.lexists(exact):
                here = exact
                continue
            here = os.path.join(here, self._find(here, name) or name)
        return here

    @staticmethod
    def _find(directory: str, name: str) -> str | None:
        key = fold(name)
        try:
            names = os.listdir(directory)
        except OSError:
            return None
        return next((n for n in names if fold(n) == key), None)

    # -- attributes and directories -------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if fh is not None and getattr(fh, "fh", 0):
            return _attrs(os.fstat(fh.fh))
        return _attrs(os.lstat(self._real(path)))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode, follow_symlinks=False):
            raise FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: Any) -> list[str]:
        log = os.environ.get("CASEFOLD_FS_READDIR_LOG")
        if log:  # which dirs were listed, one a line (tests count the listings of a dir)
            with open(log, "a", encoding="utf-8", errors="surrogateescape") as out:
                out.write(path + "\n")
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, Any]:
        v = os.statvfs(self._real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        return {**{k: getattr(v, k) for k in keys}, "f_frsize": v.f_frsize, "f_namemax": 255}

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._real(path))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._real(target))
        return 0

    def link(self, target: str, source: str) -> int:
        os.link(self._real(source), self._real(target), follow_symlinks=False)
        return 0

    def rename(self, old: str, new: str) -> int:
        source, destination = self._real(old), self._real(new)
        if os.path.dirname(old) == os.path.dirname(new) and fold(old) == fold(new):
            # A change of spelling only (`a` → `A`): the entry takes the new one.
            destination = os.path.join(os.path.dirname(source), os.path.basename(new))
        os.rename(source, destination)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._real(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        real = self._real(path)
        if times is None:
            os.utime(real, follow_symlinks=False)
        else:
            os.utime(real, ns=times, follow_symlinks=False)
        return 0

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        if fh is not None and getattr(fh, "fh", 0):
            os.ftruncate(fh.fh, length)
        else:
            os.truncate(self._real(path), length)
        return 0

    # -- files ----------------------------------------------------------------------------

    def open(self, path: str, fi: Any) -> int:
        fi.fh = os.open(self._real(path), fi.flags)
        return 0

    def create(self, path: str, mode: int, fi: Any) -> int:
        fi.fh = os.open(self._real(path), fi.flags | os.O_CREAT, mode)
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        return os.pread(fi.fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        return os.pwrite(fi.fh, data, offset)

    def flush(self, path: str, fi: Any) -> int:
        return 0

    def release(self, path: str, fi: Any) -> int:
        os.close(fi.fh)
        return 0

    def fsync(self, path: str, datasync: int, fi: Any) -> int:
        os.fsync(fi.fh)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: casefold_fs.py BACKING MOUNTPOINT", file=sys.stderr)
        return 2
    backing, mountpoint = argv
    FUSE(
        CaseFold(backing),
        mountpoint,
        foreground=True,
        nothreads=True,
        raw_fi=True,
        use_ino=True,
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
