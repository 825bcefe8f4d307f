"""The Landlock sandbox's rules (`landlock_rules`): the view of sandbox/view.py as what a
command may read and write, for sandbox/landlock.py (the child script) to apply."""

from __future__ import annotations

import os
from collections.abc import Iterable

from cli.fs.paths import is_within
from cli.safety.sandbox.spec import SandboxSpec
from cli.safety.sandbox.view import (
    SYSTEM_DIRS,
    _depth,
    _outermost,
    hidden_paths,
    masked_in_shown,
    shown_trees,
)

# Devices a Landlock-confined command may open (bwrap's --dev makes the same set).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


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
