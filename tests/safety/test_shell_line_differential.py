"""The allow matcher judged by the real shells (issue 7, "a matcher that cannot be fooled").

Every line is run with `/bin/sh -c` (dash) and `bash -c` in a scratch dir whose PATH holds only
logging stand-ins. For a line `matches_allow` accepts, each shell must run nothing but the
simple commands the matcher predicted, each starting with an allowed prefix, write no file,
and report no syntax error or unknown command. Lines it refuses run too: the dangerous ones
must really do something the allow list does not cover, so the corpus proves its point.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.safety.shell_line import UNKNOWN, matches_allow, simple_commands

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(
    BASH is None or not os.path.exists("/bin/sh"), reason="needs /bin/sh and bash"
)
SHELLS = (("/bin/sh", "-c"), (BASH or "bash", "-c"))

# How dash and bash report a line they cannot parse (not `test: syntax error`, a builtin's).
SHELL_SYNTAX_ERROR = re.compile(r"Syntax error|syntax error near|unexpected (EOF|end of file)")

ALLOW = [
    "ls", "cat", "wc -l", "git status", "git diff", "sort", "grep", "echo", "printf", "test",
    "env",
]  # fmt: skip
ALLOWED = [prefix.split() for prefix in ALLOW]

# Stand-ins that log their argv and exit 0: every command name the corpus uses.
COMMAND_NAMES = [
    "ls", "cat", "wc", "git", "grep", "echo", "printf", "test", "true", "false", "pwd", "rm",
    "touch", "curl", "python3", "head", "tail", "find", "id", "x", "mv", "cp", "chmod", "tee",
    "sort", "sed", "awk", "wget", "nc", "f", "ksh", "zsh", "sudo",
]  # fmt: skip
# Stand-ins that log themselves, then exec the real program (which finds the inner command
# on the stand-in PATH).
WRAPPER_NAMES = ["env", "nohup", "nice", "timeout", "xargs", "time"]
SCRATCH_FILES = {"a.txt": "alpha\n", "b.txt": "beta\n", "rm": "a file named rm\n", "sub/c": ""}

# -- the corpus --------------------------------------------------------------------------------

# The four strings issue 7 names: read as `ls …` by the old matcher, run as more by the shell.
ISSUE_CASES = {
    "backslashes inside backticks": 'ls `ls \\"; rm x; \\"`',
    "&> (bash syntax; dash reads & then >)": "ls &>/dev/null rm x",
    "$'…' inside bash -c": "bash -c \"ls \\$'\\\\'' ; rm x\n'\"",
    ">&word (bash writes the file 2x)": "ls >&2x",
}

# Plain lines that must be allowed: the matcher is not allowed to pass by refusing everything.
BENIGN = [
    "ls -la",
    "git status -s",
    "ls | wc -l",
    "cat a.txt && ls",
    "ls 2>&1",
    "sh -c 'ls -l'",
    "ls",
    "ls; ls",
    "ls\nls\n",
    "ls;",
    "cat a.txt || ls",
    "git status && ls || cat b.txt",
    "ls >/dev/null 2>&1",
    "cat </dev/null",
    "ls 2>/dev/null | grep a",
    "cat 'a b.txt' \"c d.txt\"",
    'grep "x y" a.txt',
    "grep 'a|b;c&d' a.txt",
    "echo '$HOME `id` \\ \"'",
    "ls *.txt",
    "ls ~",
    "ls ~/sub",
    "ls -- -rf",
    "ls --color=auto a=b x:y @z %w +v ,u",
    "l''s -l",
    "'ls' -l",
    "timeout 5 ls",
    "timeout -s KILL -k 1 5 ls",
    "nice -n 5 ls",
    "nice ls",
    "env ls -l",
    "nohup ls",
    "time ls",
    "command ls",
    "env nice -n 1 timeout 5 ls",
    "ls | xargs grep x",
    "ls | xargs -0 -n 1 cat",
    "echo hi | xargs",
    "bash -c 'ls -l' name",
    "dash -c 'cat a.txt | wc -l'",
    "sh -c \"ls 'a b'\"",
    "sh -c 'sh -c \"ls\"'",
    "sh -c 'ls' -c 'rm x'",
    "ls >/dev/null rm x",
    "echo hi",
    "printf '%s\\n' a b",
    "test -f a.txt && cat a.txt",
    "git status\n\ngit status --short\n",
    # options the allow prefixes read (cli/safety/command_options.py), however the shell spells them
    "git status '-s'",
    "git status -'s' --porcelain=v2",
    "git diff --stat -- '*'",
    "'git' diff --name-only",
    "sort -u a.txt",
    "sort -k 2 -t , a.txt b.txt",
    "sort '-r''n' a.txt",
    "ls | xargs git status --",
    "timeout 5 sort -u a.txt",
    "sh -c 'git diff --stat'",
]

# Lines the matcher must refuse, and that run something outside ALLOW in at least one shell.
DANGEROUS = [
    *ISSUE_CASES.values(),
    "ls && rm x",
    "ls&&rm x",
    "ls;rm x",
    "ls|rm x",
    "ls & rm x",
    "ls &rm x",
    "ls |& rm x",
    "ls\nrm x",
    "ls\r\nrm x",
    "ls $(rm x)",
    "ls `rm x`",
    'ls "$(rm x)"',
    'ls "`rm x`"',
    "ls ${x:-$(rm x)}",
    "ls <(rm x)",
    "ls >(rm x)",
    "ls > out",
    "ls >> out",
    "ls 2> out",
    "ls >~/.bashrc",
    "ls >| out",
    "ls <> out",
    "ls >&out",
    "cat <<EOF\nls\nEOF\nrm x",
    "cat <<'EOF'\nEOF\nrm x",
    "ls \\\n&& rm x",
    "alias ls=rm\nls x",
    "ls; {rm,x}",
    "{ ls; rm x; }",
    "(ls; rm x)",
    "ls #\nrm x",
    "x=rm; $x y",
    "ls${IFS}x;rm${IFS}x",
    "IFS=x; y=rmxx; $y",
    "[[ -f a.txt || rm x ]]",
    "if ls; then rm x; fi",
    "for f in a; do rm x; done",
    "case x in x) rm x;; esac",
    "f() { rm x; }; f",
    "function f { rm x; }; f",
    "! rm x",
    "coproc rm x",
    "r? x",
    "echo 'rm x' | xargs -I ls sh -c ls",
    "echo rm x | xargs env",
    "echo rm | xargs xargs",
    "echo rm | xargs sh -c",
    "echo rm x | sh",
    "sh -c -x 'rm x'",
    "env -S 'rm x' ls",
    "env LD_PRELOAD=x rm",
    "test -v 'a[$(rm x)]'",
    "printf -v 'a[$(rm x)]' y",
    "eval 'ls; rm x'",
    "exec rm x",
    "trap 'rm x' EXIT; ls",
    "time -p rm x",
    "nice -n 5 rm x",
    "timeout 5 rm x",
    "nohup rm x",
    "bash -c 'ls; rm x'",
    "zsh -c 'rm x'",
    "sudo ls",
]

# Tricky lines either way: refused is fine; if allowed, the shells must agree.
TRICKY = [
    "ls $x",
    "ls a$x",
    "ls $HOME",
    "ls \\x",
    "ls a\\ b",
    "ls \\\\",
    'ls "$x"',
    'ls "\\x"',
    "ls ~x",
    "ls '~'x",
    "ls &>/dev/null ls",
    "cat a.txt &>/dev/null ls",
    "ls & ls",
    "echo a.txt | xargs cat",
    "echo a.txt b.txt | xargs -n 1 cat",
    "echo status | xargs git",
    "echo ls | xargs env",
    "env ls=x",
    "ls ;& rm x",
    "command -p true",
    "ls >&2 rm",
    "ls 2>&1x",
    "ls 1>&2",
    "ls 2>&-",
    "ls 2>/dev/nullx",
    "ls $'\\x3b' rm x",
    "ls \\\nrm x",
    "ls \\; rm x",
    "alias ls=rm; ls x",
    "ls {a,b}",
    "ls # ; rm x",
    "ls a#b",
    "ls\u00a0-la",
    "ls\u200b -la",
    "ls\uff1b rm x",
    "ls\rrm x",
    "ls\trm x",
    "ls\x0brm x",
    "ls !x",
    "ls ^ rm x",
    "ls a~",
    "ls a=~",
    "ls x:~",
    "ls ~+ ~- ~root",
    "* x",
    "git st?tus",
    "git st* -s",
    "ls [ ]",
    "[ -f a.txt ] && ls",
    "FOO=1 ls",
    "env FOO=1 ls",
    "env ls=x ls",
    "time\nls",
    "time ls | ls",
    "ls ;; ls",
    "&& ls",
    "ls &&",
    "| ls",
    "ls ||",
    "; ls",
    "ls\n&& ls",
    "ls &&\nls",
    ">/dev/null",
    "2>&1 ls",
    "ls 'unterminated",
    'ls "unterminated',
    'ls "a!b"',
    'ls "a\\"b"',
    "ls '\n'",
    "cd sub && ls",
    "cd /; ls",
    "hash -p /nonexistent ls; ls",
    "set -f; ls *",
    "shopt -s expand_aliases; alias ls=rm\nls x",
    "read x </dev/null; ls",
    "ls | xargs -I x cat x",
    "ls | xargs -n1",
    "xargs ls </dev/null",
    "sh",
    "sh -c",
    "sh -x -c ls",
    "bash -c 'ls' & ls",
    "nice -n x ls",
    "timeout 5",
    "env",
    "env -- ls",
    "command",
    "command -v ls",
    "printf -- '-v x'",
    "test -n x -o -v y",
    "echo *",
    "git status '*'",
    "ls ''",
    'ls ""',
    "ls %1",
    "%1",
    "ls --",
    "ls -",
    # writing options, spelled through quotes: refused, or if allowed the shells agree
    "sort -o x a.txt",
    "sort -'o' x a.txt",
    "sort '-o'x a.txt",
    "sort -u''o x a.txt",
    "so''rt --out''put=x a.txt",
    "git diff --out''put=x",
    "git diff '--output'=x",
    "git 'diff' -- --output=x",
    "git status *",
    "ls | xargs sort",
    "ls | xargs git diff",
    "sort -- -o x",
    "sh -c 'sort -o x a.txt'",
]

FIXED_LINES = BENIGN + DANGEROUS + TRICKY
GENERATED_EXAMPLES = 300

# -- the lab: stand-ins, scratch dir, log -------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one shell did with one line."""

    commands: list[list[str]]  # argv of every stand-in command that ran, name first
    wrappers: list[list[str]]
    stderr: str
    wrote: bool  # the scratch dir changed

    @property
    def escaped(self) -> bool:
        """It did something the allow list does not cover."""
        return self.wrote or not all(allowed(argv) for argv in self.commands)


