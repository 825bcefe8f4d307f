"""Where run_command's commands run: which OS sandbox this machine offers, and the launch that
puts one command inside it (pure but for lazy, cached probes; no UI).

A deny list of command strings is no boundary (README "Safety"); this is. Two sandboxes, as
Codex CLI and Claude Code do it on Linux:

bwrap     bubblewrap: the root file system read-only, the allowed dirs writable, `.git` in
          them read-only, secrets and blocked dirs hidden, private /tmp, /run, /dev and
          /proc, no network (a fresh namespace has only loopback), its own PID namespace,
          dies with us.
landlock  for machines where bwrap cannot create namespaces (Ubuntu's AppArmor rule for
          unprivileged user namespaces, WSL1): Landlock lets writes happen only beneath the
          allowed dirs (and a private TMPDIR) and reads everywhere but the secrets and /dev;
          seccomp refuses sockets other than AF_UNIX, connect(2), io_uring, metadata changes
          (chmod, chown, xattrs) and new sessions or process groups. cli/landlock.py says
          why each is there. `.git` stays writable: Landlock cannot take back, beneath an
          allowed dir, what it granted there.

If neither works, commands are refused unless the YAML says `policy.commands.sandbox: off`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cli import sensitive
from cli.config import SANDBOX_MODES, LimitsConfig
from cli.paths import expand_user, is_within

KINDS = ("bwrap", "landlock")  # in the order "auto" tries them
INSTALL_HINT = "install bubblewrap (`sudo apt-get install bubblewrap`)"

# Cache and build-output dirs that the scan for secrets and execution surfaces inside the
# writable dirs does not enter: tool-managed, often huge, not where a user keeps
# credentials, and written by every build. A secret-named file inside them stays readable
# to commands, and what in them runs later (cargo's target/, .terraform providers) stays
# writable (README "Safety" says so). Environments and dependencies (.venv, node_modules,
# __pycache__) are execution surfaces in cli/sensitive.py: locked whole, not entered.
SCAN_SKIP = frozenset(
    {
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".cache",
        "target",
        ".gradle",
        ".terraform",
    }
)

# Blocked dirs that programs cannot do without stay visible, read-only: /etc holds
# ld.so.cache, passwd, certificates; /sys the CPU topology that nproc and BLAS read. bwrap
# replaces /proc, /dev, /tmp and /run with private ones anyway. Hiding any of these (or a
# parent of them) would break every command rather than protect anything.
NEEDED_DIRS = (
    "/",
    "/bin",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
)

# Daemons listen in /run: the session bus (`systemd-run --user` runs anything outside),
# docker.sock (root). A read-only mount does not stop connect(2) on a socket, so /run is
# replaced by an empty tmpfs; only when PATH itself lives there (NixOS) do we keep it and
# hide these instead.
RUN_SOCKETS = (
    "/run/user",
    "/run/dbus",
    "/run/systemd",
    "/run/docker.sock",
    "/run/docker",
    "/run/podman",
    "/run/containerd",
    "/run/libvirt",
    "/run/snapd.socket",
)

# Devices a Landlock-confined command may open (bwrap's --dev makes the same set).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run here; the message says how to fix that."""


@dataclass(frozen=True)
class SandboxSpec:
    """What the sandbox is built from: `policy.commands.sandbox`, the policy's dirs and its
    classes of path (Policy.classes: the same lists the file tools obey)."""

    mode: str = "auto"  # auto | bwrap | landlock | off
    writable: tuple[str, ...] = ()  # Policy.allowed_dirs: absolute, symlinks resolved
    blocked: tuple[str, ...] = ()  # Policy.blocked_dirs
    home: str = ""  # whose secrets to hide; "" means ours
    classes: sensitive.Classes | None = None  # None: the built-in lists for `home`
    scan_entries: int = 200_000  # policy.limits.sandbox_scan_entries

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise ValueError(f"sandbox mode must be one of {', '.join(SANDBOX_MODES)}")

    @property
    def lists(self) -> sensitive.Classes:
        if self.classes is not None:
            return self.classes
        return sensitive.build(self.home or os.path.expanduser("~"))


@dataclass(frozen=True)
class Launch:
    """One command, ready to start: `argv` runs under cli/landlock.py, which reads `plan`."""

    kind: str  # bwrap | landlock | off
    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: str  # JSON for cli/landlock.py
    scratch: str | None = None  # a private temp dir (Landlock) to remove afterwards


