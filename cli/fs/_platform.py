"""The platform layer: every call that differs between Linux, macOS and other systems, each
with a Linux implementation, a macOS one and a portable fallback (POSIX calls only), chosen
once, when this module is first imported.

    function            Linux                         macOS                      portable
    O_PATH              os.O_PATH                     0 (O_RDONLY dirs)          0
    openat2             the syscall (ctypes)          None: the O_NOFOLLOW walk  None
    rename_noreplace    renameat2(RENAME_NOREPLACE)   renameatx_np(RENAME_EXCL)  link+unlink, mkdir
    full_fsync          fsync                         fcntl(F_FULLFSYNC)         fsync
    mount_id            /proc/self/fdinfo mnt_id      None (st_dev alone)        None
    umask               /proc/self/status             os.umask read+restore      read+restore
    child_cwd           cwd=/proc/self/fd/N           fcntl(F_GETPATH), checked  fchdir shim
    limit_memory        prlimit(RLIMIT_AS/DATA)       nothing (no prlimit)       nothing
    lock_exclusive      flock                         flock                      flock

METONA_PLATFORM — for tests and CI only, never needed by users — forces the choice:
  linux     the Linux implementations (on another system they fail where they would)
  macos     the macOS ones (on Linux, each falls back where the macOS call is missing)
  portable  the fallbacks alone: no openat2, no O_PATH, no renameat2, no /proc (`.ci/run`
            runs the file-tool, change-store, undo and path suites so)
  windows   the portable fallbacks, and `agent` refuses the commands that need POSIX with
            one line (cli.app's frame), as on native Windows
Unset or empty: sys.platform decides (linux, darwin → macos, win32 → windows, else portable).

Nothing here imports a POSIX-only module at module level unguarded: on native Windows this
module imports, and the functions that cannot work raise OSError(ENOSYS).
"""

from __future__ import annotations

import errno
import functools
import os
import platform as _machine
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

_fcntl: ModuleType | None
_resource: ModuleType | None
try:  # POSIX only: absent on native Windows
    import fcntl as _fcntl
except ImportError:  # native Windows (and its simulation in tests)
    _fcntl = None
try:
    import resource as _resource
except ImportError:
    _resource = None

VARIABLE = "METONA_PLATFORM"
NAMES = ("linux", "macos", "portable", "windows")


def _chosen() -> str:
    forced = os.environ.get(VARIABLE, "").strip().lower()
    if forced in NAMES:
        return forced
    system: str = sys.platform  # a plain str: mypy would take each branch as fixed
    if system.startswith("linux"):
        return "linux"
    if system == "darwin":
        return "macos"
    if system in ("win32", "cygwin"):
        return "windows"
    return "portable"


NAME = _chosen()
LINUX = NAME == "linux"
MACOS = NAME == "macos"
WINDOWS = NAME == "windows"
# Whether the fallbacks are in use where Linux's or macOS's own calls would be.
PORTABLE = NAME in ("portable", "windows")

# O_PATH (Linux) opens a directory for lookups only: no read permission needed, nothing run.
O_PATH: int = getattr(os, "O_PATH", 0) if LINUX else 0

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _enosys(what: str) -> OSError:
    return OSError(errno.ENOSYS, f"{what} is not available on this platform ({NAME})")


# -- openat2 ---------------------------------------------------------------------------------

# openat2(2): the syscall number is the same on both (new syscalls share one table since 5.1).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}


@functools.cache
def openat2(resolve: int) -> Callable[[int, str, int], int] | None:
    """Linux: the openat2 system call with these RESOLVE_* flags, through ctypes, or None
    where this machine cannot make it. macOS and portable: None (the callers walk the path
    one O_NOFOLLOW component at a time instead)."""
    number = _SYS_OPENAT2.get(_machine.machine()) if LINUX and sys.platform == "linux" else None
    if number is None:
        return None
    import ctypes  # here: only the first file operation pays for it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    # All longs: syscall(2) is variadic and reads each argument as a full register.
    syscall.argtypes = [
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]

    class OpenHow(ctypes.Structure):  # struct open_how {u64 flags; u64 mode; u64 resolve;}
        _fields_ = [
            ("flags", ctypes.c_uint64),
            ("mode", ctypes.c_uint64),
            ("resolve", ctypes.c_uint64),
        ]

    def call(dir_fd: int, path: str, flags: int) -> int:
        how = OpenHow(flags, 0, resolve)
        fd = syscall(number, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(fd)

    return call


# -- renames that never replace --------------------------------------------------------------

RENAME_NOREPLACE = 1  # Linux <linux/fs.h>
RENAME_EXCL = 0x00000004  # macOS <sys/stdio.h>
# The errors that mean "this kernel or file system cannot do it", not "it went wrong".
_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP)


