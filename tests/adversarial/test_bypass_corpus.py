"""Commands that get past the seed's substring deny list, run for real through run_command in
each sandbox this machine has: afterwards nothing outside the writable dir has changed and no
connection reached the host.

The same corpus run with the sandbox off does damage (last test): these are working attacks,
not strings that merely look dangerous. Security notes, "Commands": of 21 such strings tried
against the seed's filter, 19 passed it, and unsandboxed they really delete and connect.

Placeholders: {victim} a tree outside the writable dir, {vfile} a file in it, {vscript} an
executable in it, {home} the command's $HOME, {ws} the writable dir, {port}/{udp} listeners on
the host's 127.0.0.1, {py} a Python, {b64} base64 of `rm -rf {victim}`.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.safety.sandbox.launch import KINDS
from tests.safety.test_sandbox import (
    Listener,
    Scratch,
    require,
    run,
    scratch_tree,
    snapshot,
    visible_python,
)

BYPASS_CORPUS: list[tuple[str, str]] = [
    # rm, spelled so that `rm -rf /`-style patterns miss it
    ("split-flags", "rm -r -f {victim}"),
    ("long-flags", "rm --recursive --force {victim}"),
    ("empty-quotes", "r''m -rf {victim}"),
    ("backslash", "r\\m -rf {victim}"),
    ("dollar-subst", "$(echo rm) -rf {victim}"),
    ("backticks", "`printf rm` -rf {victim}"),
    ("variable", "X=rm; $X -rf {victim}"),
    ("brace-expansion", "bash -c '{{rm,-rf,{victim}}}'"),
    ("glob-path", "/?i?/r[m] -r -f {victim}"),
    ("relative-glob", "cd {victim} && rm -rf ./* ./.??*"),
    ("find-delete", "find {victim} -delete"),
    ("xargs", "echo {victim} | xargs rm -r -f"),
    ("python-rmtree", "{py} -c 'import shutil; shutil.rmtree(\"{victim}\")'"),
    ("perl-remove-tree", "perl -MFile::Path=remove_tree -e 'remove_tree(\"{victim}\")'"),
    ("base64-pipe-sh", "echo {b64} | base64 -d | sh"),
    ("base64-sh-c", 'sh -c "$(echo {b64} | base64 -d)"'),
    ("process-substitution", "bash -c 'sh <(echo rm -rf {victim})'"),
    # overwriting, truncating, replacing single files
    ("redirect", "echo pwned > {vfile}"),
    ("dd-of-first", "dd of={vfile} if=/dev/zero bs=4 count=1 conv=notrunc"),
    ("truncate", "truncate -s 0 {vfile}"),
    ("cp-over", "cp /dev/null {vfile}"),
    ("tee", "tee {vfile} </dev/null"),
    ("sed-in-place", "sed -i d {vfile}"),
    ("mv-out", "mv {vfile} {ws}/stolen.txt"),
    ("mv-dir-in", "mv {victim}/sub {ws}/sub"),
    ("ln-sf-over", "ln -sf /dev/null {vfile}"),
    ("hardlink-then-write", "ln {vfile} {ws}/hard && echo pwned > {ws}/hard"),
    ("symlink-then-write", "ln -s {vfile} {ws}/soft && echo pwned > {ws}/soft"),
    ("chmod-000", "chmod 000 {vfile}"),
    ("chmod-symbolic", "chmod u=,g=,o= {vscript}"),
    ("python-chmod", "{py} -c 'import os; os.chmod(\"{vfile}\", 0)'"),
    ("touch-new", "touch {victim}/planted"),
    ("mkdir-new", "mkdir {victim}/planted-dir"),
    ("git-init-outside", "git init -q {victim}/repo"),
    # the user's start-up files: code that runs at their next login
    ("bashrc-append", "printf 'evil\\n' >> {home}/.bashrc"),
    ("python-profile", '{py} -c \'open("{home}/.profile", "w").write("evil")\''),
    # connections out
    ("dev-tcp", "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'"),
    ("dev-tcp-obfuscated", "bash -c 'exec 3<>/dev/$(echo tcp)/127.0.0.1/{port}; echo hi >&3'"),
    ("dev-udp", "bash -c 'echo hi > /dev/$(printf udp)/127.0.0.1/{udp}'"),
    (
        "python-socket",
        "{py} -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3)'",
    ),
    (
        "python-udp",
        '{py} -c \'import socket; socket.socket(2, 2).sendto(b"x", ("127.0.0.1", {udp}))\'',
    ),
    ("perl-socket", "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(\"127.0.0.1:{port}\")'"),
    ("curl", "curl -s -m 3 http://127.0.0.1:{port}/"),
    ("wget", "wget -q -T 3 -t 1 -O- http://127.0.0.1:{port}/"),
]

# The programs an entry needs beyond sh and coreutils, so a machine without them skips it
# rather than passing because the attack never ran.
_NEEDS = ("bash", "perl", "git", "curl", "wget")


def fill(template: str, s: Scratch, server: Listener, python: str) -> str:
    victim = s.outside
    return template.format(
        victim=victim,
        vfile=victim / "victim.txt",
        vscript=victim / "tool.sh",
        home=s.home,
        ws=s.ws,
        port=server.port,
        udp=server.udp_port,
        py=python,
        b64=base64.b64encode(f"rm -rf {victim}".encode()).decode(),
    )


def needs(template: str) -> list[str]:
    words = template.replace("'", " ").replace("(", " ").split()
    return [p for p in _NEEDS if p in words and not shutil.which(p)]


@pytest.fixture
def victims(tmp_path: Path) -> Iterator[Scratch]:
    with scratch_tree(tmp_path) as s:
        script = s.outside / "tool.sh"
        script.write_text("#!/bin/sh\necho tool\n")
        script.chmod(0o755)
        (s.outside / ".hidden").write_text("dot\n")
        (s.home / ".profile").write_text("# profile\n")
        yield s


@pytest.fixture
def server() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.close()


@pytest.fixture
def py(victims: Scratch) -> str:
    return visible_python(victims)


def test_the_corpus_is_big_enough() -> None:
    assert len(BYPASS_CORPUS) >= 25
    assert len({name for name, _ in BYPASS_CORPUS}) == len(BYPASS_CORPUS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("name", "template"), BYPASS_CORPUS, ids=[n for n, _ in BYPASS_CORPUS])
def test_the_sandbox_holds(
    kind: str, name: str, template: str, victims: Scratch, server: Listener, py: str
) -> None:
    require(kind)
    missing = needs(template)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    before = snapshot(victims.outside), snapshot(victims.home)
    result = run(kind, victims, fill(template, victims, server, py), timeout_ms=15_000)
    assert result["sandbox"] == kind
    assert "timedOut" not in result, result
    assert (snapshot(victims.outside), snapshot(victims.home)) == before, result
    server.close()  # waits a moment for stragglers
    assert server.hits == 0, result


@pytest.mark.parametrize(("name", "template"), BYPASS_CORPUS, ids=[n for n, _ in BYPASS_CORPUS])
def test_without_the_sandbox_each_one_does_damage(
    name: str, template: str, victims: Scratch, server: Listener, py: str
) -> None:
    missing = needs(template)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    before = snapshot(victims.outside), snapshot(victims.home)
    run("off", victims, fill(template, victims, server, py), timeout_ms=15_000)
    server.close()
    changed = (snapshot(victims.outside), snapshot(victims.home)) != before
    assert changed or server.hits > 0, f"{name} did nothing even unsandboxed"