# -- what this machine offers -----------------------------------------------------------------


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def _bwrap_help(path: str) -> str:
    try:
        return subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _bwrap_flags(path: str) -> list[str]:
    """The namespace flags every run uses. --disable-userns (bwrap 0.8) keeps commands from
    making user namespaces of their own, a large kernel attack surface; it needs a user
    namespace of ours, which also works as root."""
    flags = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if "--disable-userns" in _bwrap_help(path):
        flags += ["--unshare-user", "--disable-userns"]
    return flags


def _tmpfs(bwrap: str, path: str, size: int) -> list[str]:
    """A private tmpfs, capped at `size` where bwrap can (--size, bwrap 0.6): files in a
    tmpfs are memory that no rlimit of the command counts."""
    sized = ["--size", str(size)] if "--size" in _bwrap_help(bwrap) else []
    return [*sized, "--tmpfs", path]


@functools.cache
def _bwrap_problem(path: str) -> str | None:
    """Why bwrap at `path` cannot sandbox (None: it can). Probed once by running /bin/true
    the way every command runs: Ubuntu 24.04 ships a bwrap whose namespaces AppArmor
    refuses, and only trying shows that."""
    # No home and no writable dir: the probe must not depend on what lies in the user's
    # files (a link planted there must not make every later run fall back to Landlock).
    bare = SandboxSpec("bwrap", home="/nonexistent-metona-agent-probe")
    argv = [*bwrap_argv(path, bare, "/", {}, 1024 * 1024), "/bin/true"]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} does not run: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return lines[0] if lines else f"{path} exited with status {proc.returncode}"
    return None


def bwrap_problem() -> str | None:
    path = bwrap_path()
    return _bwrap_problem(path) if path else "bwrap is not installed"


@functools.cache
def landlock_problem() -> str | None:
    """Why the Landlock sandbox cannot run here (None: it can)."""
    from cli import landlock  # here: ctypes only when a command runs

    if not landlock.seccomp_supported():
        return f"no seccomp filter for this machine ({os.uname().machine})"
    abi = landlock.abi_version()
    if abi < landlock.MIN_ABI:
        found = f"ABI {abi}" if abi else "none"
        return f"the kernel's Landlock is too old or off ({found}; Linux 6.2+ is needed)"
    return None


def choose(mode: str, available: Collection[str] | None = None) -> str:
    """The sandbox a command runs in: "bwrap", "landlock" or "off"; SandboxUnavailable if
    `mode` cannot be had. `available` replaces the machine's probes (tests)."""
    if mode == "off":
        return "off"
    probes: Mapping[str, Callable[[], str | None]] = {
        "bwrap": bwrap_problem,
        "landlock": landlock_problem,
    }
    wanted = KINDS if mode == "auto" else (mode,)
    problems: dict[str, str] = {}
    for kind in wanted:
        if available is None:
            problem = probes[kind]()
        else:
            problem = None if kind in available else "not available"
        if problem is None:
            return kind
        problems[kind] = problem
    raise SandboxUnavailable(_refusal(mode, problems))


def _refusal(mode: str, problems: Mapping[str, str]) -> str:
    if mode == "bwrap":
        return (
            f"policy.commands.sandbox is bwrap, but bubblewrap cannot run here "
            f"({problems['bwrap']}): {INSTALL_HINT} or set policy.commands.sandbox: auto"
        )
    if mode == "landlock":
        return (
            f"policy.commands.sandbox is landlock, but {problems['landlock']}: "
            "set policy.commands.sandbox: auto"
        )
    if sys.platform != "linux":
        return (
            f"run_command's sandbox needs Linux (bubblewrap or Landlock); on {sys.platform} "
            "set policy.commands.sandbox: off to run commands unconfined"
        )
    return (
        f"run_command needs a sandbox and this machine has none (bubblewrap: "
        f"{problems['bwrap']}; Landlock: {problems['landlock']}): {INSTALL_HINT} or set "
        "policy.commands.sandbox: off to run commands unconfined"
    )


# -- what a command may see ---------------------------------------------------------------------


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _hideable(blocked: str) -> bool:
    return not any(is_within(needed, blocked) for needed in NEEDED_DIRS)


