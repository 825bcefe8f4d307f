"""Where an allow prefix stops: the options of the programs people allow that write a file
or start another program (pure; the readers are in cli/safety/argv.py).

`needed_prefix(words)` is how many leading words of one simple command an allow prefix must
spell out for it to run unasked. For a program not listed here it is 0: its prefix allows
all of its arguments, as before. For a listed one, every option that is not on the
program's list of harmless options counts, so `git diff --output=.bashrc` needs a prefix
naming `--output=.bashrc`, and the prefix `git diff` does not do. What each program's prefix
allows, and why (the project-code ones run that code by design):

- git: see cli/safety/command_git.py.
- find: paths, then tests and `-print`, `-printf`, `-ls`, `-prune`…; `-exec`, `-execdir`,
  `-ok`, `-okdir`, `-delete`, `-fprint*`, `-fls` and anything unlisted ask.
- sed: `-n -E -r -s -u -z`, `-e SCRIPT`; the script must pass cli/safety/command_scripts.py (no
  w/W/r/R/e, no `s///w` or `s///e`); `-i`, `-f FILE` (a script not on the line) ask.
- awk (gawk, mawk, nawk): `-F`, `-v`, and a program that passes cli/safety/command_scripts.py;
  `-f`, `-e`, `-i`, `-l`, `-o`, `-p`, `-d`, `-W` ask.
- sort: its ordering, key, check and merge options; `-o/--output`,
  `-T/--temporary-directory`, `--compress-program` and anything unlisted ask.
- tar: listing (`-t`), comparing (`-d`) and extracting to standard output (`-xO`), with
  `-f ARCHIVE` (no `host:` archive), `-v` and the decompression switches; creating,
  extracting to disk, `--to-command`, `-I/--use-compress-program`, `--checkpoint-action`,
  `-C` and the rest ask.
- rsync: copies into its destination (any file the sandbox lets it write: that is what
  rsync does); `-e/--rsh`, `--rsync-path`, remote `host:` or `rsync://` operands (they start
  ssh or reach a daemon), `--log-file`, `--write-batch`, `--backup-dir`, `--temp-dir`,
  `--remove-source-files` and anything unlisted ask.
- make: runs the Makefile's recipes and make's built-in rules for the targets named (the
  project's own code); `-f`, `-C`, `--eval`, `-I`, `-t` and `VAR=value` operands (they
  choose what runs: `make CC=…`) ask.
- npm: `npm test`, `npm start`, `npm run NAME` run the project's package.json scripts by
  design, with no argument passed on to them (`-- --fix` asks); reads (`ls`, `view`,
  `outdated`, `config get`…); install, ci, exec, pack and every other subcommand only as the
  prefix's exact words; `--prefix`, `--script-shell`, `--workspace`, `-c` and other options
  not listed ask.
- npx NAME: NAME's own options are read as NAME's; npx's options ask.
- cargo, go, python, pytest: see cli/safety/command_toolchains.py.
- programs that run their arguments (`stdbuf`, `setsid`, `watch`, `strace`…, and the
  wrappers when named by a path: `/usr/bin/env`): only the prefix's exact words.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from cli.safety.argv import (
    Operand,
    Options,
    Reader,
    names,
    read_option,
    read_options,
)
from cli.safety.command_git import read_git
from cli.safety.command_scripts import awk_program_ok, sed_script_ok
from cli.safety.command_toolchains import _cargo, _go, _pytest, _python
from cli.safety.shell_line import UNKNOWN


def needed_prefix(words: list[str]) -> int:
    """How many leading words of this simple command an allow prefix must spell out for
    it to run unasked (0: any prefix matching it will do; len(words) + 1: none)."""
    read = _PROGRAMS.get(_program(words[0])) if words else None
    if read is None:
        return 0
    r = Reader(words)
    read(r, 1)
    return r.needed


_VERSIONED = re.compile(r"(python|pytest)[-\d.]*")


def _program(word: str) -> str:
    """The program a command word names: `/usr/bin/git` is git, `python3.12` python."""
    name = os.path.basename(word)
    versioned = _VERSIONED.fullmatch(name)
    if versioned:
        return versioned.group(1)
    return _ALIASES.get(name, name)


_ALIASES = {
    "gawk": "awk", "mawk": "awk", "nawk": "awk", "original-awk": "awk", "gsed": "sed",
    "gfind": "find", "gsort": "sort", "gtar": "tar", "bsdtar": "tar", "gmake": "make",
    "py.test": "pytest",
}  # fmt: skip


def _delegate(r: Reader, start: int) -> None:
    """Words from `start` are a command of their own (`python -m pytest …`, `npx NAME …`)."""
    inner = needed_prefix(r.words[start:])
    if inner:
        r.needed = max(r.needed, start + inner)


# -- find ---------------------------------------------------------------------------------------

_FIND_GLOBAL = frozenset({"-H", "-L", "-P"})
_FIND_NO_ARG = names(
    "-print -print0 -ls -prune -quit -true -false -empty -executable -readable -writable "
    "-nouser -nogroup -depth -d -xdev -mount -follow -noleaf -daystart "
    "-ignore_readdir_race -noignore_readdir_race -warn -nowarn -not -a -and -o -or ! ( ) ,"
)
_FIND_ONE_ARG = names(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -regextype -type -xtype "
    "-size -mtime -mmin -atime -amin -ctime -cmin -newer -anewer -cnewer -perm -user -group "
    "-uid -gid -links -inum -samefile -lname -ilname -fstype -used -maxdepth -mindepth "
    "-printf"
)
_FIND_NEWER = re.compile(r"-newer[aBcmt][aBcmt]")
_FIND_EXPRESSION_START = frozenset({"(", ")", "!", ","})


def _find(r: Reader, start: int) -> None:
    """`find [-H|-L|-P] PATH… EXPRESSION`: each primary on the lists, with its argument
    (which may start with `-`: `-mtime -1`); an UNKNOWN word anywhere may be `-delete`."""
    words = r.words
    i = start
    while i < len(words) and words[i] in _FIND_GLOBAL:
        i += 1
    while i < len(words) and not _find_expression(words[i]):
        if r.unknown(i):
            r.risky_rest(i)
            return
        i += 1
    while i < len(words):
        word = words[i]
        if word in _FIND_NO_ARG:
            i += 1
        elif word in _FIND_ONE_ARG or _FIND_NEWER.fullmatch(word):
            if i + 1 < len(words) and r.unknown(i + 1):
                r.risky_rest(i)
                return
            i += 2
        else:
            r.risky_rest(i)  # -exec, -delete, -fprint, an UNKNOWN word, …
            return


def _find_expression(word: str) -> bool:
    return word.startswith("-") or word in _FIND_EXPRESSION_START


# -- sed and awk -----------------------------------------------------------------------------

_SED = Options(
    flags="nErsuz",
    valued="e",
    long_flags=names(
        "quiet silent regexp-extended separate unbuffered null-data posix sandbox debug"
    ),
    long_valued=names("expression"),
)
_AWK = Options(valued="Fv")


def _sed(r: Reader, start: int) -> None:
    """The script is `-e`'s value (checked as it is read) or else the first operand."""
    scripts: list[str] = []

    def script(text: str) -> bool:
        scripts.append(text)
        return sed_script_ok(text)

    operands: list[int] = []
    spec = _SED | Options(values={"-e": script, "--expression": script})
    read_options(r, start, spec, lambda _, i: operands.append(i))
    if scripts:
        return
    if not operands:
        r.never()  # no script on the line
    elif r.unknown(operands[0]) or not sed_script_ok(r.words[operands[0]]):
        r.risky(operands[0])


