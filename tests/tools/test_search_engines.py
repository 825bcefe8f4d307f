"""search_files with rg proposing files and without it: the same results on an adversarial
tree (secrets, symlinks, hard links, binaries, .git, node_modules, huge files, odd names,
case folds that differ between Python and rg, a file swapped for a symlink while rg runs).

rg here is the real one (the `fast` extra puts it in the venv; .ci/run installs it), run
through a wrapper named by METONA_RG that logs each run, so that every test also proves rg
was used where it should be and not where it should not."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.config.loading import parse_config
from cli.config.settings import LimitsConfig
from cli.errors import ToolError
from cli.fs.paths import resolve_path
from cli.safety.policy import Policy
from cli.tools import ripgrep
from cli.tools.base import ToolContext
from cli.tools.definitions import SEARCH_FILES

REAL_RG = ripgrep.find({"PATH": os.environ.get("PATH", "")})
pytestmark = pytest.mark.skipif(
    REAL_RG is None and os.environ.get("METONA_RG_REQUIRED") != "1",
    reason="no rg: install metona-agent[fast]",
)
MAX_BYTES = 64 * 1024
FILLER = 3 * ripgrep.MIN_FILES + ripgrep.BATCH_FILES  # so rg runs, in more than one batch


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The adversarial tree; `outside/` holds what must never show."""
    root = tmp_path / "work"
    outside = tmp_path / "outside"
    (root / "src" / "deep" / "er").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("needle in a secret outside\n")
    (outside / "dir").mkdir()
    (outside / "dir" / "f.txt").write_text("needle outside dir\n")
    files = {
        "src/plain.txt": "one needle here\nand NEEDLE there\nnothing\n",
        "src/deep/er/mixed.py": "x = 'NeEdLe'  # needle\n" * 3,
        "src/kelvin.txt": "\u212aiss and ki\u017fs and k\u0131ss and k\u0130ss\n",
        "src/umlaut.md": "grüße aus München, ÜBER alles\n",
        "src/punct.c": "a.b(c)[d]{e}*+?|^$ -e --regexp x\\y\n",
        "src/invalid.txt": b"bad \xff\xfe bytes then needle \xc3\x28 end\n",
        "src/bom16.txt": "\ufeffneedle in utf-16\n".encode("utf-16-le"),
        "src/late-nul.txt": b"needle early\n" + b"x" * 9000 + b"\x00 needle after a nul\n",
        "src/binary.bin": b"\x00\x01needle\x02",
        "src/huge.txt": b"needle\n" + b"y" * (MAX_BYTES + 10),
        "src/exact.txt": b"z" * (MAX_BYTES - 7) + b"needle\n",
        "src/-e": "needle in a file named -e\n",
        "src/--files": "needle in a file named --files\n",
        "src/new\nline.txt": "needle behind a line break in the name\n",
        "src/crlf.txt": "needle\r\nNEEDLE\r\n",
        "src/anchor.txt": "Needle_2026 and NEEDLE_2026\nneedle 2026\n",
        "src/arrow.c": "p = self->next; if (a<b && x>y) return;\n",
        "src/bom16le.txt": b"\xff\xfehello world\n",  # no NUL: text to us, UTF-16 to rg's sniffing
        "src/bom8.txt": "\ufeffstart here\n",
        "src/anchor-ü.txt": "grüße: \u212aiss_2026 and ki\u017fs_2026\n",
        ".env": "NEEDLE=secret\n",
        "id_rsa": "needle key\n",
        "config/credentials.json": '{"needle": 1}\n',
        "secrets/prod.txt": "needle in a secrets dir\n",
        ".git/config": "needle in git\n",
        "node_modules/pkg/index.js": "needle in a dependency\n",
        ".hidden/f.txt": "needle hidden\n",
        "src/victim.txt": "needle in the victim\n",
        "src/shared.txt": "needle shared\n",
    }
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    os.link(root / "src" / "shared.txt", root / "src" / "shared-link.txt")
    os.symlink(outside / "secret.txt", root / "src" / "link-to-secret.txt")
    os.symlink(outside / "dir", root / "src" / "link-to-dir")
    os.symlink("nowhere", root / "src" / "dangling.txt")
    os.mkfifo(root / "src" / "fifo.txt")
    undecodable = os.fsencode(str(root / "src")) + b"/name-\xff-needle.txt"
    with open(undecodable, "wb") as f:
        f.write(b"needle in an undecodable name\n")
    filler = root / "filler"
    for n in range(FILLER):
        sub = filler / f"d{n % 17}"
        sub.mkdir(parents=True, exist_ok=True)
        text = f"line {n}\n" + ("needle\n" if n % 401 == 0 else "hay\n") * 3
        (sub / f"f{n}.txt").write_text(text)
    return root


def rg_log(tmp_path: Path) -> Path:
    return tmp_path / "rg-runs.log"


def wrapper(tmp_path: Path, before: str = "") -> str:
    """An rg that logs its runs (and may first do `before`, a shell line), then is rg."""
    assert REAL_RG is not None
    script = tmp_path / "rg-wrapper"
    script.write_text(
        f"#!/bin/sh\necho run >> '{rg_log(tmp_path)}'\n{before}\nexec '{REAL_RG}' \"$@\"\n"
    )
    script.chmod(0o755)
    return str(script)