def hidden_paths(spec: SandboxSpec) -> list[str]:
    """The existing secrets named by path (cli/sensitive.py, anchored at the home dir) and
    the blocked dirs, symlinks resolved, outermost first, none inside another. A dir
    holding an allowed dir stays: the policy refuses to work in a blocked dir anyway, and
    the allowed one must stay reachable. Secrets found by name inside the writable dirs
    come from `scan` (bwrap only)."""
    home = spec.home or os.path.expanduser("~")
    candidates = spec.lists.secrets.anchored_paths()
    candidates += [expand_user(d, home) for d in spec.blocked]
    found: list[str] = []
    for path in candidates:
        if not os.path.isabs(path) or not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue  # a dangling link: nothing to hide, and a bind over it would fail
        if not _hideable(real) or any(is_within(w, real) for w in spec.writable):
            continue
        found.append(real)
    return _outermost(found)


def _outermost(paths: Iterable[str]) -> list[str]:
    found = sorted(set(paths), key=lambda p: (_depth(p), p))
    return [p for i, p in enumerate(found) if not any(is_within(p, q) for q in found[:i])]


class ScanTooLarge(SandboxUnavailable):
    """Too many entries in the writable dirs to check them all before a command runs."""


@dataclass(frozen=True)
class Scan:
    """What a command must not see or change inside the writable dirs (bwrap)."""

    masked: tuple[str, ...]  # secrets: an empty file or dir is bound over each
    locked: tuple[str, ...]  # execution surfaces and the agent's config: read-only
    # The dirs between a writable root and each locked path, bound onto themselves: a mount
    # point cannot be renamed, so `mv .github x && mkdir -p .github/workflows` fails.
    pinned: tuple[str, ...]
    split: tuple[str, ...]  # dirs that hold a surface that does not exist yet: read-only,
    # their existing entries bound writable again, so nothing new can be created in them


def scan(spec: SandboxSpec) -> Scan:
    """Walk every writable dir (iteratively, never following a symlink, not entering the
    dirs of SCAN_SKIP nor what is already masked or locked) for the entries the policy's
    lists name; raise ScanTooLarge past `spec.scan_entries`: a command we cannot check is
    not run."""
    lists = spec.lists
    masked: list[str] = []
    locked: list[str] = []
    holders: list[str] = []
    seen = 0
    stack = [w for w in spec.writable if os.path.isdir(w) and not os.path.islink(w)]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            # Unlistable (a mode-000 dir the command could chmod, a path too long): what
            # we cannot check, a command does not see.
            masked.append(directory)
            continue
        seen += len(listed)
        if seen > spec.scan_entries:
            raise ScanTooLarge(_too_large(spec))
        for entry in listed:
            path = entry.path
            if lists.secrets.match_entry(path):
                # A link is masked where it leads: a bind over it would land there anyway.
                masked.append(os.path.realpath(path) if entry.is_symlink() else path)
            elif lists.surfaces.match_entry(path) or lists.agent_config.match(path):
                if entry.is_symlink():
                    # Lock what it leads to, and its dir, so the link cannot be replaced.
                    locked.append(os.path.realpath(path))
                    holders.append(directory)
                else:
                    locked.append(path)
            elif entry.name not in SCAN_SKIP and entry.is_dir(follow_symlinks=False):
                stack.append(path)
    anchored = [*lists.surfaces.anchored_paths(), *lists.agent_paths]
    inside = [p for p in anchored if any(is_within(p, w) for w in spec.writable)]
    locked += [os.path.realpath(p) for p in inside if os.path.lexists(p)]
    holders += [os.path.dirname(p) for p in inside if os.path.islink(p)]
    holders += _missing_holders(inside)
    locked = [p for p in _outermost(locked) if _writable(spec, p) and os.path.exists(p)]
    # A link to nowhere masks nothing (and a bind over it would fail every command).
    masked = [p for p in _outermost(masked) if _hideable(p) and os.path.exists(p)]
    shut = [*locked, *masked]
    holders = [h for h in dict.fromkeys(holders) if not any(is_within(h, x) for x in shut)]
    pinned = _ancestors(spec, [*locked, *holders])
    return Scan(tuple(masked), tuple(locked), pinned, tuple(holders))


def _ancestors(spec: SandboxSpec, paths: Iterable[str]) -> tuple[str, ...]:
    """Every dir strictly between a writable root and one of `paths`."""
    out: dict[str, None] = {}
    for path in paths:
        root = max((w for w in spec.writable if is_within(path, w)), key=len, default=None)
        if root is None:
            continue
        here = os.path.dirname(path)
        while here != root and is_within(here, root) and here not in out:
            if not os.path.islink(here):
                out[here] = None
            here = os.path.dirname(here)
    return tuple(out)


