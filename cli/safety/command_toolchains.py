"""Where an allow prefix stops, for the language toolchains people allow: cargo, go, python
and pytest, which run the project's code by design (pure; the readers are in
cli/safety/argv.py; the other programs are in cli/safety/command_options.py). What each
program's prefix allows:

- cargo: build, check, test, run, bench, doc, clippy, metadata, tree (build scripts and tests
  are the project's code); `--config`, `-Z`, `+toolchain`, `--manifest-path`,
  `--target-dir`, `--open`, `--fix`, arguments for the program `cargo run` starts, and test
  harness options other than the usual ones (`--logfile` writes) ask.
- go: build (writes its binary in the working directory), test, vet, run, list, version,
  env, doc, generate (runs the `//go:generate` lines of the project); `-o`, `-exec`,
  `-toolexec`, `-ldflags`, `-gcflags`, `-overlay`, `-modfile`, `-C`, profiles, `env -w`
  and the program arguments of `go run` ask.
- python, python3: runs a script file of the project, with no arguments; `-c`, `-m` (but
  `-m pytest` and `-m unittest`, read as those), `-W`, `-X`, `-i` ask, and so does reading
  the program from standard input (no script, `-`, `/dev/stdin`: no prefix allows that).
- pytest: runs the project's tests; `-p` (but `-p no:NAME`), `-c`, `-o`, `--basetemp`
  (emptied first), `--junitxml`, `--debug`, `--pdb`, `--rootdir`, `-W` and anything unlisted
  ask.
"""

from __future__ import annotations

import re

from cli.safety.argv import (
    GoFlags,
    Options,
    Reader,
    names,
    one_of,
    plain_operand,
    read_go_flag,
    read_option,
    read_options,
)

# -- cargo ------------------------------------------------------------------------------------

_CARGO_GLOBAL = Options(
    flags="qvV",
    long_flags=names("quiet verbose offline frozen locked version list"),
    long_valued=names("color"),
)
_CARGO_BUILD = _CARGO_GLOBAL | Options(
    flags="r",
    valued="pFj",
    long_flags=names(
        "release all-features no-default-features workspace all lib bins examples tests "
        "benches all-targets keep-going no-run no-fail-fast doc ignore-rust-version"
    ),
    long_valued=names(
        "profile features package exclude bin example test bench target jobs message-format"
    ),
)
_CARGO_SUBCOMMANDS: dict[str, Options] = {
    **dict.fromkeys(("build", "b", "check", "c", "test", "t", "bench", "run", "r"), _CARGO_BUILD),
    **dict.fromkeys(("doc", "d"), _CARGO_BUILD | Options(
        long_flags=names("no-deps document-private-items"))),
    "clippy": _CARGO_BUILD | Options(long_flags=names("no-deps")),
    "metadata": _CARGO_GLOBAL | Options(
        long_flags=names("no-deps all-features no-default-features"),
        long_valued=names("format-version features filter-platform")),
    "tree": _CARGO_GLOBAL | Options(
        flags="id", valued="ipef",
        long_flags=names("invert no-dedupe duplicates all-features no-default-features workspace"),
        long_valued=names("package depth prefix charset format target features edges")),
    "version": _CARGO_GLOBAL,
}  # fmt: skip
# What `cargo test -- …` may pass to the test harness (libtest): `--logfile` writes.
_LIBTEST = Options(
    flags="q",
    long_flags=names("nocapture show-output ignored include-ignored exact quiet list"),
    long_valued=names("test-threads skip color format"),
    values={"--format": one_of(["pretty", "terse"])},
)
_CLIPPY_LINTS = Options(valued="DWAF", long_valued=names("cap-lints"))


def _cargo(r: Reader, start: int) -> None:
    words = r.words
    i = start
    while i < len(words) and words[i].startswith("-"):
        i = read_option(r, i, _CARGO_GLOBAL)
    if i >= len(words):
        return
    spec = _CARGO_SUBCOMMANDS.get(words[i])
    if spec is None:
        r.risky_rest(i)  # +toolchain, install, fix, fmt, publish, an alias, …
        return
    sub = words[i]
    after = _LIBTEST if sub in ("test", "t", "bench") else _CLIPPY_LINTS
    ran = sub in ("run", "r")

    def operand(r: Reader, k: int) -> None:
        if ran:
            r.risky(k)  # the program's own arguments

    ended = read_options(r, i + 1, spec, operand)
    if ended < len(words):
        if ran or sub not in ("test", "t", "bench", "clippy"):
            r.risky(ended)
        else:
            read_options(r, ended + 1, after)


# -- go ---------------------------------------------------------------------------------------

