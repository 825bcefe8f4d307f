"""What a sandboxed command sees (every sandbox: bwrap, Landlock, Seatbelt): the system dirs and
the home's toolchains shown read-only (`view`), the secrets and blocked dirs hidden
(`hidden_paths`), and the scan of the writable dirs for surfaces to lock and secrets and
sockets to mask (`scan`, `ScanTooLarge`). Pure but for reading the file system; no UI."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cli.fs.folding import deepest_existing
from cli.fs.paths import expand_user, is_within
from cli.safety import dot_entries
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable

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
        if through_writable and (real != path or not dot_entries.home_dot_entry(path, homes)):
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


def _missing_holders(anchored: Iterable[str]) -> list[str]:
    """For each surface that does not exist yet inside a writable dir, the nearest dir on
    its way that does: made read-only (its entries writable again), so that a command
    cannot create the surface — a ~/.bashrc or ~/.config/systemd/user unit that the user's
    next login would run."""
    holders = []
    for path in anchored:
        if os.path.lexists(path):
            continue
        holder = deepest_existing(path)
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