def allowed(argv: list[str]) -> bool:
    return any(argv[: len(prefix)] == prefix for prefix in ALLOWED)


def fits(argv: list[str], predicted: list[str]) -> bool:
    """`argv` is `predicted`, where an UNKNOWN word stands for any run of words (a glob, `~`,
    what xargs appends)."""
    if not predicted:
        return not argv
    if predicted[0] == UNKNOWN:
        return any(fits(argv[k:], predicted[1:]) for k in range(len(argv) + 1))
    return bool(argv) and argv[0] == predicted[0] and fits(argv[1:], predicted[1:])


class Lab:
    """A PATH of logging stand-ins, a scratch dir (cwd and HOME) and a log outside it."""

    def __init__(self, root: Path) -> None:
        self.bin, self.scratch, self.log = root / "bin", root / "scratch", root / "log"
        for directory in (self.bin, self.log):
            directory.mkdir()
        for name in COMMAND_NAMES:
            self._script(name, f'printf "%s\\0" command "$#" {name} "$@" >>"{self.log}/$$"')
        for name in WRAPPER_NAMES:
            real = shutil.which(name)
            target = f'"{real}" "$@"' if real else '"$@"'
            self._script(name, f'printf "%s\\0" wrapper "$#" {name} "$@" >>"{self.log}/$$"\n'
                         f"exec {target}")  # fmt: skip
        for shell in ("sh", "bash", "dash"):
            real = shutil.which(shell)
            if real:
                (self.bin / shell).symlink_to(os.path.realpath(real))
        self._reset()
        self.pristine = self._snapshot()

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\nexit 0\n", encoding="ascii")
        path.chmod(0o755)

    def _reset(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        for name, text in SCRATCH_FILES.items():
            (self.scratch / name).parent.mkdir(parents=True, exist_ok=True)
            (self.scratch / name).write_text(text, encoding="ascii")

    def _snapshot(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.scratch)): p.read_bytes() if p.is_file() else b"/"
            for p in sorted(self.scratch.rglob("*"))
        }

    def run(self, shell: tuple[str, str], line: str) -> Outcome:
        for entry in self.log.iterdir():
            entry.unlink()
        stderr = self._execute([*shell, line])
        wrote = self._snapshot() != self.pristine
        if wrote:
            self._reset()
        commands, wrappers = self._records()
        return Outcome(commands, wrappers, stderr, wrote)

    def _execute(self, argv: list[str]) -> str:
        """Run `argv` and wait for every process it started (they hold `done`'s write end)."""
        done, hold = os.pipe()
        env = {"PATH": str(self.bin), "HOME": str(self.scratch), "LC_ALL": "C"}
        try:
            proc = subprocess.run(
                argv, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL,
                capture_output=True, timeout=20, pass_fds=(hold,), check=False,
            )  # fmt: skip
            os.close(hold)
            hold = -1
            select.select([done], [], [], 20)
        finally:
            os.close(done)
            if hold >= 0:
                os.close(hold)
        return proc.stderr.decode("utf-8", "replace")

    def _records(self) -> tuple[list[list[str]], list[list[str]]]:
        found: dict[str, list[list[str]]] = {"command": [], "wrapper": []}
        for entry in self.log.iterdir():
            fields = entry.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
            while fields:
                kind, count = fields[0], int(fields[1])
                found[kind].append(fields[2 : 3 + count])
                fields = fields[3 + count :]
        return found["command"], found["wrapper"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("differential"))


