"""The child side of run_command's sandbox: resource limits, then (in Landlock mode) Landlock
and a seccomp filter, then exec of the command. Linux only; stdlib only.

It runs as a script of its own, `python -I -S landlock.py PLAN_FD -- ARGV...`, between our fork
and the command's exec, rather than as a subprocess `preexec_fn`: Python documents preexec_fn
as unsafe when the parent has threads (a lock held at fork stays held in the child), and
ctypes allocates. A fresh interpreter costs ~15 ms and has no such locks.

The plan, read from PLAN_FD, is JSON:
    {"env": {name: value}, "parent": pid,
     "rlimits": {"cpu": seconds, "data": bytes, "nproc": count},
     "landlock": null | {"rules": [[path, "read" | "list" | "write"], ...]},
     "seccomp": null | "memory"}  (with no Landlock: filter only the memory calls)
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import stat
import struct
import sys
from collections.abc import Sequence
from typing import Any

# Our own failure, as opposed to the command's: coreutils' env/chroot/timeout use 125 too.
SETUP_FAILED = 125
ERROR_PREFIX = "metona-agent sandbox: "

# Writes outside the allowed dirs are impossible only if truncate(2) is covered too, which
# LANDLOCK_ACCESS_FS_TRUNCATE brought in ABI 3 (Linux 6.2).
MIN_ABI = 3

# -- Landlock (include/uapi/linux/landlock.h) -------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on every arch
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# The rights a rule on a file (not a directory) may carry; anything else is EINVAL.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_READ = FS_READ_FILE | FS_READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the UAPI header
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class SetupError(Exception):
    """The sandbox could not be put in place; the command must not run."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise SetupError(f"{what} failed: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when it has none (too old, or disabled at boot)."""
    if sys.platform != "linux":
        return 0
    result = _libc().syscall(
        _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(int(result), 0)


def handled_fs(abi: int) -> int:
    """Every filesystem right this ABI knows, except execute (reading governs exec: the
    kernel opens a program for reading before running it)."""
    rights = ((1 << 13) - 1) & ~FS_EXECUTE  # bits 1-12: the ABI 1 set
    if abi >= 2:
        rights |= FS_REFER  # else links and renames across dirs would be allowed
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV  # no terminal ioctls (TIOCSTI) on devices opened read-only
    return rights


def _rights(kind: str, handled: int, is_dir: bool) -> int:
    if kind == "write":
        rights = handled
    elif kind == "read":
        rights = _READ
    elif kind == "list":
        rights = FS_READ_DIR
    else:
        raise SetupError(f"unknown rule kind {kind!r}")
    return rights & handled if is_dir else rights & handled & _FILE_RIGHTS


def restrict(rules: Sequence[tuple[str, str]], abi: int) -> None:
    """Allow only what `rules` grant (plus no TCP, no signals or abstract sockets outside)
    for this process and everything it starts. Paths that do not exist are skipped."""
    libc = _libc()
    handled = handled_fs(abi)
    attr = _RulesetAttr(
        handled,
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0,
    )
    # The kernel takes the struct at the size it knows when the rest is zero
    # (copy_struct_from_user), so ABI 1-5 kernels read this fine.
    size = ctypes.sizeof(attr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(
        libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0),
        "landlock_create_ruleset",
    )
    try:
        for path, kind in rules:
            _add_rule(libc, ruleset, path, kind, handled)
        _check(libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, kind: str, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone, or not ours to open: granting nothing is the safe side
    try:
        rights = _rights(kind, handled, stat.S_ISDIR(os.fstat(fd).st_mode))
        if rights:
            rule = _PathBeneathAttr(rights, fd)
            _check(
                libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0),
                f"landlock_add_rule({path})",
            )
    finally:
        os.close(fd)


# -- seccomp (include/uapi/linux/seccomp.h, filter.h, audit.h) -------------------------------

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_AF_UNIX = 1
_X32_SYSCALL_BIT = 0x40000000

# Per machine: audit arch, socket(2), and the calls refused outright.
#   connect: Landlock (before ABI 9) does not check connecting to a pathname UNIX socket,
#     and a user's session bus or docker.sock is a way out (`systemd-run --user ...`).
#   io_uring_*: its SOCKET and CONNECT operations never pass through the syscalls above.
#   chmod/chown/xattr family: Landlock has no right for metadata, so without this a
#     command could `chmod 000` any file the user owns, allowed dir or not.
#   setpgid/setsid: a process in a group of its own outlives the timeout's killpg, and
#     there is no PID namespace here to take it down with the rest.
_CALLS: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "x86_64": (
        0xC000003E,
        41,
        (
            *(42, 425, 426, 427),  # connect, io_uring_setup/enter/register
            *(109, 112),  # setpgid, setsid
            *(90, 91, 92, 93, 94, 260, 268, 452),  # chmod, fchmod, chown, …, fchmodat2
            *(188, 189, 190, 197, 198, 199, 463, 466),  # set/removexattr(at) family
        ),
    ),
    "aarch64": (
        0xC00000B7,
        198,
        (
            *(203, 425, 426, 427),
            *(154, 157),
            *(52, 53, 54, 55, 452),  # fchmod, fchmodat, fchownat, fchown, fchmodat2
            *(5, 6, 7, 14, 15, 16, 463, 466),
        ),
    ),
}


# Per machine: mmap(2), and the calls that hold memory no rlimit counts (RLIMIT_DATA counts
# private writable mappings only): memfd_create, SysV shared memory (shmget, shmat), message
# queues (msgget) and semaphores (semget), the last two kept by the kernel after the command
# ends where there is no IPC namespace of its own (Landlock). These fail with ENOSYS, as on
# a kernel built without them, so that programs fall back to a file in /tmp or /dev/shm,
# whose size the sandbox caps. A shared anonymous mmap, and a stack-like one
# (MAP_GROWSDOWN, which RLIMIT_DATA does not count either), fail with EPERM.
_MEMORY: dict[str, tuple[int, tuple[int, ...]]] = {
    "x86_64": (9, (319, 29, 30, 68, 64)),
    "aarch64": (222, (279, 194, 196, 186, 190)),
}
_RET_ENOSYS = 0x00050000 | errno.ENOSYS
_ALU_AND_K = 0x54
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_MAP_SHARED_ANON = (0x21, 0x23)  # MAP_ANONYMOUS with MAP_SHARED or MAP_SHARED_VALIDATE
_MAP_TYPE_AND_ANON = 0x2F
_MAP_GROWSDOWN = 0x100
_SOCK_TYPE_MASK = 0xF  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_SOCK_STREAM = 1


def seccomp_supported() -> bool:
    return os.uname().machine in _CALLS


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program(machine: str, sockets: bool = True) -> bytes:
    """A BPF program: the memory calls of _MEMORY fail, and so does every call made through
    another ABI (x32, 32-bit compat), where socketcall(2) and ipc(2) would hide what is
    asked. With `sockets` (the Landlock sandbox, which has no network namespace): socket()
    only for an AF_UNIX stream (a datagram reaches any socket on the machine by sendto, no
    connect needed), and the calls in _CALLS fail with EPERM."""
    arch, socket_nr, refused = _CALLS[machine]
    mmap_nr, no_memory = _MEMORY[machine]
    prog = [
        _insn(_LD_ABS, 4),  # seccomp_data.arch
        _insn(_JEQ, arch, jt=1),
        _insn(_RET, _RET_EPERM),
        _insn(_LD_ABS, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        prog += [_insn(_JGE, _X32_SYSCALL_BIT, jf=1), _insn(_RET, _RET_EPERM)]
    for nr in refused if sockets else ():
        prog += [_insn(_JEQ, nr, jf=1), _insn(_RET, _RET_EPERM)]
    for nr in no_memory:
        prog += [_insn(_JEQ, nr, jf=1), _insn(_RET, _RET_ENOSYS)]
    shared, validate = _MAP_SHARED_ANON
    prog += [
        _insn(_JEQ, mmap_nr, jf=7),
        _insn(_LD_ABS, 40),  # low 32 bits of args[3], the flags
        _insn(_JSET, _MAP_GROWSDOWN, jt=4),
        _insn(_ALU_AND_K, _MAP_TYPE_AND_ANON),
        _insn(_JEQ, shared, jt=2),
        _insn(_JEQ, validate, jt=1),
        _insn(_RET, _RET_ALLOW),
        _insn(_RET, _RET_EPERM),
    ]
    if sockets:
        prog += [
            _insn(_JEQ, socket_nr, jf=7),
            _insn(_LD_ABS, 16),  # low 32 bits of args[0] (little-endian); the family is an int
            _insn(_JEQ, _AF_UNIX, jf=4),
            _insn(_LD_ABS, 24),  # args[1], the type
            _insn(_ALU_AND_K, _SOCK_TYPE_MASK),
            _insn(_JEQ, _SOCK_STREAM, jf=1),
            _insn(_RET, _RET_ALLOW),
            _insn(_RET, _RET_EPERM),
        ]
    prog.append(_insn(_RET, _RET_ALLOW))
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def install_seccomp(sockets: bool = True) -> None:
    program = seccomp_program(os.uname().machine, sockets)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "seccomp",
    )


# -- privileges and limits ------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


def drop_capabilities() -> None:
    """For root: empty the bounding set and the current sets, so neither this process nor
    anything it execs holds CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_DAC_OVERRIDE and the like."""
    libc = _libc()
    last = int(_read("/proc/sys/kernel/cap_last_cap") or "40")
    for cap in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping capabilities")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all zero
    _check(libc.capset(header, data), "capset")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def die_with_parent(parent: int | None) -> None:
    """SIGKILL when the agent goes away, as bwrap's --die-with-parent does; if it already
    has (our parent is no longer the pid it gave), stop here."""
    if parent is None or sys.platform != "linux":
        return
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    if os.getppid() != parent:
        raise SetupError("the agent exited before the command started")


def set_limits(limits: dict[str, int]) -> None:
    """CPU seconds, data size and processes, each never above what we were given; no cores.

    RLIMIT_DATA rather than RLIMIT_AS: since Linux 4.7 it counts every private writable
    mapping, so a 10 GB allocation fails, while the address space that JVMs, V8 and Go
    reserve but never touch (PROT_NONE) does not count; `ulimit -v` makes a JVM fail to
    start at all on a large machine."""
    data = limits.get("data")
    for name, value in (
        ("RLIMIT_CPU", limits.get("cpu")),
        ("RLIMIT_DATA", data),
        # The stack is memory RLIMIT_DATA does not count: capped by the same figure.
        ("RLIMIT_STACK", None if data is None else min(data, _stack_cap())),
        ("RLIMIT_NPROC", limits.get("nproc")),
        ("RLIMIT_CORE", 0),
    ):
        if value is None:
            continue
        which = getattr(resource, name)
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        if name == "RLIMIT_STACK":
            # Only the ceiling: the soft limit is each new thread's stack size (glibc), and
            # thread stacks count against RLIMIT_DATA.
            low = value if soft == resource.RLIM_INFINITY else min(soft, value)
            resource.setrlimit(which, (low, value))
            continue
        resource.setrlimit(which, (value, value))


def _stack_cap() -> int:
    """The stack's hard limit: what it is now if that is finite, else 1 GiB (a deep
    recursion's worth; `ulimit -s unlimited` then stops there)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    return hard if hard != resource.RLIM_INFINITY else 1 << 30