def _awk(r: Reader, start: int) -> None:
    """awk stops reading options at its program; what follows is files and `var=value`."""
    words = r.words
    i = start
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "--"):
        i = read_option(r, i, _AWK)
    if i < len(words) and words[i] == "--":
        i += 1
    if i >= len(words):
        return
    if r.unknown(i) or not awk_program_ok(words[i]):
        r.risky(i)


# -- sort, tar, rsync ------------------------------------------------------------------------

_SORT = Options(
    flags="bdfgiMhnRrVcCmsuz",
    valued="ktS",
    long_flags=names(
        "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
        "ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort reverse "
        "version-sort merge stable unique zero-terminated debug"
    ),
    long_valued=names("key field-separator buffer-size parallel sort"),
    long_attached=names("check"),
)


def _sort(r: Reader, start: int) -> None:
    read_options(r, start, _SORT)


def _local_archive(value: str) -> bool:
    return ":" not in value  # `host:file` runs rsh/ssh to reach it


_TAR = Options(
    flags="tdxOvzjJZa",
    valued="f",
    long_flags=names(
        "list diff compare extract get to-stdout verbose gzip gunzip ungzip bzip2 xz lzma "
        "lzip lzop zstd compress uncompress auto-compress wildcards no-wildcards anchored "
        "no-anchored ignore-case no-ignore-case numeric-owner full-time utc"
    ),
    long_valued=names("file exclude"),
    long_attached=names("occurrence"),
    values={"-f": _local_archive, "--file": _local_archive},
)
_TAR_READS = frozenset({"t", "d", "--list", "--diff", "--compare"})
_TAR_EXTRACT = frozenset({"x", "--extract", "--get"})
_TAR_TO_STDOUT = frozenset({"O", "--to-stdout"})