_GO_BUILD = GoFlags(
    bools=names("a n race msan asan cover v work x trimpath json"),
    valued=names("p covermode coverpkg tags mod buildvcs"),
    values={"mod": one_of(["readonly", "vendor", "mod"])},
)
_GO_TEST_FLAGS = "run skip bench benchtime count cpu list parallel timeout vet shuffle"
_GO_TEST = _GO_BUILD | GoFlags(
    bools=names(
        "benchmem failfast short fullpath "
        + " ".join(f"test.{f}" for f in ["v", "benchmem", "failfast", "short", "fullpath"])
    ),
    valued=names(_GO_TEST_FLAGS + " " + " ".join(f"test.{f}" for f in _GO_TEST_FLAGS.split())),
)
_GO: dict[str, GoFlags] = {
    "build": _GO_BUILD,
    "test": _GO_TEST,
    "vet": _GO_BUILD,
    "run": _GO_BUILD,
    "list": _GO_BUILD | GoFlags(bools=names("m e deps test find compiled"), valued=names("f")),
    "version": GoFlags(bools=names("m v")),
    "env": GoFlags(bools=names("json")),
    "doc": GoFlags(bools=names("all c cmd short src u")),
    "generate": GoFlags(bools=names("n v x"), valued=names("run skip")),
}


def _go(r: Reader, start: int) -> None:
    words = r.words
    if start >= len(words):
        return
    spec = _GO.get(words[start])
    if spec is None:
        r.risky_rest(start)  # install, mod, get, tool, clean, fmt, work, …
        return
    run = _GoRun() if words[start] == "run" else None
    i = start + 1
    while i < len(words):
        if r.unknown(i) or (run and run.arguments):
            r.risky(i)  # a flag, or the program's own argument
            i += 1
        elif words[i].startswith("-") and not (run and run.files is not None):
            i = read_go_flag(r, i, spec)
        else:
            if run and run.operand(words[i]):
                r.risky(i)
            i += 1


class _GoRun:
    """`go run [flags] PACKAGE ARGS…` or `go run [flags] a.go b.go ARGS…`: after the
    package, or from the first word that is not a .go file, come the program's arguments."""

    def __init__(self) -> None:
        self.files: bool | None = None
        self.arguments = False

    def operand(self, word: str) -> bool:
        """Whether `word`, an operand before the arguments, is itself an argument."""
        if self.files is None:
            self.files = word.endswith(".go")
            self.arguments = not self.files
            return False
        if self.files and word.endswith(".go"):
            return False
        self.arguments = True
        return True


# -- python, pytest ---------------------------------------------------------------------------

# -c, -m, -W (a warning category is imported by name) and -X are read apart or ask.
_PYTHON = Options(flags="BEIOPqsSuvbdRVh", long_flags=names("version help"), dashdash=False)
_STDIN_SCRIPTS = re.compile(r"-|/dev/.*|/proc/.*")
_PYTHON_EXITS = frozenset({"-V", "--version", "-h", "--help"})  # print and run nothing
_UNITTEST = Options(
    flags="vqfcb",
    valued="kspt",
    long_flags=names("verbose quiet failfast catch buffer locals"),
    long_valued=names("durations"),
)


def _python(r: Reader, start: int) -> None:
    """`python [-BEOqsu…] SCRIPT`: the project's script, with no arguments; `-m pytest` and
    `-m unittest` read as those; a program from stdin (no script, `-`) never."""
    words = r.words
    i = start
    while i < len(words) and words[i].startswith("-") and not _STDIN_SCRIPTS.fullmatch(words[i]):
        module = _python_module(words, i)
        if module is not None:
            _python_m(r, i, *module)
            return
        i = read_option(r, i, _PYTHON)
    if i >= len(words):
        if not _PYTHON_EXITS & set(words[start:]):
            r.never()  # the program would come from standard input
    elif r.unknown(i) or _STDIN_SCRIPTS.fullmatch(words[i]):
        r.never()
    elif i + 1 < len(words):
        r.risky(i + 1)  # the script's own arguments


def _python_module(words: list[str], i: int) -> tuple[str, int] | None:
    """(module, index of the first argument) if `words[i]` is `-m MODULE` or `-mMODULE`."""
    word = words[i]
    if word == "-m":
        return (words[i + 1], i + 2) if i + 1 < len(words) else ("", i + 1)
    if word.startswith("-m"):
        return word[2:], i + 1
    return None


def _python_m(r: Reader, at: int, module: str, args: int) -> None:
    if module == "pytest":
        _pytest(r, args)
    elif module == "unittest":
        read_options(r, args, _UNITTEST)
    else:
        r.risky(args - 1)  # any other module: the prefix must name it


def _plugin(value: str) -> bool:
    return value.startswith("no:")  # disabling a plugin loads nothing


_PYTEST = Options(
    flags="vqxsl",
    valued="kmrnp",
    long_flags=names(
        "verbose quiet exitfirst showlocals lf last-failed ff failed-first nf new-first sw "
        "stepwise sw-skip stepwise-skip co collect-only no-header no-summary runxfail "
        "strict-markers strict-config disable-warnings disable-pytest-warnings "
        "doctest-modules continue-on-collection-errors full-trace noconftest setup-show "
        "setup-plan setup-only"
    ),
    long_valued=names(
        "capture tb maxfail durations durations-min color code-highlight deselect ignore "
        "ignore-glob log-level log-cli-level"
    ),
    values={"-p": _plugin},
)


def _pytest(r: Reader, start: int) -> None:
    read_options(r, start, _PYTEST, plain_operand)