# -- the script ------------------------------------------------------------------------------


def confine(plan: dict[str, Any]) -> None:
    """Apply the plan to this process. Order matters: limits first (setrlimit needs no
    privilege we are about to lose), then no-new-privs (required by Landlock and seccomp for
    an unprivileged process, and it stops setuid programs from regaining anything). Under
    bubblewrap ("seccomp": "memory") only the memory calls are filtered: bwrap builds the
    rest, and it runs under the filter too (it uses none of those calls)."""
    set_limits(plan.get("rlimits") or {})
    die_with_parent(plan.get("parent"))
    landlock = plan.get("landlock")
    if landlock is None:
        if plan.get("seccomp") == "memory":
            _require_seccomp()
            _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
            install_seccomp(sockets=False)
        return
    abi = abi_version()
    if abi < MIN_ABI:
        raise SetupError(f"this kernel's Landlock ABI is {abi}; at least {MIN_ABI} is needed")
    _require_seccomp()
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    if os.geteuid() == 0:
        drop_capabilities()
    restrict([(str(p), str(k)) for p, k in landlock["rules"]], abi)
    install_seccomp()


def _require_seccomp() -> None:
    if not seccomp_supported():
        raise SetupError(f"no seccomp filter for this machine ({os.uname().machine})")


def main(argv: Sequence[str]) -> int:
    """`landlock.py PLAN_FD -- PROGRAM [ARGS...]`: read the plan, confine, exec."""
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print(f"{ERROR_PREFIX}usage: landlock.py PLAN_FD -- PROGRAM [ARGS...]", file=sys.stderr)
        return SETUP_FAILED
    try:
        with os.fdopen(int(argv[0]), encoding="utf-8") as file:
            plan = json.load(file)
        confine(plan)
        # The environment is the plan's, exactly: our own interpreter has added to it (PEP
        # 538 sets LC_CTYPE when the locale is C).
        os.execve(argv[2], list(argv[2:]), dict(plan["env"]))
    except (SetupError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{ERROR_PREFIX}{exc}", file=sys.stderr)
    return SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
