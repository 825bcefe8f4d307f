"""The Seatbelt sandbox's grants (`seatbelt_grants`): the view of sandbox/view.py as paths for
the profile sandbox/seatbelt.py builds, and `sandbox-exec`'s argv (`seatbelt_argv`)."""

from __future__ import annotations

import os

from cli.fs.folding import deepest_existing
from cli.fs.paths import expand_user, is_within
from cli.safety.sandbox import seatbelt
from cli.safety.sandbox.spec import SandboxSpec, SandboxUnavailable, _platform
from cli.safety.sandbox.view import (
    _ancestors,
    _hideable,
    _writable,
    masked_in_shown,
    scan,
    view,
)


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
    here = deepest_existing(os.path.normpath(path)) if os.path.isabs(path) else "/"
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
