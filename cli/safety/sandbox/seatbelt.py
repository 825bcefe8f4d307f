"""run_command's sandbox on macOS: a Seatbelt profile (SBPL, what `sandbox-exec -p` takes),
built by a pure function from what the policy grants (sandbox/seatbelt_grants.py
gathers it with the same view, scan and lists that bubblewrap's mounts come from).

The profile denies by default and then allows, in this order (Seatbelt: a later rule wins
over an earlier one, so every deny comes after the allows it cuts into):
  - processes: fork, exec, signals and process info only within the sandbox, a list of
    sysctls to read, a few Mach services (user and group look-ups), POSIX semaphores;
  - reading the system (SYSTEM_TREES: /usr, /bin, /sbin, /Library, /opt, /private/etc, the
    OS's own parts of /System and the dyld caches; not /System/Volumes/Data, which is the
    whole disk again), a few devices, and `stat` on the dirs above every granted path;
  - reading the view (toolchains, $PATH's prefixes, policy.commands.read_only);
  - reading and writing the allowed dirs and the command's private temp dir, whose own Unix
    sockets it may bind and connect to (and no other: every daemon's socket is out of reach);
  - then, denied: writing what stays read-only inside the allowed dirs (execution surfaces,
    the agent's config, the view's dot-entries), removing or renaming the dirs that hold
    them (a rename would carry them out of their rule), new entries in the dirs the scan
    closed, and reading or writing SYSTEM_SECRETS, the secrets and blocked dirs;
  - the network (IP only), when the policy allows it.

No path is ever written into the profile: each goes in a parameter (`-D P3=/Users/me/x`,
read by `(param "P3")`), so a path with a quote, a parenthesis, a backslash, a newline or
non-ASCII letters cannot break or extend the profile, which stays ASCII. Paths are matched
both exactly and by a regex that takes each composed letter in NFC or NFD, name by name,
and where the disk folds case, each letter in either case (with U+017F for `s`, U+212A for
`k`, as Unicode's simple case folding does): on a case-insensitive volume `~/.SSH/ID_RSA` is
`~/.ssh/id_rsa`, and on any APFS volume `Jose\u0301/cl\u00e9.pem` is `Jos\u00e9/cl\u00e9.pem`.
Not matched: what only full case folding joins (`\u00df` and `ss`, the ligature `\ufb02` and
`fl`), nor the code points HFS+ leaves out of names; the file tools check those
(cli/safety/sensitive.py).
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

# Only /usr/bin's: one earlier on $PATH would be whoever planted it.
SANDBOX_EXEC = "/usr/bin/sandbox-exec"

# What programs need from the system, read-only (bubblewrap's SYSTEM_DIRS on macOS). The
# firmlinked data volume (/System/Volumes/Data) is left out: it holds /Users again.
SYSTEM_TREES = (
    "/usr",
    "/bin",
    "/sbin",
    "/Library",
    "/opt",
    "/nix/store",
    "/private/etc",
    "/System/Library",
    "/System/iOSSupport",
    "/System/DriverKit",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes",  # the dyld shared cache from macOS 13
    "/private/var/db/dyld",  # the dyld shared cache before macOS 11
    "/private/var/db/timezone",  # /etc/localtime points here
    "/private/var/select",  # /bin/sh runs the shell named by /private/var/select/sh
    "/private/var/db/xcode_select_link",  # xcode-select's choice, read by /usr/bin/git
)
# Xcode (and Xcode-beta…), whose developer tools /usr/bin's shims (git, clang, python3) run
# when it is the selected one; they load frameworks from the rest of its bundle.
SYSTEM_REGEXES = (r"^/Applications/Xcode[^/]*\.app(/|$)",)
# Symlinks and dirs on the way to the above, whose metadata programs look at.
SYSTEM_TRAVERSE = ("/etc", "/tmp", "/var", "/Applications", "/Users", "/Volumes")
# Inside SYSTEM_TREES, what holds credentials or other programs' data: the system keychain,
# the privacy database, network settings, logs, and the package managers' var/ (databases
# and daemons' sockets: what /var is on Linux, which bubblewrap leaves empty).
SYSTEM_SECRETS = (
    "/Library/Keychains",
    "/Library/Application Support/com.apple.TCC",
    "/Library/Preferences/SystemConfiguration",
    "/Library/Logs",
    "/opt/homebrew/var",
    "/opt/local/var",
    "/usr/local/var",
)
# bubblewrap's NEEDED_DIRS for macOS: a blocked dir or secret holding one of these is not
# hidden (it would stop every command rather than protect anything).
NEEDED = (*SYSTEM_TREES, "/dev", "/etc", "/tmp", "/var", "/private/var/tmp")

SYSCTLS = (
    "hw.activecpu",
    "hw.byteorder",
    "hw.cachelinesize",
    "hw.cpufamily",
    "hw.cputype",
    "hw.l1dcachesize",
    "hw.l2cachesize",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.pagesize",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.ngroups",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osversion",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "machdep.cpu.brand_string",
    "sysctl.proc_cputype",
    "vm.loadavg",
)
SYSCTL_PREFIXES = ("hw.optional.", "hw.perflevel", "kern.proc.pid.", "kern.proc.pgrp.")

# Mach services a command may look up: users and groups (getpwuid, `id`, git), the
# notification and logging services libSystem calls at start-up, and the per-user temp
# and cache dirs (confstr, used by xcrun). Not cfprefsd (it writes preferences outside the
# sandbox), launchservicesd (`open` starts apps outside it), securityd (the keychain).
MACH_SERVICES = (
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.system.DirectoryService.libinfo_v1",
    "com.apple.system.notification_center",
    "com.apple.system.logger",
    "com.apple.bsd.dirhelper",
)
# With the network: DNS configuration and certificate trust.
NETWORK_MACH_SERVICES = (
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.dnssd.service",
    "com.apple.trustd",
    "com.apple.trustd.agent",
    "com.apple.ocspd",
)
MDNS_SOCKET = "/private/var/run/mDNSResponder"  # the resolver, with the network only


@dataclass(frozen=True)
class Grants:
    """What a command may do, as absolute paths with symlinks resolved (the launch gathers
    them; this module looks at no file)."""

    home: str  # metadata only: it exists, empty but for what is granted in it
    writable: tuple[str, ...]  # the allowed dirs
    tmp: str  # the command's private temp dir: writable, and its own Unix sockets
    readable: tuple[str, ...] = ()  # the view: toolchains, $PATH's prefixes, read_only
    read_only: tuple[str, ...] = ()  # inside `writable`, not to be written
    pinned: tuple[str, ...] = ()  # dirs neither removed nor renamed
    closed: tuple[str, ...] = ()  # dirs in which no new entry can be made
    hidden: tuple[str, ...] = ()  # neither read nor written: secrets, blocked dirs
    network: bool = False  # IP networking (policy: an MCP server's `network: true`)
    fold_case: bool = True  # some volume here ignores case (macOS's default)


@dataclass(frozen=True)
class Profile:
    """A profile and the parameters it reads."""

    text: str
    params: tuple[tuple[str, str], ...] = field(default=())

    def argv(self, command: Iterable[str]) -> list[str]:
        """sandbox-exec's arguments, then the command."""
        defines = [f"-D{name}={value}" for name, value in self.params]
        return [SANDBOX_EXEC, "-p", self.text, *defines, "--", *command]