def _tar(r: Reader, start: int) -> None:
    """Reading forms only: the prefix must name extracting to disk or creating."""
    words = r.words
    if start < len(words) and words[start][:1] not in ("-", "", UNKNOWN):
        # Old style: `tar tvf ARCHIVE` is `tar -t -v -f ARCHIVE`.
        words = [*words[:start], f"-{words[start]}", *words[start + 1 :]]
    probe = Reader(words)
    read_options(probe, start, _TAR)
    r.needed = max(r.needed, probe.needed)
    options = words[start:]
    modes = _tar_letters(options[: options.index("--")] if "--" in options else options)
    extract_to_stdout = modes & _TAR_EXTRACT and modes & _TAR_TO_STDOUT
    if not (modes & _TAR_READS or extract_to_stdout):
        r.risky(start)


def _tar_letters(words: list[str]) -> set[str]:
    """The short option letters and long options among `words` (values are never mode
    letters: those taking one are only -f)."""
    found: set[str] = set()
    for word in words:
        if word.startswith("--"):
            found.add(word.partition("=")[0])
        elif word.startswith("-"):
            found.update(word[1 : (word.find("f") + 1 or len(word))])
    return found


_RSYNC = Options(
    flags="avrlptgoDzhnPucxHAXSWiqmRLkKOJ",
    long_flags=names(
        "archive verbose recursive links perms times group owner devices specials compress "
        "human-readable dry-run progress partial update checksum one-file-system "
        "hard-links acls xattrs sparse whole-file itemize-changes quiet prune-empty-dirs "
        "stats delete delete-after delete-before delete-during delete-excluded "
        "ignore-existing existing size-only no-perms no-owner no-group no-times copy-links "
        "safe-links mkpath list-only relative no-relative inplace append copy-unsafe-links "
        "keep-dirlinks omit-dir-times no-inc-recursive"
    ),
    long_valued=names("exclude include info max-size min-size"),
)


def _rsync(r: Reader, start: int) -> None:
    # host:path and rsync:// start ssh or reach a daemon
    read_options(r, start, _RSYNC, _operand_without(":"))


def _operand_without(char: str) -> Operand:
    """An operand holding `char` (or UNKNOWN, which may) must be named by the prefix."""

    def operand(r: Reader, i: int) -> None:
        if r.unknown(i) or char in r.words[i]:
            r.risky(i)

    return operand


