"""Where run_command's commands run: which OS sandbox this machine offers, and the launch that
puts one command inside it (pure but for lazy, cached probes; no UI).

A deny list of command strings is no boundary (docs/safety.md); this is. Two sandboxes, as
Codex CLI and Claude Code do it on Linux:

bwrap     bubblewrap: a command sees only what it needs (`view`): the system dirs read-only,
          the allowed dirs writable (execution surfaces in them read-only, secrets and
          sockets in them masked), an empty home but for what commands read from it
          (toolchains, dirs on PATH, `policy.commands.read_only`), private and size-capped
          /tmp and /dev/shm, empty /run and /var, /proc, no network (a fresh namespace has
          only loopback), its own PID namespace, dies with us.
landlock  for machines where bwrap cannot create namespaces (Ubuntu's AppArmor rule for
          unprivileged user namespaces, WSL1): Landlock lets writes happen only beneath the
          allowed dirs (and a private TMPDIR) and reads only beneath the same view as bwrap's
          but for what is hidden;
          seccomp refuses sockets other than AF_UNIX, connect(2), io_uring, metadata changes
          (chmod, chown, xattrs) and new sessions or process groups. sandbox/landlock.py says
          why each is there. `.git` stays writable: Landlock cannot take back, beneath an
          allowed dir, what it granted there.
seatbelt  macOS's sandbox (`sandbox-exec`), the only one there: the same view as a profile
          (sandbox/seatbelt.py) that denies by default, reads the system and the view,
          writes only the allowed dirs and a private temp dir, keeps surfaces read-only and
          secrets, sockets and the network out of reach.

`auto` is bwrap, else Landlock, on Linux and seatbelt on macOS. If none works, commands are
refused unless the YAML says `policy.commands.sandbox: off`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cli.config.settings import SANDBOX_MODES, LimitsConfig
from cli.fs import trees
from cli.fs.paths import expand_user, is_within
from cli.safety import sensitive
from cli.safety.sandbox import seatbelt

# The child side of every sandboxed launch, started by path with `python -I -S`: it imports
# nothing of `cli`, so it is found beside this module rather than imported.
CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "landlock.py")
KINDS = ("bwrap", "landlock")  # in the order "auto" tries them on Linux
MACOS_KINDS = ("seatbelt",)  # and on macOS
INSTALL_HINT = "install bubblewrap (`sudo apt-get install bubblewrap`)"

# Cache and build-output dirs that the scan for secrets and execution surfaces inside the
# writable dirs does not enter: tool-managed, often huge, not where a user keeps
# credentials, and written by every build. A secret-named file inside them stays readable
# to commands, and what in them runs later (cargo's target/, .terraform providers) stays
# writable (docs/safety.md says so). Environments and dependencies (.venv, node_modules,
# __pycache__) are execution surfaces in cli/safety/sensitive.py: locked whole, not entered.
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

# Devices a Landlock-confined command may open (bwrap's --dev makes the same set).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# What a command sees of the machine outside the allowed dirs is an allow list
# (docs/safety.md): a read-only bind of `/` showed every other folder's credentials and every
# daemon's socket (connect(2) works through a read-only mount; Docker Desktop's socket under
# ~/.docker is root on the host). These are the system's programs, libraries and settings,
# which only root can change; everything else (/home, /root, /srv, /mnt, /media, /var, /run,
# other projects) is not there unless the policy grants it.
SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",  # not all of /nix: /nix/var holds nix-daemon's socket
    "/gnu/store",
)

# What commands need from the home dir to work, read-only (policy.commands.read_only adds
# more): git's settings, and the toolchains that install interpreters and compilers under
# the home (their shims and bins on PATH need the rest of the tree). Secrets inside them
# (~/.cargo/credentials.toml…) stay masked. Besides these, every dir on PATH under the home,
# with the install prefix it belongs to (`install_prefix`).
HOME_READ_ONLY = (
    "~/.gitconfig",
    "~/.config/git",
    "~/.local/lib",  # pip --user packages for the scripts in ~/.local/bin
    "~/.local/share/uv",  # uv's Python installs
    "~/.pyenv",
    "~/.nvm",
    "~/.volta",
    "~/.bun",
    "~/.deno",
    "~/.cargo",
    "~/.rustup",
    "~/go",
    "~/.sdkman",
    "~/.rbenv",
    "~/.asdf",
    "~/.local/share/mise",
    "~/.ghcup",
    "~/.elan",
    "~/.juliaup",
)


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run here; the message says how to fix that."""