def search(root: Path, engine: str, rg: str, **args: Any) -> dict[str, Any]:
    home = str(root.parent)
    policy = Policy(parse_config("", "t.yaml").policy, str(root), home)
    limits = LimitsConfig(
        max_search_file_bytes=MAX_BYTES,
        max_search_results=args.pop("cap_results", 5000),
        max_search_files=args.pop("cap_files", 100_000),
        max_matches_per_file=args.pop("per_file", 20),
    )
    ctx = ToolContext(
        cwd=str(root),
        limits=limits,
        hides=policy.hides,
        hides_entry=policy.hides_entry,
        roots=policy.allowed_dirs,
        environ={ripgrep.ENGINE_VARIABLE: engine, ripgrep.RG_VARIABLE: rg},
    )
    arguments = {"path": str(root), "search_type": "content", "max_results": 5000, **args}
    paths = {"path": resolve_path(str(root), str(root), home)}
    return SEARCH_FILES.run(ctx, arguments, paths)


def both(root: Path, tmp_path: Path, **args: Any) -> tuple[dict[str, Any], int]:
    """The search in Python and with rg: asserts they agree, gives the result and rg's runs."""
    log = rg_log(tmp_path)
    log.unlink(missing_ok=True)
    rg = wrapper(tmp_path)
    python = search(root, "python", rg, **dict(args))
    assert not log.exists(), "METONA_SEARCH_ENGINE=python ran rg"
    proposed = search(root, "rg", rg, **dict(args))
    assert json.dumps(proposed, sort_keys=True) == json.dumps(python, sort_keys=True)
    runs = len(log.read_text().splitlines()) if log.exists() else 0
    return python, runs


def reported(result: dict[str, Any]) -> set[str]:
    return {item["path"] for item in result["results"]}


@pytest.mark.parametrize(
    "query,case",
    [
        ("needle", False),
        ("NeEdLe", False),
        ("NEEDLE", True),
        ("kiss", False),  # Kelvin sign, long s, dotless and dotted i
        ("KISS", False),
        ("-e", False),  # a query that looks like an option
        ("--regexp", True),
        ("a.b(c)[d]{e}*+?|^$", False),  # every regex metacharacter
        ("x\\y", False),
        ("self->next", False),  # `\>` would be a word boundary to rg
        ("a<b", False),
        ("x>y", True),
        ("hello world", False),  # in a file that starts like UTF-16
        ("\ufeffstart", True),  # a UTF-8 byte-order mark, which rg would strip
        ("needle_2026", False),  # an anchor of digits, found verbatim before any case folding
        ("kiss_2026", False),  # … in a file that is not ASCII, through a fold
    ],
)
def test_rg_and_python_report_the_same(tree: Path, tmp_path: Path, query: str, case: bool) -> None:
    result, runs = both(tree, tmp_path, query=query, case_sensitive=case)
    assert runs >= 2, "rg was not used (or in one batch only)"
    assert result["files_scanned"] > FILLER


def test_what_is_found_and_what_never_is(tree: Path, tmp_path: Path) -> None:
    result, _ = both(tree, tmp_path, query="needle")
    found = reported(result)
    for expected in (
        "src/plain.txt",
        "src/deep/er/mixed.py",
        "src/invalid.txt",
        "src/late-nul.txt",  # a NUL after the first 8 KB: still text to us
        "src/exact.txt",  # exactly max_search_file_bytes
        "src/-e",
        "src/--files",
        "src/new\nline.txt",
        "src/crlf.txt",
        os.fsdecode(b"src/name-\xff-needle.txt"),
    ):
        assert expected in found, expected
    for never in (
        "src/binary.bin",
        "src/bom16.txt",  # rg reads UTF-16 with a BOM; our text is UTF-8: binary to us
        "src/huge.txt",
        "src/shared.txt",  # hard links: not searched inside
        "src/shared-link.txt",
        "src/link-to-secret.txt",
        ".env",
        "id_rsa",
        "config/credentials.json",
        "secrets/prod.txt",
        ".git/config",
        "node_modules/pkg/index.js",
        ".hidden/f.txt",
    ):
        assert never not in found, never
    assert not any("outside" in item["text"] for r in result["results"] for item in r["matches"])
    assert result["hard_links_skipped"] == 2


def test_case_folds_python_matches_are_kept_with_rg(tree: Path, tmp_path: Path) -> None:
    result, _ = both(tree, tmp_path, query="kiss")
    (kelvin,) = [r for r in result["results"] if r["path"] == "src/kelvin.txt"]
    assert kelvin["matches"][0]["column"] == 1  # U+212A K matches k in Python's re
    anchored, _ = both(tree, tmp_path, query="kiss_2026")
    assert reported(anchored) == {"src/anchor-ü.txt"}
    assert [m["column"] for m in anchored["results"][0]["matches"]] == [8]