@functools.cache
def _libc_rename(symbol: str) -> Callable[[int, str, int, str, int], None] | None:
    """renameat2 (glibc ≥ 2.28) or renameatx_np (macOS ≥ 10.12) through ctypes, or None."""
    import ctypes

    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), symbol)
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]

    def call(src_fd: int, src: str, dst_fd: int, dst: str, flags: int) -> None:
        if function(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), dst)

    return call


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Rename the entry `src` (in src_fd) to `dst` (in dst_fd), never over an existing entry:
    EEXIST if `dst` exists. Linux: renameat2(RENAME_NOREPLACE); macOS:
    renameatx_np(RENAME_EXCL); both atomic. Where the kernel or the file system refuses the
    flag (an old kernel, a seccomp filter, some FUSE and network file systems), and on other
    systems: the portable fallback, see _rename_portable."""
    if LINUX:
        call = _libc_rename("renameat2")
        flags = RENAME_NOREPLACE
    elif MACOS:
        call = _libc_rename("renameatx_np")
        flags = RENAME_EXCL
    else:
        call = None
        flags = 0
    if call is not None:
        try:
            call(src_fd, src, dst_fd, dst, flags)
            return
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
    _rename_portable(src_fd, src, dst_fd, dst)


def _rename_portable(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """No-replace rename from POSIX calls alone, each step refusing an existing `dst`:
    - a file (or symlink, FIFO…): link(2) `dst` to it (EEXIST if taken: atomic), then unlink
      `src` if it still names the same inode. Between the two, both names exist; a crash
      there leaves the file under both (nothing is lost). Where hard links are refused (FAT,
      some FUSE, Linux's protected_hardlinks on a file of another user): check-then-rename,
      whose window is the one call between the check and the rename.
    - a directory: mkdir(2) `dst` (EEXIST if taken: atomic), then rename(2) over that empty
      placeholder. Between the two, another process could replace the placeholder with an
      empty directory of its own (then that empty directory is replaced) or fill it (then
      the rename fails with ENOTEMPTY and nothing moves); a crash there leaves the empty
      placeholder."""
    info = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        os.mkdir(dst, 0o700, dir_fd=dst_fd)
        try:
            os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError:
            try:
                os.rmdir(dst, dir_fd=dst_fd)
            except OSError:
                pass  # not ours any more (filled or replaced meanwhile): left as it is
            raise
        return
    try:
        os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOENT, errno.EXDEV, errno.ENOTDIR):
            raise
        # No hard links here: look, then rename (racy: see the docstring).
        if _exists(dst_fd, dst):
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from None
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return
    try:
        now = os.stat(src, dir_fd=src_fd, follow_symlinks=False)
    except FileNotFoundError:
        return  # someone removed the old name meanwhile: the move is done
    if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
        os.unlink(src, dir_fd=src_fd)
    # else: another file took the old name meanwhile; it is theirs, left alone


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


# -- durability ------------------------------------------------------------------------------

_F_FULLFSYNC: int | None = getattr(_fcntl, "F_FULLFSYNC", None) if MACOS else None


def full_fsync(fd: int) -> None:
    """Make what was written to `fd` durable. Linux and portable: fsync(2). macOS:
    fcntl(F_FULLFSYNC), since its fsync leaves the data in the drive's cache; fsync where the
    file system refuses F_FULLFSYNC (some network and FUSE ones)."""
    if _F_FULLFSYNC is not None and _fcntl is not None:
        try:
            _fcntl.fcntl(fd, _F_FULLFSYNC)
            return
        except OSError:
            pass
    os.fsync(fd)


# -- mounts ----------------------------------------------------------------------------------


def mount_id(fd: int) -> int | None:
    """The kernel's id of the mount `fd` is on, beside st_dev (a bind mount of the same file
    system has the same st_dev). Linux: `mnt_id` in /proc/self/fdinfo. macOS: None (no bind
    mounts; every mount has its own st_dev). Portable: None (st_dev alone)."""
    if not LINUX:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            for line in info:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# -- the umask -------------------------------------------------------------------------------

_UMASK_LOCK = threading.Lock()


def umask() -> int:
    """The process's umask. Linux: read from /proc/self/status (4.7+), nothing changed.
    macOS and portable (and Linux without /proc): reading it means setting it, so it is set to
    0o077 and put back at once, under a lock (two readers never interleave); a file another
    thread creates in that moment gets 0o077, stricter, never looser."""
    if LINUX:
        try:
            with open("/proc/self/status", encoding="ascii", errors="replace") as status:
                for line in status:
                    if line.startswith("Umask:"):
                        return int(line.split()[1], 8)
        except (OSError, ValueError, IndexError):
            pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


# -- children started in a held directory ----------------------------------------------------

_F_GETPATH: int | None = getattr(_fcntl, "F_GETPATH", None) if MACOS else None
# The portable child: enter the held directory by its fd, then become the command.
_SHIM = "import os,sys;os.fchdir(int(sys.argv[1]));os.execv(sys.argv[2],sys.argv[2:])"


def child_cwd(dir_fd: int, argv: Sequence[str]) -> tuple[list[str], str | None]:
    """The argv and cwd for subprocess to start `argv` (argv[0] an absolute path) inside the
    directory `dir_fd` holds, not at a path that may have been swapped since. The caller
    passes dir_fd in pass_fds.
    Linux: cwd /proc/self/fd/N, the child's own copy of the fd, entered before exec.
    macOS: the fd's current path (fcntl F_GETPATH), used only if it still names the same
    directory (device and inode); the window is from that check to the child's chdir.
    Portable: a `python -I -S` shim that fchdir(2)s to the fd and execs argv: no window, one
    Python start-up more. No hook runs in the child before exec (unsafe with threads)."""
    if LINUX:
        return list(argv), f"/proc/self/fd/{dir_fd}"
    if _F_GETPATH is not None and _fcntl is not None:
        try:
            raw = _fcntl.fcntl(dir_fd, _F_GETPATH, b"\0" * 1024)
            path = os.fsdecode(raw.split(b"\0", 1)[0])
            held, named = os.fstat(dir_fd), os.stat(path)
            if path and (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return list(argv), path
        except OSError:
            pass
    if not sys.executable:
        raise _enosys("starting a child in a held directory")
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(dir_fd), *argv], None


# -- resource limits -------------------------------------------------------------------------


def limit_memory(pid: int, limit: int, *, heap_only: bool = False) -> bool:
    """Cap a started child's memory from outside (prlimit), since a hook run in the child
    before exec is unsafe in a process with threads: RLIMIT_DATA with `heap_only`, else
    RLIMIT_AS. True if set. Linux: prlimit(2). macOS and portable: nothing (no prlimit;
    macOS does not enforce RLIMIT_AS either) — the caller's timeouts still hold."""
    if not LINUX or _resource is None:
        return False
    try:
        kind = _resource.RLIMIT_DATA if heap_only else _resource.RLIMIT_AS
        _resource.prlimit(pid, kind, (limit, limit))
    except (AttributeError, OSError, ValueError):
        return False  # the child already exited, or no prlimit
    return True


# -- locks -----------------------------------------------------------------------------------


def lock_exclusive(fd: int) -> None:
    """An exclusive advisory lock on the open file `fd`, held until it is closed (flock(2) on
    all three; OSError(ENOSYS) where there is no fcntl module: native Windows)."""
    if _fcntl is None:
        raise _enosys("file locking")
    _fcntl.flock(fd, _fcntl.LOCK_EX)


# -- native Windows --------------------------------------------------------------------------

WINDOWS_LINE = (
    "native Windows is not supported yet; run agent under WSL2 (Windows Subsystem for "
    "Linux), where it works as on Linux"
)