class _Params:
    """Paths and regexes as parameters, one name per distinct value, in order of use."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        if "\0" in value:
            raise ValueError("a sandbox path cannot hold a NUL byte")
        if value not in self.names:
            self.names[value] = f"P{len(self.names)}"
        return f'(param "{self.names[value]}")'


_REGEX_SPECIAL = frozenset("\\.^$*+?()[]{}|")


# Letters that Unicode case folding (which a folding volume may use) takes for an ASCII one:
# LONG S is `s`, KELVIN SIGN is `k` (Python's re.IGNORECASE knows the same two).
_FOLDS_TO_ASCII = {"s": "\u017f", "k": "\u212a"}


def fold_regex(path: str, fold_case: bool = True) -> str:
    """A regex body matching `path` in every spelling its volume takes for it: each composed
    letter in NFC or NFD, name by name (APFS ignores normalisation, case-sensitive or not:
    `Jose\u0301/cl\u00e9.pem` is `Jos\u00e9/cl\u00e9.pem`), and with `fold_case` each letter in
    either case, with the letters Unicode case folding takes for an ASCII one (`\u017f` for
    `s`, `\u212a` for `k`). ASCII pairs are a bracket (`[Ss]`); anything else an alternation
    (`(s|S|\u017f)`), since Seatbelt's regexes may see a bracket byte by byte."""
    out = []
    for c in unicodedata.normalize("NFC", path):
        if c in _REGEX_SPECIAL:
            out.append("\\" + c)
            continue
        cases = [c]
        if fold_case:
            cases += [c.upper(), c.lower(), _FOLDS_TO_ASCII.get(c.lower(), "")]
        cases = [f for f in dict.fromkeys(cases) if len(f) == 1]
        forms = list(dict.fromkeys(f for v in cases for f in (v, unicodedata.normalize("NFD", v))))
        if len(forms) == 1:
            out.append(c)
        elif all(len(f) == 1 and f.isascii() for f in forms):
            out.append("[" + "".join(sorted(forms)) + "]")
        else:
            out.append("(" + "|".join(_quote_regex(f) for f in forms) + ")")
    return "".join(out)