def run_both(lab: Lab, line: str) -> Iterator[tuple[str, Outcome]]:
    for shell in SHELLS:
        yield shell[0], lab.run(shell, line)


def assert_shells_agree(lab: Lab, line: str) -> None:
    """`line` is allowed: each shell runs only predicted, allowed commands and writes nothing."""
    predicted = simple_commands(line)
    assert predicted, line
    for shell, outcome in run_both(lab, line):
        where = f"{shell} -c {line!r}"
        assert not SHELL_SYNTAX_ERROR.search(outcome.stderr), f"{where}: {outcome.stderr}"
        assert "not found" not in outcome.stderr, f"{where}: {outcome.stderr}"
        assert not outcome.wrote, f"{where} wrote to its directory"
        for argv in outcome.commands:
            assert allowed(argv), f"{where} ran {argv}, which ALLOW does not cover"
            assert any(fits(argv, p) for p in predicted), f"{where} ran {argv}, not {predicted}"


# -- the tests ---------------------------------------------------------------------------------


def test_the_corpus_is_well_formed() -> None:
    assert len(set(FIXED_LINES)) == len(FIXED_LINES)
    assert all("\0" not in line for line in FIXED_LINES)  # argv cannot carry NUL


def test_attack_allow_prefix_matcher_disagrees_with_shell(lab: Lab) -> None:
    """Issue 7: each string runs more than `ls` in a real shell, so it must ask."""
    harmless = [
        name
        for name, line in ISSUE_CASES.items()
        if not any(outcome.escaped for _, outcome in run_both(lab, line))
    ]
    assert not harmless, f"no attack in either shell: {harmless}"
    skipping = [name for name, line in ISSUE_CASES.items() if matches_allow(line, ALLOW)]
    assert not skipping, f"these skip confirmation: {skipping}"