def test_a_query_rg_cannot_match_as_we_do_is_searched_in_python(tree: Path, tmp_path: Path) -> None:
    for query, case in (
        ("über", False),
        ("needle\nNEEDLE", False),
        ("\ufffd", True),
        ("\ud800x", True),  # a lone surrogate, which JSON can carry and no argv can
    ):
        result, runs = both(tree, tmp_path, query=query, case_sensitive=case)
        assert runs == 0, query
    result, _ = both(tree, tmp_path, query="über")
    assert reported(result) == {"src/umlaut.md"}  # ÜBER: Python's case folding


def test_stopping_early_and_caps_agree(tree: Path, tmp_path: Path) -> None:
    stopped, _ = both(tree, tmp_path, query="needle", max_results=3)
    assert stopped["truncated"] and stopped["total_matches"] == 3
    capped, _ = both(tree, tmp_path, query="hay", cap_files=900)
    assert capped["truncated"] and "max_search_files" in capped["note"]
    per_file, _ = both(tree, tmp_path, query="hay", per_file=2, cap_results=50, max_results=50)
    assert per_file["truncated"]
    named, _ = both(tree, tmp_path, query="needle", search_type="both")
    assert "src/name-\udcff-needle.txt" in reported(named)


def test_a_file_swapped_for_a_symlink_while_rg_runs_is_not_followed(
    tree: Path, tmp_path: Path
) -> None:
    """rg reads the victim (a match); before our code re-reads it, it has become a link to a
    secret outside: the re-read refuses the link, and nothing outside is reported."""
    victim = tree / "src" / "victim.txt"
    secret = tree.parent / "outside" / "secret.txt"
    swap = f"[ -L '{victim}' ] || {{ rm -f '{victim}'; ln -s '{secret}' '{victim}'; }}"
    rg = wrapper(tmp_path, before=swap)
    result = search(tree, "rg", rg, query="needle")
    assert victim.is_symlink()
    assert "src/victim.txt" not in reported(result)
    assert "secret outside" not in json.dumps(result)
    # What is found is what Python finds in the tree as it is now (which counts one file
    # fewer: the walk saw the victim as a file, Python now sees a link).
    assert result["results"] == search(tree, "python", rg, query="needle")["results"]


def test_a_file_swapped_for_a_fifo_while_rg_runs_cannot_hang_the_search(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rg opens the files it is given by name, blocking: one swapped for a FIFO after the
    walk would block it for ever. It gets ripgrep.DEADLINE in all (here 2 s), then it is
    killed and Python, which opens without blocking, searches every file."""
    monkeypatch.setattr(ripgrep, "DEADLINE", 2.0)
    victim = tree / "src" / "victim.txt"
    rg = wrapper(tmp_path, before=f"rm -f '{victim}'; mkfifo '{victim}'")
    result = search(tree, "rg", rg, query="needle")
    assert stat.S_ISFIFO(victim.lstat().st_mode)
    assert "src/victim.txt" not in reported(result)
    assert result["results"] == search(tree, "python", rg, query="needle")["results"]


def test_rg_runs_in_the_directory_walked_even_if_its_path_is_swapped(
    tree: Path, tmp_path: Path
) -> None:
    """The search's directory is renamed and another put at its path before rg starts: rg
    still reads the directory the walk holds open (by its fd), so what is found is what that
    directory holds, and nothing of the decoy."""
    moved = tmp_path / "moved"
    decoy = (
        f"mv '{tree}' '{moved}' && mkdir -p '{tree}/src' && echo needle > '{tree}/src/decoy.txt'"
    )
    rg = wrapper(tmp_path, before=f"[ -d '{moved}' ] || {{ {decoy}; }}")
    result = search(tree, "rg", rg, query="needle")
    assert "src/plain.txt" in reported(result)
    assert "src/decoy.txt" not in reported(result)


def test_rg_failing_falls_back_to_python(tree: Path, tmp_path: Path) -> None:
    broken = tmp_path / "rg-broken"
    broken.write_text("#!/bin/sh\nexit 2\n")
    broken.chmod(0o755)
    result = search(tree, "rg", str(broken), query="needle")
    assert json.dumps(result, sort_keys=True) == json.dumps(
        search(tree, "python", str(broken), query="needle"), sort_keys=True
    )
    assert "src/plain.txt" in reported(result)


def test_the_engine_setting_is_checked(tree: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="METONA_SEARCH_ENGINE='grep': expected one of"):
        search(tree, "grep", wrapper(tmp_path), query="needle")
    with pytest.raises(ToolError, match="no rg was found"):
        search(tree, "rg", str(tmp_path / "no-such-rg"), query="needle")
    # auto without an rg: Python, no error
    assert search(tree, "auto", str(tmp_path / "no-such-rg"), query="needle")["success"]


def test_the_fast_extra_puts_rg_beside_this_python() -> None:
    if os.environ.get("METONA_RG_REQUIRED") != "1":
        pytest.skip("only where .ci/run installs the fast extra")
    own = Path(sys.executable).parent / "rg"
    assert own.exists() and own.stat().st_mode & stat.S_IXUSR
    assert ripgrep.find({"PATH": ""}) == str(own)
    assert shutil.which("rg", path=str(own.parent)) == str(own)