# -- make, npm, npx ---------------------------------------------------------------------------

# Not -d: BSD make's `-d F/path` writes its debug output to a file.
_MAKE = Options(
    flags="ksnqBwirRpLS",
    attached="jlO",
    long_flags=names(
        "keep-going silent quiet dry-run just-print recon question always-make "
        "print-directory no-print-directory trace ignore-errors no-builtin-rules "
        "no-builtin-variables print-data-base version help no-silent "
        "warn-undefined-variables check-symlink-times no-keep-going stop"
    ),
    long_attached=names("jobs output-sync debug load-average"),
)


def _make(r: Reader, start: int) -> None:
    # `CC=…`, `SHELL=…`, `MAKEFLAGS=…` choose what runs
    read_options(r, start, _MAKE, _operand_without("="))


_NPM = Options(
    flags="sqlap",
    long_flags=names(
        "silent quiet if-present ignore-scripts json long all parseable no-color offline "
        "prefer-offline no-fund no-audit no-update-notifier version"
    ),
    long_valued=names("loglevel depth"),
)
_NPM_READS = names("ls list ll la outdated view info show v why explain fund root bin prefix")
_NPM_SCRIPTS = names("test t tst start stop restart")
_NPM_RUN = names("run run-script rum urn")


def _npm(r: Reader, start: int) -> None:
    """npm reads its options anywhere before `--`."""
    operands: list[int] = []
    ended = read_options(r, start, _NPM, lambda _, i: operands.append(i))
    if ended < len(r.words):
        r.risky(ended)  # what follows `--` goes to the script
    if not operands:
        return
    sub = r.words[operands[0]]
    rest = operands[1:]
    if sub in _NPM_READS:
        return
    if sub in _NPM_SCRIPTS and rest:
        r.risky(rest[0])  # passed on to the script
    elif sub in _NPM_RUN and len(rest) > 1:
        r.risky(rest[1])
    elif sub == "version" and rest:
        r.risky(rest[0])  # `npm version patch` writes package.json and commits
    elif sub in ("config", "c") and rest and r.words[rest[0]] in ("get", "list", "ls"):
        return
    elif sub not in _NPM_SCRIPTS | _NPM_RUN | {"version"}:
        r.risky_rest(operands[0])


_NPX_NAME = re.compile(r"[@A-Za-z0-9][A-Za-z0-9._@/-]*")


def _npx(r: Reader, start: int) -> None:
    words = r.words
    if start >= len(words):
        return
    if words[start].startswith("-") or not _NPX_NAME.fullmatch(words[start]):
        r.risky_rest(start)  # npx's own options (-c, -p, --call…), specs with `:` or paths
        return
    _delegate(r, start)


# Programs that run their arguments as a command. The shell reader unwraps `env`, `timeout`,
# `nice`, `xargs`, `sh -c`… named bare; named by a path (`/usr/bin/env git …`), or not known
# to it (`stdbuf`, `setsid`…), what they run is not read: the prefix must be the whole line.
_RUNNERS = names(
    "env timeout nice nohup time command xargs sh bash dash zsh ksh stdbuf ionice chrt "
    "taskset setsid flock unbuffer watch strace ltrace valgrind nsenter unshare chroot "
    "firejail bwrap systemd-run script parallel entr"
)


def _runner(r: Reader, start: int) -> None:
    r.risky_rest(start)


_PROGRAMS: dict[str, Callable[[Reader, int], None]] = {
    **dict.fromkeys(_RUNNERS, _runner),
    "git": read_git,
    "find": _find,
    "sed": _sed,
    "awk": _awk,
    "sort": _sort,
    "tar": _tar,
    "rsync": _rsync,
    "make": _make,
    "npm": _npm,
    "npx": _npx,
    "cargo": _cargo,
    "go": _go,
    "python": _python,
    "pytest": _pytest,
}