@pytest.mark.parametrize("line", FIXED_LINES, ids=repr)
def test_fixed_line(lab: Lab, line: str) -> None:
    if matches_allow(line, ALLOW):
        assert line not in DANGEROUS, f"{line!r} skips confirmation"
        assert_shells_agree(lab, line)
        return
    assert line not in BENIGN, f"{line!r} is plain but asks"
    outcomes = [outcome for _, outcome in run_both(lab, line)]
    if line in DANGEROUS:
        assert any(o.escaped for o in outcomes), f"{line!r} did nothing outside ALLOW"


# Generated lines: plain commands (mostly allowed ones) joined by operators, then, for about
# half of them, a sharp fragment dropped in at any character, quotes included.
ALLOWED_HEADS = ["ls", "cat", "wc -l", "git status", "grep x", "echo", "printf %s", "test -f"]
OTHER_HEADS = ["rm", "touch", "git push", "curl", "python3", "find .", "wc", "git"]
PLAIN_ARGS = [
    "-l", "-la", "a.txt", "b.txt", "'a b'", '"c d"', "*", "*.txt", "?", "~", "~/a.txt",
    "'$x'", '"x y"', "a=b", "'|'", "--", "x", "rm", "''", "2>&1", ">/dev/null", "</dev/null",
]  # fmt: skip
WRAPPERS = [
    "env ", "nohup ", "time ", "command ", "nice -n 5 ", "timeout 5 ", "xargs ", "xargs -0 ",
]  # fmt: skip
OPERATORS = [" && ", " || ", "; ", " | ", "\n", "&&", "|", ";"]
SHARP = [
    "$", "`", "\\", "&", ">", "<", "(", ")", "{", "}", ";", "|", "'", '"', "\n", "#", "!",
    "*", "~", "=", "&>", ">&", "$'", "2>&1", ">/dev/null", "$(", "${IFS}", "\t", "\\\n",
    "<<", ";;", "|&", "^", "[[", "]]", "$x", "`rm x`", "$(rm x)", " rm x", ";rm x", "&rm x",
    "\nrm x", "|rm x", "'rm x'", " -v", "FOO=1 ", "sudo ", "time -p ", "env -i ", "-I ls ",
]  # fmt: skip