def _writable(spec: SandboxSpec, path: str) -> bool:
    return any(is_within(path, w) for w in spec.writable)


def _nearest_existing(path: str) -> str:
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def _missing_holders(anchored: Iterable[str]) -> list[str]:
    """For each surface that does not exist yet inside a writable dir, the nearest dir on
    its way that does: made read-only (its entries writable again), so that a command
    cannot create the surface — a ~/.bashrc or ~/.config/systemd/user unit that the user's
    next login would run."""
    holders = []
    for path in anchored:
        if os.path.lexists(path):
            continue
        holder = _nearest_existing(path)
        if os.path.isdir(holder) and not os.path.islink(holder):
            holders.append(holder)
    return holders


def _too_large(spec: SandboxSpec) -> str:
    where = ", ".join(spec.writable)
    return (
        f"run_command checks every entry of the writable dirs ({where}) for secrets and "
        f"files that run code before a command runs, and there are more than "
        f"{spec.scan_entries}: narrow policy.allowed_dirs or raise "
        "policy.limits.sandbox_scan_entries"
    )


def _rlimits(limits: LimitsConfig) -> dict[str, int]:
    return {
        "cpu": limits.command_cpu_seconds,
        "data": limits.command_memory_mb * 1024 * 1024,
        "nproc": limits.command_processes,
    }


def bwrap_argv(
    bwrap: str, spec: SandboxSpec, cwd: str, env: Mapping[str, str], tmp_bytes: int
) -> list[str]:
    """bwrap's arguments up to and including `--`; the command follows."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += _bwrap_mounts(bwrap, spec, env.get("PATH", ""), tmp_bytes)
    argv += [*_bwrap_flags(bwrap), "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    return [*argv, "--chdir", cwd, "--"]


def _bwrap_mounts(bwrap: str, spec: SandboxSpec, path_var: str, tmp_bytes: int) -> list[str]:
    """Mounts sorted by depth, so a deeper one lands on top: an allowed dir under /tmp
    shows through the private /tmp, and a secrets dir under an allowed dir is hidden."""
    ops: list[tuple[int, int, list[str]]] = []

    def add(path: str, rank: int, args: list[str]) -> None:
        ops.append((_depth(path), rank, args))

    add("/tmp", 0, _tmpfs(bwrap, "/tmp", tmp_bytes))
    if any(is_within(p, "/run") for p in path_var.split(":") if p):
        for sock in RUN_SOCKETS:
            if os.path.lexists(sock):
                add(sock, 2, _hide(sock))
    else:
        add("/run", 0, _tmpfs(bwrap, "/run", tmp_bytes))
    for root in spec.writable:
        if os.path.isdir(root):
            add(root, 1, ["--bind", root, root])
    found = scan(spec)
    hidden = [*hidden_paths(spec), *found.masked]

    def open_bind(path: str) -> bool:
        """Not inside a masked path: a bind there would show the host's content again."""
        return not any(is_within(path, h) for h in hidden)

    for holder in filter(open_bind, found.split):
        add(holder, 2, ["--ro-bind", holder, holder])
        for child in filter(open_bind, _entries(holder)):
            add(child, 1, ["--bind", child, child])
    for path in filter(open_bind, found.locked):
        add(path, 3, ["--ro-bind", path, path])  # code that runs later, our config
    for path in filter(open_bind, found.pinned):
        add(path, 1, ["--bind", path, path])  # a mount point cannot be renamed away
    for path in hidden:
        if is_within(path, "/tmp") and not any(is_within(path, w) for w in spec.writable):
            continue  # gone with the host's /tmp already
        add(path, 4, _hide(path))
    return [arg for _, _, args in sorted(ops, key=lambda op: op[:2]) for arg in args]


def _entries(directory: str) -> list[str]:
    """The entries of `directory` that a bind can take: not symlinks (a bind follows them,
    and a link stays what it is inside the read-only dir anyway)."""
    try:
        with os.scandir(directory) as entries:
            return [e.path for e in entries if not e.is_symlink()]
    except OSError:
        return []


def _hide(path: str) -> list[str]:
    if os.path.isdir(path):
        return ["--tmpfs", path, "--remount-ro", path]
    return ["--ro-bind", "/dev/null", path]