@dataclass(frozen=True)
class SandboxSpec:
    """What the sandbox is built from: `policy.commands.sandbox`, the policy's dirs and its
    classes of path (Policy.classes: the same lists the file tools obey)."""

    mode: str = "auto"  # auto | bwrap | landlock | seatbelt | off
    writable: tuple[str, ...] = ()  # Policy.allowed_dirs: absolute, symlinks resolved
    blocked: tuple[str, ...] = ()  # Policy.blocked_dirs
    home: str = ""  # whose secrets to hide; "" means ours
    classes: sensitive.Classes | None = None  # None: the built-in lists for `home`
    scan_entries: int = 200_000  # policy.limits.sandbox_scan_entries
    read_only: tuple[str, ...] = ()  # policy.commands.read_only, as written (~ allowed)
    programs: tuple[str, ...] = ()  # an MCP server's program: it and its prefix are shown

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
    """One command, ready to start: `argv` runs under sandbox/landlock.py, which reads `plan`."""

    kind: str  # bwrap | landlock | seatbelt | off
    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: str  # JSON for cli/safety/sandbox/landlock.py
    scratch: str | None = None  # a private temp dir (Landlock, Seatbelt) to remove afterwards


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
    the way every command runs (through sandbox/landlock.py, under its seccomp filter): Ubuntu
    24.04 ships a bwrap whose namespaces AppArmor refuses, and only trying shows that."""
    # No home and no writable dir: the probe must not depend on what lies in the user's
    # files (a link planted there must not make every later run fall back to Landlock).
    bare = SandboxSpec("bwrap", home="/nonexistent-metona-agent-probe")
    argv = [*bwrap_argv(path, bare, "/", {}, 1024 * 1024), "/bin/true"]
    plan = {"env": {}, "parent": os.getpid(), "rlimits": {}, "landlock": None}
    plan["seccomp"] = "memory"
    try:
        proc = spawn(Launch("bwrap", argv, {}, "/", json.dumps(plan)))
        _, err = proc.communicate(timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} does not run: {exc}"
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        return lines[0] if lines else f"{path} exited with status {proc.returncode}"
    return None


def bwrap_problem() -> str | None:
    path = bwrap_path()
    return _bwrap_problem(path) if path else "bwrap is not installed"


@functools.cache
def landlock_problem() -> str | None:
    """Why the Landlock sandbox cannot run here (None: it can)."""
    from cli.safety.sandbox import landlock  # here: ctypes only when a command runs

    if not landlock.seccomp_supported():
        return f"no seccomp filter for this machine ({os.uname().machine})"
    abi = landlock.abi_version()
    if abi < landlock.MIN_ABI:
        found = f"ABI {abi}" if abi else "none"
        return f"the kernel's Landlock is too old or off ({found}; Linux 6.2+ is needed)"
    return None


@functools.cache
def seatbelt_problem() -> str | None:
    """Why the Seatbelt sandbox cannot run here (None: it can). Probed once by running
    /usr/bin/true under the profile of a bare spec, the way every command runs: a
    sandbox-exec that is missing, or refuses (inside another sandbox, where a second
    cannot be applied), or a profile this macOS does not take, shows only by trying."""
    if _platform() != "darwin":
        return f"Seatbelt is macOS's sandbox; this is {_platform()}"
    if not os.access(seatbelt.SANDBOX_EXEC, os.X_OK):
        return f"{seatbelt.SANDBOX_EXEC} is missing"
    scratch = scratch_dir("metona-agent-probe-")
    bare = SandboxSpec("seatbelt", home="/nonexistent-metona-agent-probe")
    grants = seatbelt_grants(bare, "", scratch)
    argv = seatbelt.profile(grants).argv(["/usr/bin/true"])
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=10, check=False, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{seatbelt.SANDBOX_EXEC} does not run: {exc}"
    finally:
        cleanup(Launch("seatbelt", [], {}, "/", "{}", scratch))
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return lines[0] if lines else f"sandbox-exec exited with status {proc.returncode}"
    return None


def _platform() -> str:
    return sys.platform


def choose(mode: str, available: Collection[str] | None = None, platform: str | None = None) -> str:
    """The sandbox a command runs in: "bwrap", "landlock", "seatbelt" or "off";
    SandboxUnavailable if `mode` cannot be had. `available` replaces the machine's probes
    and `platform` sys.platform (tests)."""
    if mode == "off":
        return "off"
    platform = platform or _platform()
    if mode == "seatbelt" and platform != "darwin":
        raise SandboxUnavailable(
            f"policy.commands.sandbox is seatbelt, which is macOS's sandbox and not there on "
            f"{platform}: set policy.commands.sandbox: auto (bubblewrap or Landlock)"
        )
    if mode in KINDS and platform == "darwin":
        raise SandboxUnavailable(
            f"policy.commands.sandbox is {mode}, which is Linux's; on macOS set "
            "policy.commands.sandbox: seatbelt or auto"
        )
    probes: Mapping[str, Callable[[], str | None]] = {
        "bwrap": bwrap_problem,
        "landlock": landlock_problem,
        "seatbelt": seatbelt_problem,
    }
    auto = MACOS_KINDS if platform == "darwin" else KINDS
    wanted = auto if mode == "auto" else (mode,)
    problems: dict[str, str] = {}
    for kind in wanted:
        if available is None:
            problem = probes[kind]()
        else:
            problem = None if kind in available else "not available"
        if problem is None:
            return kind
        problems[kind] = problem
    raise SandboxUnavailable(_refusal(mode, problems, platform))


def _refusal(mode: str, problems: Mapping[str, str], platform: str = sys.platform) -> str:
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
    if "seatbelt" in problems:
        return (
            f"run_command needs a sandbox and macOS's cannot run here (sandbox-exec: "
            f"{problems['seatbelt']}): set policy.commands.sandbox: off to run commands "
            "unconfined"
        )
    if platform != "linux":
        return (
            f"run_command's sandbox needs Linux (bubblewrap or Landlock) or macOS (Seatbelt); "
            f"on {platform} set policy.commands.sandbox: off to run commands unconfined"
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


# Beside a `bin` dir, what its programs need of their install prefix: a venv, a pyenv or uv
# Python, ~/miniconda3, a toolchain's version dir. The prefix itself is never shown whole:
# what else lies in it (~/.rd/docker.sock beside ~/.rd/bin; other projects beside
# ~/code/bin) is not the programs'.
_PREFIX_PARTS = ("bin", "sbin", "lib", "lib32", "lib64", "libexec", "share", "include")
_PREFIX_FILES = ("pyvenv.cfg",)  # a venv's Python finds its site-packages by it


def install_prefix(directory: str, home: str) -> list[str]:
    """What a dir of programs needs shown: for a `bin` or `sbin` dir with `lib`, `libexec`
    or `share` beside it, those parts of the prefix (and a venv's pyvenv.cfg); else the dir
    alone. Never the home, `/` or an ancestor of the home."""
    directory = os.path.normpath(directory)
    parent, name = os.path.split(directory)
    if name not in ("bin", "sbin") or parent == "/" or is_within(home, parent):
        return [directory]
    if parent == os.path.join(home, ".local"):
        return [directory]  # ~/.local/lib is in HOME_READ_ONLY; ~/.local/share is not theirs
    parts = [os.path.join(parent, n) for n in (*_PREFIX_PARTS, *_PREFIX_FILES)]
    present = [p for p in parts if os.path.lexists(p)]
    beside = {os.path.basename(p) for p in present}
    return present if beside & {"lib", "lib64", "libexec", "share"} else [directory]


def _is_system(path: str) -> bool:
    return any(is_within(path, d) for d in SYSTEM_DIRS)


def _gitdirs(spec: SandboxSpec) -> list[str]:
    """For an allowed dir that is a git worktree or an absorbed submodule (its `.git` a file
    naming the gitdir elsewhere), that gitdir and its common dir: git finds nothing without
    them. Read-only, as `.git` in an allowed dir is. The `.git` file is in an allowed dir,
    where a command may have written it: a gitdir is taken only when it points back there
    (a worktree's `gitdir` file, a submodule's core.worktree), which git wrote outside."""
    out = []
    for root in spec.writable:
        gitdir = _pointed(os.path.join(root, ".git"), "gitdir: ", root)
        if gitdir is None or _writable(spec, gitdir) or not _points_back(gitdir, root):
            continue
        out.append(gitdir)
        common = _pointed(os.path.join(gitdir, "commondir"), "", gitdir)
        if common is not None:
            out.append(common)
    return out


def _points_back(gitdir: str, root: str) -> bool:
    back = _pointed(os.path.join(gitdir, "gitdir"), "", gitdir)  # a worktree's
    if back is not None:
        return os.path.realpath(back) == os.path.realpath(os.path.join(root, ".git"))
    try:
        with open(os.path.join(gitdir, "config"), encoding="utf-8", errors="replace") as f:
            config = f.read(65536)
    except OSError:
        return False
    for line in config.splitlines():  # a submodule's: `worktree = ../../../sub`
        key, _, value = line.strip().partition("=")
        if key.strip().lower() == "worktree" and value.strip():
            there = os.path.join(gitdir, value.strip())
            return os.path.realpath(there) == os.path.realpath(root)
    return False


def _pointed(file: str, prefix: str, base: str) -> str | None:
    """The path a git pointer file holds (`gitdir: PATH`, a commondir's PATH), relative to
    `base`; None where there is none."""
    if not os.path.isfile(file) or os.path.islink(file):
        return None
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            lines = f.read(4096).splitlines()
    except OSError:
        return None
    line = lines[0] if lines else ""
    if not line.startswith(prefix) or not line[len(prefix) :].strip():
        return None
    return os.path.normpath(os.path.join(base, line[len(prefix) :].strip()))


def _too_wide(spec: SandboxSpec, place: str, home: str) -> bool:
    """`/`, the home, or a dir holding it or an allowed dir: never shown whole."""
    return place == "/" or any(is_within(inner, place) for inner in (home, *spec.writable))


def view(spec: SandboxSpec, path_var: str) -> list[tuple[str, str]]:
    """What a command may read besides the system dirs and the writable ones, as (source,
    where it shows) pairs, outermost first: each existing entry of HOME_READ_ONLY and
    policy.commands.read_only, every dir on PATH that is no system dir (with the parts of
    its install prefix its programs need), an MCP server's program's, and the gitdir of an
    allowed dir that is a git worktree. A path resolved through a symlink shows at its real
    place and at the spelling given. Never shown: what is inside a blocked dir, `/`, the
    home or a dir holding it or an allowed dir, and whatever is reached through a writable
    dir: a command may have planted a link there (`.venv -> /`), so a path inside one is
    taken only when no symlink is on the way (a writable home's own dot-entries, `scan`)."""
    home = spec.home or os.path.expanduser("~")
    homes = spec.lists.secrets.homes
    wanted = [expand_user(p, home) for p in (*HOME_READ_ONLY, *spec.read_only)]
    wanted += [d for p in path_var.split(":") if os.path.isabs(p) for d in install_prefix(p, home)]
    for program in spec.programs:
        if os.path.isabs(program) and not _writable(spec, os.path.normpath(program)):
            wanted += install_prefix(os.path.dirname(os.path.realpath(program)), home)
    wanted += _gitdirs(spec)
    pairs: dict[str, str] = {}
    for path in wanted:
        path = os.path.normpath(path)
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        # Seen through the writable bind already; only a writable home's dot-entries, which
        # `scan` masks, are shown again, and only if no link is on the way.
        through_writable = _writable(spec, path) or _writable(spec, real)
        if through_writable and (real != path or not sensitive.home_dot_entry(path, homes)):
            continue
        if _in_blocked(spec, real) or _too_wide(spec, real, home):
            continue
        for place in dict.fromkeys((real, path)):
            if not _is_system(place) and not _too_wide(spec, place, home):
                pairs.setdefault(place, real)
    kept = _outermost(pairs)
    return [(pairs[place], place) for place in kept]


def _in_blocked(spec: SandboxSpec, path: str) -> bool:
    return any(is_within(path, b) for b in spec.blocked if _hideable(b))


def shown_trees(spec: SandboxSpec, path_var: str) -> list[str]:
    """Every tree a command sees the host's files in: system dirs, the view, the writable
    dirs (and /sys); what lies outside all of them is not there at all."""
    shown = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    shown += [place for _, place in view(spec, path_var)]
    shown += [w for w in spec.writable if os.path.isdir(w)]
    return [*shown, "/sys"]


def hidden_paths(spec: SandboxSpec, path_var: str = "") -> list[str]:
    """The existing secrets named by path (cli/safety/sensitive.py, anchored at the home dir) and
    the blocked dirs that lie in a tree a command sees, symlinks resolved, outermost first,
    none inside another. A dir holding an allowed dir stays: the policy refuses to work in
    a blocked dir anyway, and the allowed one must stay reachable. Secrets found by name
    inside the writable dirs come from `scan` (bwrap only)."""
    home = spec.home or os.path.expanduser("~")
    candidates = spec.lists.secrets.anchored_paths()
    candidates += [expand_user(d, home) for d in spec.blocked]
    shown = shown_trees(spec, path_var)
    found: list[str] = []
    for path in candidates:
        if not os.path.isabs(path) or not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue  # a dangling link: nothing to hide, and a bind over it would fail
        if not _hideable(real) or any(is_within(w, real) for w in spec.writable):
            continue
        if any(is_within(real, tree) for tree in shown):
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


def scan(spec: SandboxSpec, shown: Collection[str] = ()) -> Scan:
    """Walk every writable dir (iteratively, never following a symlink, not entering the
    dirs of SCAN_SKIP nor what is already masked or locked) for the entries the policy's
    lists name, and for sockets; raise ScanTooLarge past `spec.scan_entries`: a command we
    cannot check is not run. A writable home dir shows none of its dot-entries (they
    configure programs, hold credentials and daemons' sockets) but those in `shown` (the
    `view`, bound read-only by the caller), and no new one can be made in it."""
    lists = spec.lists
    masked: list[str] = []
    locked: list[str] = []
    homes = [h for h in lists.secrets.homes if _writable(spec, h) and os.path.isdir(h)]
    holders: list[str] = list(homes)
    stack = [w for w in spec.writable if os.path.isdir(w) and not os.path.islink(w)]
    for directory, listed in _walk(stack, spec.scan_entries, lambda: _too_large(spec)):
        if listed is None:
            # Unlistable (a mode-000 dir the command could chmod, a path too long): what
            # we cannot check, a command does not see.
            masked.append(directory)
            continue
        for entry in listed:
            path = entry.path
            if directory in homes and entry.name.startswith("."):
                # A link stays a link in the read-only home; where it leads is judged there
                # (a dotfiles repo's files are surfaces: Policy's linked dot-entries).
                if path not in shown and not entry.is_symlink():
                    masked.append(path)
            elif lists.secrets.match_entry(path):
                # A link is masked where it leads (a bind over it would land there anyway),
                # when that is in a tree a command sees and not a system dir: a link to
                # /usr/bin named deploy.pem must not hide /bin/sh from every later command.
                if not entry.is_symlink():
                    masked.append(path)
                elif _maskable_target(spec, os.path.realpath(path), shown):
                    masked.append(os.path.realpath(path))
            elif _is_socket(entry):
                masked.append(path)  # a daemon's way in: connect(2) ignores a read-only bind
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
    # A missing surface right in an allowed dir (a PATH dir of a venv not made yet) does not
    # make that dir read-only to new entries: the project would be unusable. The home does.
    holders += [h for h in _missing_holders(inside) if h not in spec.writable or h in homes]
    locked = [p for p in _outermost(locked) if _writable(spec, p) and os.path.exists(p)]
    # A link to nowhere masks nothing (and a bind over it would fail every command).
    masked = [p for p in _outermost(masked) if _hideable(p) and os.path.exists(p)]
    shut = [*locked, *masked]
    holders = [h for h in dict.fromkeys(holders) if not any(is_within(h, x) for x in shut)]
    pinned = _ancestors(spec, [*locked, *holders])
    return Scan(tuple(masked), tuple(locked), pinned, tuple(holders))


def masked_in_shown(spec: SandboxSpec) -> list[str]:
    """The secrets (by name) and sockets inside the trees `policy.commands.read_only` adds,
    to mask there as in the writable dirs (both sandboxes: Landlock cuts them out of what it
    lets a command read). The built-in toolchain dirs are not walked (they are large and
    hold neither); a tree past `spec.scan_entries` entries is refused like a writable one."""
    lists, found = spec.lists, []
    home = spec.home or os.path.expanduser("~")
    stack = [os.path.realpath(expand_user(p, home)) for p in spec.read_only]
    stack = [p for p in stack if os.path.isdir(p)]
    for directory, listed in _walk(stack, spec.scan_entries, lambda: _too_large(spec, True)):
        if listed is None:
            found.append(directory)
            continue
        for entry in listed:
            if lists.secrets.match_entry(entry.path) or _is_socket(entry):
                found.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return _outermost(found)


def _maskable_target(spec: SandboxSpec, target: str, shown: Collection[str]) -> bool:
    """May the target of a secret-named link be masked: inside a writable dir or a tree the
    view shows, and neither a system dir nor a dir holding the home or an allowed dir."""
    home = spec.home or os.path.expanduser("~")
    if _is_system(target) or _too_wide(spec, target, home):
        return False
    return _writable(spec, target) or any(is_within(target, place) for place in shown)


def _walk(
    stack: list[str], budget: int, too_large: Callable[[], str]
) -> Iterator[tuple[str, list[os.DirEntry[str]] | None]]:
    """Each dir popped from `stack` with its entries (None: unlistable), iteratively; the
    caller pushes onto `stack` the subdirs to enter. Past `budget` entries in all, raise
    ScanTooLarge with `too_large()`: a command we cannot check is not run."""
    seen = 0
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:
            yield directory, None
            continue
        seen += len(listed)
        if seen > budget:
            raise ScanTooLarge(too_large())
        yield directory, listed


def _is_socket(entry: os.DirEntry[str]) -> bool:
    """A Unix socket, found without a stat for the usual kinds of entry."""
    if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
        return False
    if entry.is_symlink():
        return False
    try:
        return stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return False


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


def _too_large(spec: SandboxSpec, read_only: bool = False) -> str:
    if read_only:
        return (
            f"run_command checks every entry of policy.commands.read_only "
            f"({', '.join(spec.read_only)}) for secrets and sockets before a command runs, and "
            f"there are more than {spec.scan_entries}: narrow it or raise "
            "policy.limits.sandbox_scan_entries"
        )
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
    """bwrap's arguments up to and including `--`; the command follows. `tmp_bytes`: what
    the command may keep in files of its own, /tmp and /dev/shm together."""
    argv = [bwrap, "--dev", "/dev", "--proc", "/proc"]
    argv += _bwrap_mounts(bwrap, spec, env.get("PATH", ""), tmp_bytes)
    argv += [*_bwrap_flags(bwrap), "--clearenv"]
    for name, value in env.items():
        argv += ["--setenv", name, value]
    return [*argv, "--chdir", cwd, "--"]


def _bwrap_mounts(bwrap: str, spec: SandboxSpec, path_var: str, tmp_bytes: int) -> list[str]:
    """bwrap starts from an empty root (a tmpfs of its own) and this adds what a command
    may see, sorted by depth so that a deeper mount lands on top (an allowed dir under
    /tmp shows through the private /tmp; a secrets dir under an allowed dir is hidden).
    The root and /dev are made read-only last: files a command keeps outside the allowed
    dirs go to /tmp and /dev/shm only, whose sizes are capped (tmpfs pages are memory no
    rlimit counts)."""
    ops: list[tuple[int, int, list[str]]] = []

    def add(path: str, rank: int, args: list[str]) -> None:
        ops.append((_depth(path), rank, args))

    for system in SYSTEM_DIRS:
        if os.path.islink(system):
            add(system, 0, ["--symlink", os.readlink(system), system])
        elif os.path.isdir(system):
            add(system, 0, ["--ro-bind", system, system])
    if os.path.isdir("/sys"):
        add("/sys", 0, ["--ro-bind", "/sys", "/sys"])
    add("/tmp", 0, _tmpfs(bwrap, "/tmp", max(tmp_bytes // 2, 1)))
    add("/dev/shm", 0, _tmpfs(bwrap, "/dev/shm", max(tmp_bytes // 2, 1)))
    add("/run", 0, ["--dir", "/run"])  # empty: the daemons' sockets live there
    shown = view(spec, path_var)
    # /var is empty; /var/tmp is the private /tmp, unless something shown lies in /var.
    inside_var = any(is_within(p, "/var") for p in (*spec.writable, *(p for _, p in shown)))
    add("/var", 0, ["--dir", "/var"] if inside_var else ["--symlink", "../tmp", "/var/tmp"])
    home = spec.home or os.path.expanduser("~")
    if os.path.isabs(home):
        add(home, 0, ["--dir", home])  # $HOME exists, empty but for what is shown in it
    for source, place in shown:
        # Rank 5: on top of a writable home's masked dot-entries at the same depth.
        add(place, 5 if _writable(spec, place) else 1, ["--ro-bind", source, place])
    for root in spec.writable:
        if os.path.isdir(root):
            add(root, 1, ["--bind", root, root])
    found = scan(spec, {place for _, place in shown})
    hidden = [*hidden_paths(spec, path_var), *found.masked, *masked_in_shown(spec)]
    last: list[str] = []  # hidden dirs are made read-only after what is shown inside them

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
        add(path, 4, _hide(bwrap, path, last))
    mounts = [arg for _, _, args in sorted(ops, key=lambda op: op[:2]) for arg in args]
    mounts += last
    # /dev/full reads as zeros and cannot be mapped: a shared mapping of the real /dev/zero
    # is shared memory that no limit counts.
    mounts += ["--dev-bind", "/dev/full", "/dev/zero", "--remount-ro", "/dev"]
    if "/" not in spec.writable:
        mounts += ["--remount-ro", "/"]
    return mounts


def _entries(directory: str) -> list[str]:
    """The entries of `directory` that a bind can take: not symlinks (a bind follows them,
    and a link stays what it is inside the read-only dir anyway)."""
    try:
        with os.scandir(directory) as entries:
            return [e.path for e in entries if not e.is_symlink()]
    except OSError:
        return []


def _hide(bwrap: str, path: str, last: list[str]) -> list[str]:
    """An empty dir (a tmpfs, made read-only in `last`, after whatever is shown inside it)
    or an empty file in place of `path`."""
    if os.path.isdir(path):
        last += ["--remount-ro", path]
        return _tmpfs(bwrap, path, 4096)
    return ["--ro-bind", "/dev/null", path]


def read_rules(hidden: Iterable[str], roots: Iterable[str] = ("/",)) -> list[tuple[str, str]]:
    """Landlock rules that let a command read everything beneath `roots` but `hidden`.

    Landlock only grants (it has no deny rule), so each hidden path is cut out of the root
    holding it: every dir on the way down gets "list" (its names), and every sibling off
    the way gets "read" (all beneath it). Symlinked siblings are skipped, not followed, so
    that `~/link -> ~/.ssh` grants nothing; what they point to is readable through its own
    place."""
    roots = set(_outermost(r for r in roots if os.path.exists(r)))
    listed: set[str] = set()
    for target in sorted(set(hidden), key=lambda p: (_depth(p), p)):
        root = next((r for r in roots if is_within(target, r)), None)
        if root is None:
            continue  # inside something already hidden, or in nothing granted
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


def landlock_rules(spec: SandboxSpec, scratch: str, path_var: str = "") -> list[tuple[str, str]]:
    """What a Landlock-confined command may read (the same view as bwrap's, hidden paths cut
    out, and /proc) and write (the allowed dirs, its scratch dir, the devices)."""
    roots = [*shown_trees(spec, path_var), "/proc"]
    roots += [os.path.realpath(s) for s in SYSTEM_DIRS if os.path.islink(s)]
    rules = read_rules([*hidden_paths(spec, path_var), *masked_in_shown(spec)], roots)
    # /dev/zero read-only: a shared writable mapping of it is memory no limit counts.
    rules += [(d, "read" if d == "/dev/zero" else "write") for d in DEVICES]
    return rules + [(path, "write") for path in (*spec.writable, scratch)]


def seatbelt_grants(
    spec: SandboxSpec, path_var: str, tmp: str, network: bool = False
) -> seatbelt.Grants:
    """What a Seatbelt-confined command may do: bwrap's view, as paths for the profile
    (sandbox/seatbelt.py). The same `view` is readable and the same `scan` of the writable
    dirs finds what is hidden (secrets, sockets, a writable home's dot-entries), what stays
    read-only (surfaces, the agent's config) with the dirs that hold it (pinned: a rename
    would carry it out of its rule) and the dirs closed to new entries. Secrets named by
    path and blocked dirs are denied whether or not they exist (a deny creates nothing, and
    keeps them from being made); a missing surface in an allowed dir is denied by its path."""
    home = spec.home or os.path.expanduser("~")
    shown = view(spec, path_var)
    places = {place for _, place in shown}
    found = scan(spec, places)
    lists = spec.lists
    readable = [p for pair in shown for p in pair]
    candidates = [*lists.secrets.anchored_paths(), *(expand_user(d, home) for d in spec.blocked)]
    hidden = [*candidates, *(os.path.realpath(p) for p in candidates if os.path.lexists(p))]
    hidden += [*found.masked, *masked_in_shown(spec)]
    hidden = [p for p in dict.fromkeys(os.path.normpath(h) for h in hidden) if os.path.isabs(p)]
    hidden = [h for h in hidden if _hideable(h) and not any(is_within(w, h) for w in spec.writable)]
    anchored = [*lists.surfaces.anchored_paths(), *lists.agent_paths]
    read_only = [*found.locked, *(p for p in places if _writable(spec, p))]
    read_only += [os.path.normpath(p) for p in anchored if _writable(spec, os.path.normpath(p))]
    inside = [m for m in found.masked if _writable(spec, m)]
    pinned = [*found.pinned, *_ancestors(spec, inside)]
    real_tmp = os.path.realpath(tmp)
    folds = any(_folds_case(p) for p in (home, *spec.writable))
    return seatbelt.Grants(
        home=os.path.normpath(home) if os.path.isabs(home) else "/",
        writable=tuple(spec.writable),
        tmp=real_tmp,
        readable=tuple(dict.fromkeys(readable)),
        read_only=tuple(dict.fromkeys(read_only)),
        pinned=tuple(dict.fromkeys(pinned)),
        closed=tuple(dict.fromkeys(found.split)),
        hidden=tuple(hidden),
        network=network,
        fold_case=folds,
    )


def _folds_case(path: str) -> bool:
    """Does the volume holding `path` find a name whatever its case? Told by looking up the
    last name of `path` (or of a dir above it) that has letters with their case swapped:
    per volume, not per OS (macOS disks can be case-sensitive, Linux dirs casefolded)."""
    here = _nearest_existing(os.path.normpath(path)) if os.path.isabs(path) else "/"
    while here != "/":
        name = os.path.basename(here)
        if name.swapcase() != name:
            try:
                mine = os.lstat(here)
                other = os.lstat(os.path.join(os.path.dirname(here), name.swapcase()))
            except OSError:
                return False
            return (mine.st_dev, mine.st_ino) == (other.st_dev, other.st_ino)
        here = os.path.dirname(here)
    return _platform() == "darwin"  # no letters to try: macOS's default


# -- launching ----------------------------------------------------------------------------


def prepare(
    spec: SandboxSpec,
    command: str,
    cwd: str,
    env: Mapping[str, str],
    limits: LimitsConfig,
    available: Collection[str] | None = None,
    platform: str | None = None,
) -> Launch:
    """The launch of `/bin/sh -c command` in the sandbox `spec.mode` calls for (`available`
    and `platform`: as for `choose`)."""
    kind = choose(spec.mode, available, platform)
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
        plan["seccomp"] = "memory"
        return Launch(kind, argv, dict(env), cwd, json.dumps(plan))
    scratch = scratch_dir()
    if kind == "seatbelt":
        return _seatbelt_launch(spec, shell, cwd, env, plan, scratch)
    env = {**env, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, ".cache")}
    plan["env"] = env
    plan["landlock"] = {"rules": landlock_rules(spec, scratch, env.get("PATH", ""))}
    return Launch(kind, shell, env, cwd, json.dumps(plan), scratch)


# What sandbox-exec's arguments may take (the profile and its parameters): macOS's argv and
# environment share 1 MiB (kern.argmax).
MAX_SEATBELT_ARGS = 512 * 1024


def seatbelt_argv(
    spec: SandboxSpec, command: list[str], path_var: str, scratch: str, network: bool = False
) -> list[str]:
    """`sandbox-exec -p PROFILE -D... -- command`, for the launch and for MCP servers."""
    grants = seatbelt_grants(spec, path_var, scratch, network)
    argv = seatbelt.profile(grants).argv(command)
    if sum(len(a) + 1 for a in argv) > MAX_SEATBELT_ARGS:
        raise SandboxUnavailable(
            "run_command's Seatbelt profile for these dirs is larger than macOS lets a "
            "command line be (many secrets or sockets in the allowed dirs): narrow "
            "policy.allowed_dirs or policy.commands.read_only"
        )
    return argv


def _seatbelt_launch(
    spec: SandboxSpec,
    shell: list[str],
    cwd: str,
    env: Mapping[str, str],
    plan: dict[str, object],
    scratch: str,
) -> Launch:
    """sandbox/landlock.py applies the limits (it needs no Linux for that), then execs
    sandbox-exec, which applies the profile and execs the shell. Caches go to the private
    temp dir: the home is read-only, and Go's (~/Library/Caches on macOS, whatever
    XDG_CACHE_HOME says) must be writable for `go build` to run."""
    tmp = os.path.realpath(scratch)
    cache = os.path.join(tmp, ".cache")
    env = {**env, "TMPDIR": tmp, "XDG_CACHE_HOME": cache, "GOCACHE": os.path.join(cache, "go")}
    plan["env"] = env
    try:
        argv = seatbelt_argv(spec, shell, env.get("PATH", ""), tmp)
    except SandboxUnavailable:
        cleanup(Launch("seatbelt", [], {}, cwd, "{}", scratch))
        raise
    return Launch("seatbelt", argv, env, cwd, json.dumps(plan), scratch)


def scratch_dir(prefix: str = "metona-agent-cmd-") -> str:
    """A private temp dir for a Landlock-confined command, which has no tmpfs of its own:
    on disk, since a file in a tmpfs is memory that no limit of the command counts. /var/tmp
    is on disk by convention, /tmp often a tmpfs; where /var/tmp is one too, the user's
    cache dir."""
    for base in ("/var/tmp", os.path.join(os.path.expanduser("~"), ".cache")):
        if os.access(base, os.W_OK | os.X_OK) and not _on_tmpfs(base):
            return tempfile.mkdtemp(prefix=prefix, dir=base)
    return tempfile.mkdtemp(prefix=prefix)


def _on_tmpfs(path: str) -> bool:
    """Is `path` on a tmpfs (or ramfs)? From the mount table, where there is one."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as file:
            mounts = [line.split()[1:3] for line in file if len(line.split()) > 2]
    except OSError:
        return False  # no /proc (not Linux): nothing to tell by
    real = os.path.realpath(path)
    holding = [(m, kind) for m, kind in mounts if is_within(real, m.replace("\\040", " "))]
    return bool(holding) and max(holding, key=lambda m: len(m[0]))[1] in ("tmpfs", "ramfs")


def spawn(launch: Launch) -> subprocess.Popen[bytes]:
    """Start the launch in its own session (so a timeout can kill the whole group), with no
    stdin and piped output. The plan goes through a file descriptor, not argv: an argv
    string is capped at 128 KiB, and a large home dir makes many Landlock rules."""
    script = CHILD_SCRIPT
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
    """What went wrong, if the command never ran because sandbox/landlock.py could not confine
    it; None if the command itself ran (whatever its status)."""
    from cli.safety.sandbox import landlock

    if returncode != landlock.SETUP_FAILED or not stderr.startswith(landlock.ERROR_PREFIX):
        return None
    return stderr.splitlines()[0][len(landlock.ERROR_PREFIX) :]


def cleanup(launch: Launch) -> None:
    """Remove the Landlock scratch dir: iteratively (a command may leave a tree of any
    depth there, and shutil.rmtree recurses), never following a link, never entering a
    mount point."""
    if not launch.scratch:
        return
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
    "MACOS_KINDS",
    "Launch",
    "SandboxSpec",
    "SandboxUnavailable",
    "choose",
    "cleanup",
    "prepare",
    "seatbelt_argv",
    "seatbelt_grants",
    "seatbelt_problem",
    "setup_failure",
    "spawn",
]
