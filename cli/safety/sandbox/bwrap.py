"""The bubblewrap sandbox: bwrap's arguments (`bwrap_argv`) that build the view of
sandbox/view.py from an empty root, with private size-capped /tmp and /dev/shm and fresh
namespaces."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping

from cli.fs.paths import is_within
from cli.safety.sandbox.spec import SandboxSpec
from cli.safety.sandbox.view import (
    SYSTEM_DIRS,
    _depth,
    _writable,
    hidden_paths,
    masked_in_shown,
    scan,
    view,
)


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