def spellings(path: str) -> list[str]:
    """`path` as given, in NFC and in NFD: APFS finds a name by either."""
    forms = [path, unicodedata.normalize("NFC", path), unicodedata.normalize("NFD", path)]
    return list(dict.fromkeys(forms))


def _is_within(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def _check(path: str) -> None:
    normal = path == "/" or (
        path.startswith("/") and not path.startswith("//") and posixpath.normpath(path) == path
    )
    if not normal:
        raise ValueError(f"a sandbox path must be absolute and normalised: {path!r}")


def ancestors(path: str) -> list[str]:
    """Every dir above `path`, from the root down, `/` excluded."""
    out = []
    here = posixpath.dirname(path)
    while here not in ("/", ""):
        out.append(here)
        here = posixpath.dirname(here)
    return out[::-1]


def hideable(path: str, grants: Grants) -> bool:
    """A hidden path that would hold a system tree, an allowed dir or the temp dir would stop
    every command rather than protect anything: it is left out (a blocked dir holding an
    allowed one: the policy refuses to work in it anyway)."""
    keep = (*NEEDED, *grants.writable, grants.tmp)
    return not any(_is_within(needed, path) for needed in keep)


def profile(grants: Grants) -> Profile:
    """The Seatbelt profile for `grants`."""
    p = _Params()
    for path in (grants.home, grants.tmp, *grants.writable, *grants.readable, *grants.hidden):
        _check(path)
    for path in (*grants.read_only, *grants.pinned, *grants.closed):
        _check(path)

    def matching(paths: Iterable[str], literal: bool = False) -> list[str]:
        """Filters for `paths` (and all below, unless `literal`), case folded if need be."""
        out = []
        for path in dict.fromkeys(paths):
            for spelling in spellings(path):
                out.append(f"({'literal' if literal else 'subpath'} {p(spelling)})")
            if grants.fold_case or not path.isascii():
                tail = "$" if literal else "(/|$)"
                out.append(f"(regex {p('^' + fold_regex(path, grants.fold_case) + tail)})")
        return out

    def exact(paths: Iterable[str], literal: bool = False) -> list[str]:
        kind = "literal" if literal else "subpath"
        return [f"({kind} {p(s)})" for path in dict.fromkeys(paths) for s in spellings(path)]

    lines = _process_rules()

    lines += _system_rules()

    granted = [grants.home, grants.tmp, *grants.writable, *grants.readable]
    traverse = [a for g in granted for a in ancestors(g)]
    traverse = [t for t in dict.fromkeys(traverse) if t not in _system_traverse()]
    if traverse or grants.home:
        lines += ["", "; the dirs on the way to what is granted, and the home: their metadata"]
        lines += _rule("allow file-read-metadata", exact([*traverse, grants.home], True))
    if grants.readable:
        lines += ["", "; the view: what commands need besides the system, read-only"]
        lines += _rule("allow file-read* file-map-executable", exact(grants.readable))
    lines += ["", "; the allowed dirs and the private temp dir"]
    writable = [*grants.writable, grants.tmp]
    lines += _rule("allow file-read* file-write* file-map-executable", exact(writable))
    tmp = exact([grants.tmp])
    lines += ["; its own Unix sockets, in its temp dir only"]
    lines += _rule("allow network-bind", [f"(local unix-socket {f})" for f in tmp])
    lines += _rule("allow network-outbound", [f"(remote unix-socket {f})" for f in tmp])

    if grants.read_only:
        lines += ["", "; read-only inside the allowed dirs: surfaces, the agent's config, the view"]
        lines += _rule("deny file-write*", matching(grants.read_only))
    pinned = [*grants.writable, *grants.pinned]
    lines += ["", "; neither removed nor renamed: the allowed dirs and what holds read-only paths"]
    lines += _rule("deny file-write-unlink", matching(pinned, literal=True))
    if grants.closed:
        lines += ["", "; no new entry in these dirs"]
        closed = []
        for path in dict.fromkeys(grants.closed):
            body = fold_regex(path, grants.fold_case)
            closed.append(f"(regex {p('^' + body + '/[^/]+$')})")
        lines += _rule("deny file-write-create", closed)
    hidden = [h for h in dict.fromkeys(grants.hidden) if hideable(h, grants)]
    lines += ["", "; secrets and blocked dirs: neither read nor written nor run"]
    lines += _rule("deny file-read* file-write* process-exec", matching([*SYSTEM_SECRETS, *hidden]))

    if grants.network:
        lines += _network_rules()
    text = "\n".join(lines) + "\n"
    params = tuple((name, value) for value, name in p.names.items())
    return Profile(text, params)


def _process_rules() -> list[str]:
    """The profile's start: deny by default; a command's own processes, and the sysctls and
    Mach services libSystem asks for at start-up."""
    lines = [
        "(version 1)",
        "(deny default)",
        "",
        "; processes: their own, and what libSystem asks at start-up",
        "(allow process-fork)",
        "(allow process-exec)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow mach-host*)",
        "(allow ipc-posix-sem)",
        "(allow system-socket (socket-domain AF_UNIX))",
    ]
    sysctls = [f'(sysctl-name "{n}")' for n in SYSCTLS]
    sysctls += [f'(sysctl-name-prefix "{n}")' for n in SYSCTL_PREFIXES]
    lines += _rule("allow sysctl-read", sysctls)
    lines += _rule("allow mach-lookup", [f'(global-name "{n}")' for n in MACH_SERVICES])
    return lines


def _system_rules() -> list[str]:
    """The system's trees and devices, read-only (and /dev/null writable)."""
    lines = ["", "; the system, read-only"]
    system = [f'(subpath "{t}")' for t in SYSTEM_TREES]
    system += [f'(regex #"{r}")' for r in SYSTEM_REGEXES]
    lines += _rule("allow file-read* file-map-executable", system)
    lines += ['(allow file-read* (literal "/"))']
    lines += _rule("allow file-read-metadata", [f'(literal "{t}")' for t in _system_traverse()])
    lines += [
        '(allow file-read* file-write-data file-ioctl (literal "/dev/null"))',
        '(allow file-read* file-ioctl (literal "/dev/zero") (literal "/dev/random")'
        ' (literal "/dev/urandom"))',
        '(allow file-read-data file-write-data (subpath "/dev/fd"))',
        '(allow file-read-metadata (literal "/dev") (regex #"^/dev/std(in|out|err)$"))',
    ]
    return lines


def _network_rules() -> list[str]:
    """The network, when the policy allows it: IP, and the resolver."""
    lines = [
        "",
        "; the network, as the policy allows: IP, and the resolver",
        '(allow network-outbound (remote ip "*:*"))',
        '(allow network-inbound (local ip "*:*"))',
        '(allow network-bind (local ip "*:*"))',
        f'(allow network-outbound (remote unix-socket (path-literal "{MDNS_SOCKET}")))',
        '(allow sysctl-read (sysctl-name-prefix "net.routetable."))',
    ]
    lines += _rule("allow mach-lookup", [f'(global-name "{n}")' for n in NETWORK_MACH_SERVICES])
    return lines


def _quote_regex(path: str) -> str:
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in path)


def _system_traverse() -> list[str]:
    out = [a for t in SYSTEM_TREES for a in ancestors(t)]
    return list(dict.fromkeys([*SYSTEM_TRAVERSE, *out]))


def _rule(head: str, filters: list[str]) -> list[str]:
    """`(head filter…)`, one filter a line; nothing when there is no filter (an allow
    without one would allow everything)."""
    if not filters:
        return []
    return [f"({head}", *(f"  {f}" for f in filters[:-1]), f"  {filters[-1]})"]


__all__ = [
    "NEEDED",
    "SANDBOX_EXEC",
    "SYSTEM_SECRETS",
    "SYSTEM_TREES",
    "Grants",
    "Profile",
    "ancestors",
    "fold_regex",
    "hideable",
    "profile",
    "spellings",
]