@st.composite
def _command(draw: st.DrawFn, depth: int = 0) -> str:
    if depth == 0 and draw(st.integers(0, 9)) == 0:
        shell = draw(st.sampled_from(["sh", "bash", "dash"]))
        inner = draw(_plain_line(depth + 1))
        return f"{shell} -c " + (f"'{inner}'" if "'" not in inner else f'"{inner}"')
    wrapper = draw(st.sampled_from(WRAPPERS)) if draw(st.integers(0, 3)) == 0 else ""
    allowed = draw(st.integers(0, 9)) > 0
    head = draw(st.sampled_from(ALLOWED_HEADS if allowed else OTHER_HEADS))
    return wrapper + " ".join([head, *draw(st.lists(st.sampled_from(PLAIN_ARGS), max_size=3))])


@st.composite
def _plain_line(draw: st.DrawFn, depth: int = 0) -> str:
    line = draw(_command(depth))
    for _ in range(draw(st.integers(0, 2))):
        line += draw(st.sampled_from(OPERATORS)) + draw(_command(depth))
    return line


@st.composite
def generated_lines(draw: st.DrawFn) -> str:
    line = draw(_plain_line())
    for _ in range(draw(st.integers(1, 2)) if draw(st.booleans()) else 0):
        at = draw(st.integers(0, len(line)))
        line = line[:at] + draw(st.sampled_from(SHARP)) + line[at:]
    return line


def test_generated_lines(lab: Lab) -> None:
    tried: list[bool] = []

    @settings(
        max_examples=GENERATED_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(generated_lines())
    def check(line: str) -> None:
        tried.append(matches_allow(line, ALLOW))
        if tried[-1]:
            assert_shells_agree(lab, line)

    check()
    assert len(tried) >= GENERATED_EXAMPLES
    assert sum(tried) >= len(tried) // 4, f"only {sum(tried)} of {len(tried)} were allowed"