def read_rules(hidden: Iterable[str]) -> list[tuple[str, str]]:
    """Landlock rules that let a command read everything but `hidden`.

    Landlock only grants (it has no deny rule), so each hidden path is cut out of "/": every
    dir on the way down gets "list" (its names), and every sibling off the way gets "read"
    (all beneath it). Symlinked siblings are skipped, not followed, so that `~/link ->
    ~/.ssh` grants nothing; what they point to is readable through its own place."""
    roots: set[str] = {"/"}
    listed: set[str] = set()
    for target in sorted(set(hidden), key=lambda p: (_depth(p), p)):
        root = next((r for r in roots if is_within(target, r)), None)
        if root is None:
            continue  # inside something already hidden
        roots.discard(root)
        here = root
        while here != target:
            listed.add(here)
            step = os.path.join(here, os.path.relpath(target, here).split(os.sep)[0])
            roots.update(_siblings(here, step))
            here = step
    return [(p, "read") for p in sorted(roots)] + [(p, "list") for p in sorted(listed)]


def _siblings(directory: str, skip: str) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return [e.path for e in entries if e.path != skip and not e.is_symlink()]
    except OSError:
        return []  # unlistable: grant nothing there


def landlock_rules(spec: SandboxSpec, scratch: str) -> list[tuple[str, str]]:
    rules = read_rules([*hidden_paths(spec), "/dev"])
    writable = [*spec.writable, scratch, *DEVICES]
    return rules + [(path, "write") for path in writable]


# -- launching ----------------------------------------------------------------------------


def prepare(
    spec: SandboxSpec,
    command: str,
    cwd: str,
    env: Mapping[str, str],
    limits: LimitsConfig,
    available: Collection[str] | None = None,
) -> Launch:
    """The launch of `/bin/sh -c command` in the sandbox `spec.mode` calls for."""
    kind = choose(spec.mode, available)
    shell = ["/bin/sh", "-c", command]
    plan: dict[str, object] = {
        "env": dict(env),
        "parent": os.getpid(),
        "rlimits": _rlimits(limits),
        "landlock": None,
    }
    if kind == "off":
        return Launch(kind, shell, dict(env), cwd, json.dumps(plan))
    if kind == "bwrap":
        # Caches go to the private /tmp: the home directory is read-only in there, and
        # `go build` refuses to run without a writable cache.
        inner = {**env, "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"}
        tmp_bytes = limits.command_memory_mb * 1024 * 1024
        argv = bwrap_argv(bwrap_path() or "bwrap", spec, cwd, inner, tmp_bytes) + shell
        return Launch(kind, argv, dict(env), cwd, json.dumps(plan))
    scratch = tempfile.mkdtemp(prefix="metona-agent-cmd-")
    env = {**env, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, ".cache")}
    plan["env"] = env
    plan["landlock"] = {"rules": landlock_rules(spec, scratch)}
    return Launch(kind, shell, env, cwd, json.dumps(plan), scratch)


def spawn(launch: Launch) -> subprocess.Popen[bytes]:
    """Start the launch in its own session (so a timeout can kill the whole group), with no
    stdin and piped output. The plan goes through a file descriptor, not argv: an argv
    string is capped at 128 KiB, and a large home dir makes many Landlock rules."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "landlock.py")
    fd = plan_fd(launch.plan.encode())
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", script, str(fd), "--", *launch.argv],
            cwd=launch.cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)


def plan_fd(data: bytes) -> int:
    """A descriptor to read `data` from: a memfd on Linux, an unlinked temp file elsewhere."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("metona-agent-plan", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def setup_failure(returncode: int, stderr: str) -> str | None:
    """What went wrong, if the command never ran because cli/landlock.py could not confine
    it; None if the command itself ran (whatever its status)."""
    from cli import landlock

    if returncode != landlock.SETUP_FAILED or not stderr.startswith(landlock.ERROR_PREFIX):
        return None
    return stderr.splitlines()[0][len(landlock.ERROR_PREFIX) :]


def cleanup(launch: Launch) -> None:
    """Remove the Landlock scratch dir: iteratively (a command may leave a tree of any
    depth there, and shutil.rmtree recurses), never following a link, never entering a
    mount point."""
    if not launch.scratch:
        return
    from cli.tools import trees  # here: cli.tools imports this module

    parent, name = os.path.split(launch.scratch)
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        trees.remove(fd, name, skip_mounts=True)
    except (OSError, trees.Refused):
        pass  # a temp dir left behind is no loss
    finally:
        os.close(fd)


__all__ = [
    "KINDS",
    "Launch",
    "SandboxSpec",
    "SandboxUnavailable",
    "choose",
    "cleanup",
    "prepare",
    "setup_failure",
    "spawn",
]
