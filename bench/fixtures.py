"""The trees and stores the benchmark runs on: generated from a seed, cached between runs.

A tree at scale 1 is "source-like": ~20,000 files, ~200 MB, in 40 top-level packages of
nested directories (up to 8 deep) of .py/.js/.ts/.c/.md/.json/.txt files made of code-like
lines and prose, some binaries (NUL bytes), a `.git` with objects, a `node_modules` of many
small files, a few hidden files and some secrets (`.env`, `id_rsa`, `credentials.json`,
`secrets.yaml`, `.aws/`). Every file is under 480 KB (search_files skips files over 500 KB).
A tree at scale 2 or 4 is the same generator with more packages: its first packages are
byte for byte those of the smaller trees (each package has its own seed).

Everything lives under `$XDG_CACHE_HOME/metona-agent-bench/<key>/` (default `~/.cache`),
where the key hashes GENERATOR_VERSION and the shape constants: bump GENERATOR_VERSION when
you change what is written, and the next run generates afresh (and removes the old ones).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GENERATOR_VERSION = 2
SEED = 20_260_101

PACKAGES_PER_SCALE = 40  # top-level subtrees of a scale-1 tree
FILES_PER_PACKAGE = 420
DIRS_PER_PACKAGE = 48
MAX_DEPTH = 8  # directory levels below the tree's root
NODE_MODULES_FILES_PER_SCALE = 2_400
GIT_OBJECTS_PER_SCALE = 800
MAX_FILE_BYTES = 480 * 1024
# Log-normal file sizes: median ~6.3 KB, mean ~11.6 KB (about 200 MB for 16,800 files).
SIZE_MU, SIZE_SIGMA = 8.75, 1.1

# The text content search looks for: in one file of every NEEDLE_EVERY packages (so the
# whole tree is read to find a handful), written in mixed case (the search ignores case).
# Also planted where neither we nor grep/find/rg look (a binary, node_modules, .git, a
# hidden file): a search that counts those has not pruned the same way.
NEEDLE = "quokka_zephyr_7731"
NEEDLE_EVERY = 8

STORE_BACKUPS = 15_000
STORE_BACKUP_BYTES = 1024

# (extension, weight): the mix of a package's files.
KINDS: tuple[tuple[str, int], ...] = (
    (".py", 24),
    (".js", 14),
    (".ts", 14),
    (".c", 11),
    (".md", 9),
    (".json", 8),
    (".txt", 12),
    (".bin", 3),  # binaries: random bytes with NULs
)

# Plain words only: a name like "secret" or "token" would make the policy hide a directory.
_WORD_LIST = (
    "able about above access account action active adapter address after agent align "
    "alpha amount anchor apply archive array async atlas audio author avatar backend "
    "badge balance banner batch beacon before binary block border bounds branch bridge "
    "broker buffer bundle button cache calendar canvas caption carbon cargo catalog "
    "channel chart check circle client cluster column comment commit compact compile "
    "config connect console context control convert copper counter course cursor custom "
    "dashboard data debug decimal default delta deploy detail device dialog digest direct "
    "display docker domain double draft driver dynamic editor element empty engine entry "
    "event export factor feature field filter finance format frame gallery gateway global "
    "graph green handler harbor header helper history hover image import index input "
    "inside install invoice item journal kernel label layout ledger level library limit "
    "linear listen local logger lookup manager market matrix medium member memory merge "
    "method metric mirror mobile model module monitor native network number object offset "
    "option order output packet panel parser patch pending pixel planet plugin pointer "
    "portal preview primary profile project proxy public query queue random range reader "
    "record region render report request resolve result review router runtime sample "
    "scalar schema screen search select sender series server session shadow signal simple "
    "socket source spring stack static status stream string studio style submit summary "
    "switch symbol system table target task template tensor theme ticket timer toggle "
    "topic tracker travel update upload user value vector version viewer volume widget "
    "window worker writer yellow zone"
)
WORDS = tuple(_WORD_LIST.split())


# -- where things are ----------------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "metona-agent-bench"


def cache_key() -> str:
    shape = (
        GENERATOR_VERSION,
        SEED,
        PACKAGES_PER_SCALE,
        FILES_PER_PACKAGE,
        DIRS_PER_PACKAGE,
        MAX_DEPTH,
        NODE_MODULES_FILES_PER_SCALE,
        GIT_OBJECTS_PER_SCALE,
        MAX_FILE_BYTES,
        SIZE_MU,
        SIZE_SIGMA,
        NEEDLE,
        NEEDLE_EVERY,
        STORE_BACKUPS,
        STORE_BACKUP_BYTES,
        KINDS,
        WORDS,
    )
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:12]


def cache_dir() -> Path:
    return cache_root() / f"v{GENERATOR_VERSION}-{cache_key()}"


@dataclass(frozen=True)
class Tree:
    root: Path
    scale: float
    files: int  # every regular file, pruned directories included
    bytes: int
    needle_files: int  # files a search that prunes as ours does finds the needle in


def tree(scale: float, say: Callable[[str], None] = print) -> Tree:
    """The tree at `scale`, generated now unless the cache has it."""
    where = _fresh_cache()
    name = f"tree-{scale:g}x"
    manifest = where / f"{name}.json"
    if not manifest.exists():
        say(f"  generating {name} in {where} …")
        building = where / f"{name}.partial"
        for stale in (building, where / name):  # a run that died half-way
            shutil.rmtree(stale, ignore_errors=True)
        counts = _Writer(building).tree(scale)
        os.replace(building, where / name)
        manifest.write_text(json.dumps(counts))  # last: the tree is whole
    counts = json.loads(manifest.read_text())
    return Tree(where / name, scale, counts["files"], counts["bytes"], counts["needle_files"])


def _fresh_cache() -> Path:
    """This version's cache dir; other versions' are removed (they are hundreds of MB)."""
    where = cache_dir()
    if not where.exists():
        root = cache_root()
        if root.exists():
            for old in root.iterdir():
                if old.is_dir() and old.name.startswith("v"):
                    shutil.rmtree(old, ignore_errors=True)
        where.mkdir(parents=True)
    return where


# -- text ----------------------------------------------------------------------------------


class _Text:
    """Pools of lines for each kind of file, from which files are drawn at C speed."""

    POOL = 2048

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.pools: dict[str, list[str]] = {
            ".py": [self._py() for _ in range(self.POOL)],
            ".js": [self._js() for _ in range(self.POOL)],
            ".ts": [self._ts() for _ in range(self.POOL)],
            ".c": [self._c() for _ in range(self.POOL)],
            ".md": [self._md() for _ in range(self.POOL)],
            ".json": [self._json() for _ in range(self.POOL)],
            ".txt": [self.prose(6, 22) for _ in range(self.POOL)],
        }
        self.mean_len = {k: sum(map(len, v)) / len(v) + 1 for k, v in self.pools.items()}

    def using(self, rng: random.Random) -> _Text:
        """The same pools, drawn from with `rng`."""
        other = copy.copy(self)
        other.rng = rng
        return other

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def ident(self) -> str:
        return "_".join(self.word() for _ in range(self.rng.randint(1, 3)))

    def camel(self) -> str:
        return "".join(self.word().capitalize() for _ in range(self.rng.randint(1, 3)))

    def prose(self, low: int, high: int) -> str:
        text = " ".join(self.word() for _ in range(self.rng.randint(low, high)))
        return text.capitalize() + self.rng.choice(".,;:") if text else text

    def _indent(self) -> str:
        return "    " * self.rng.choice((0, 1, 1, 2, 2, 2, 3))

    def _py(self) -> str:
        r, i = self.rng, self.ident
        choices = (
            lambda: f"def {i()}({i()}, {i()}={r.randint(0, 99)}):",
            lambda: f"return {i()}.{i()}({i()}, {r.randint(0, 999)})",
            lambda: f"{i()} = {i()}({i()}, {i()}[{r.randint(0, 9)}])",
            lambda: f"# {self.prose(4, 14)}",
            lambda: f"from {i()}.{i()} import {i()}, {self.camel()}",
            lambda: f"class {self.camel()}({self.camel()}):",
            lambda: f"if {i()} > {r.randint(0, 99)} and not {i()}:",
            lambda: f'"""{self.prose(5, 16)}"""',
            lambda: f"self.{i()} = {{'{self.word()}': {i()}, '{self.word()}': None}}",
            lambda: "",
        )
        return self._indent() + r.choice(choices)()

    def _js(self) -> str:
        r, i = self.rng, self.ident
        choices = (
            lambda: f"const {i()} = require('./{self.word()}/{self.word()}');",
            lambda: f"function {i()}({i()}, {i()}) {{",
            lambda: f"return {i()}.{i()}({i()}, {r.randint(0, 999)});",
            lambda: f"// {self.prose(4, 14)}",
            lambda: f"let {i()} = {{ {self.word()}: {i()}, {self.word()}: [{r.randint(0, 9)}] }};",
            lambda: f"if ({i()} === '{self.word()}') {{ {i()}(); }}",
            lambda: "}",
            lambda: "",
        )
        return self._indent() + r.choice(choices)()

    def _ts(self) -> str:
        r, i = self.rng, self.ident
        choices = (
            lambda: f"export function {i()}({i()}: {self.camel()}): {self.camel()} {{",
            lambda: f"const {i()}: {self.camel()}[] = await {i()}.{i()}({r.randint(0, 99)});",
            lambda: f"import {{ {self.camel()}, {self.camel()} }} from '../{self.word()}';",
            lambda: f"interface {self.camel()} {{ {self.word()}: string; {self.word()}: number }}",
            lambda: f"// {self.prose(4, 14)}",
            lambda: f"return {{ ...{i()}, {self.word()}: {i()} ?? {r.randint(0, 9)} }};",
            lambda: "}",
            lambda: "",
        )
        return self._indent() + r.choice(choices)()

    def _c(self) -> str:
        r, i = self.rng, self.ident
        choices = (
            lambda: f"#include <{self.word()}/{self.word()}.h>",
            lambda: f"static int {i()}(struct {i()} *{i()}, size_t {i()}) {{",
            lambda: f"{i()}->{i()} = {i()}({i()}, {r.randint(0, 4096)});",
            lambda: f"/* {self.prose(4, 14)} */",
            lambda: f"for (size_t {self.word()} = 0; {self.word()} < {i()}; ++{self.word()}) {{",
            lambda: f"if ({i()} == NULL) return -{r.randint(1, 40)};",
            lambda: "}",
            lambda: "",
        )
        return self._indent() + r.choice(choices)()

    def _md(self) -> str:
        r = self.rng
        choices = (
            lambda: f"## {self.prose(2, 5).rstrip('.,;:')}",
            lambda: self.prose(12, 40),
            lambda: self.prose(12, 40),
            lambda: f"- {self.prose(3, 12)}",
            lambda: f"`{self.ident()}` {self.prose(4, 12)}",
            lambda: "",
        )
        return r.choice(choices)()

    def _json(self) -> str:
        r = self.rng
        value = r.choice(
            (
                lambda: f'"{self.prose(1, 6)}"',
                lambda: str(r.randint(0, 100_000)),
                lambda: r.choice(("true", "false", "null")),
                lambda: json.dumps([self.word() for _ in range(r.randint(1, 5))]),
            )
        )()
        return f'  "{self.ident()}": {value},'

    def file(self, kind: str, size: int) -> bytes:
        """About `size` bytes of lines of `kind`."""
        count = max(1, round(size / self.mean_len[kind]))
        body = "\n".join(self.rng.choices(self.pools[kind], k=count)) + "\n"
        if kind == ".json":
            body = "{\n" + body + '  "end": true\n}\n'
        data = body.encode()
        if len(data) > MAX_FILE_BYTES:  # the lines drawn may add up to a little more
            data = data[: data.rfind(b"\n", 0, MAX_FILE_BYTES) + 1]
        return data


# -- trees ---------------------------------------------------------------------------------


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = 0
        self.bytes = 0
        self.needles = 0

    def write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files += 1
        self.bytes += len(data)

    def tree(self, scale: float) -> dict[str, int]:
        text = _Text(random.Random(f"{SEED}:text"))
        for number in range(max(1, round(PACKAGES_PER_SCALE * scale))):
            self.package(text, number)
        rng = random.Random(f"{SEED}:root")
        self.node_modules(rng, max(8, round(NODE_MODULES_FILES_PER_SCALE * scale)))
        self.git(rng, max(8, round(GIT_OBJECTS_PER_SCALE * scale)))
        self.extras(text)
        return {"files": self.files, "bytes": self.bytes, "needle_files": self.needles}

    def package(self, shared: _Text, number: int) -> None:
        rng = random.Random(f"{SEED}:package:{number}")
        text = shared.using(rng)
        top = self.root / f"{rng.choice(WORDS)}-{number:03d}"
        dirs: list[tuple[Path, int]] = [(top, 1)]
        for _ in range(DIRS_PER_PACKAGE - 1):
            parent, depth = rng.choice([d for d in dirs if d[1] < MAX_DEPTH])
            dirs.append((parent / f"{rng.choice(WORDS)}_{len(dirs)}", depth + 1))
        kinds, weights = zip(*KINDS, strict=True)
        needle_due = number % NEEDLE_EVERY == 0
        for index in range(FILES_PER_PACKAGE):
            directory = rng.choice(dirs)[0]
            kind = rng.choices(kinds, weights)[0]
            size = min(MAX_FILE_BYTES, max(40, int(rng.lognormvariate(SIZE_MU, SIZE_SIGMA))))
            name = directory / f"{text.ident()}_{index}{kind}"
            if kind == ".bin":
                self.write(name, _binary(rng, size))
                continue
            data = text.file(kind, size)
            if needle_due and kind in (".py", ".txt", ".md"):
                data = _plant(rng, data)
                needle_due = False
                self.needles += 1
            self.write(name, data)
        if number % 5 == 0:  # secrets inside packages, where a walk meets them
            self.write(top / "credentials.json", b'{"client_id": "x", "client_key": "y"}\n')
            self.write(top / ".env", b"API_TOKEN=abc123\n")

    def node_modules(self, rng: random.Random, files: int) -> None:
        text = _Text(rng)
        modules = self.root / "node_modules"
        made = 0
        while made < files:
            package = modules / f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{made}"
            self.write(package / "package.json", json.dumps({"name": package.name}).encode())
            made += 1
            for index in range(min(rng.randint(3, 11), files - made)):
                where = package / ("lib" if index % 2 else "") / f"{text.ident()}_{index}.js"
                self.write(where, text.file(".js", rng.randint(200, 3000)))
                made += 1
        self.write(modules / "left-pad" / "index.js", _plant(rng, text.file(".js", 400)))

    def git(self, rng: random.Random, objects: int) -> None:
        git = self.root / ".git"
        self.write(git / "HEAD", b"ref: refs/heads/main\n")
        self.write(git / "config", b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        self.write(git / "refs" / "heads" / "main", rng.randbytes(20).hex().encode() + b"\n")
        for _ in range(objects - 3):
            name = rng.randbytes(20).hex()
            self.write(git / "objects" / name[:2] / name[2:], _binary(rng, rng.randint(80, 8000)))
        self.write(git / "COMMIT_EDITMSG", _plant(rng, b"planted in .git\n"))

    def extras(self, text: _Text) -> None:
        rng = text.rng
        root = self.root
        self.write(root / "README.md", text.file(".md", 6000))
        self.write(root / ".gitignore", b"node_modules/\n*.o\n__pycache__/\n")
        self.write(root / ".editorconfig", b"root = true\n[*]\nindent_style = space\n")
        self.write(root / ".eslintrc.json", _plant(rng, b'{"extends": "eslint:recommended"}\n'))
        self.write(root / ".vscode" / "settings.json", b'{"editor.tabSize": 4}\n')
        self.write(root / ".env", b"DATABASE_URL=postgres://u:p@localhost/db\n")
        self.write(root / "id_rsa", b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n")
        self.write(root / "credentials.json", b'{"type": "service_account"}\n')
        self.write(root / "deploy" / "secrets.yaml", b"password: hunter2\n")
        self.write(root / ".aws" / "credentials", b"[default]\naws_access_key_id = AKIA\n")
        self.write(root / ".aws" / "config", b"[default]\nregion = eu-west-1\n")
        self.write(root / "assets" / "logo.bin", _plant(rng, _binary(rng, 4000)))


def _binary(rng: random.Random, size: int) -> bytes:
    """Random bytes with a NUL near the start, as grep -I and our own check look there."""
    data = bytearray(rng.randbytes(size))
    data[min(7, size - 1)] = 0
    return bytes(data)


def _plant(rng: random.Random, data: bytes) -> bytes:
    """`data` with the needle, in mixed case, inside one of its lines."""
    lines = data.split(b"\n")
    at = rng.randrange(len(lines))
    mixed = "".join(c.upper() if n % 3 == 0 else c for n, c in enumerate(NEEDLE))
    lines[at] += f" {mixed} ".encode()
    return b"\n".join(lines)


# -- small fixtures ------------------------------------------------------------------------


def text_files(directory: Path, count: int, size: int, seed: str) -> list[str]:
    """`count` text files of about `size` bytes of prose and code in `directory`."""
    text = _Text(random.Random(f"{SEED}:{seed}"))
    names = []
    for number in range(count):
        name = f"file_{number:02d}.py"
        (directory / name).write_bytes(text.file(".py", size))
        names.append(name)
    return names


def text_of_size(size: int, seed: str) -> str:
    """Exactly `size` characters of code-like ASCII text."""
    text = _Text(random.Random(f"{SEED}:{seed}"))
    data = text.file(".py", size + 256).decode()
    while len(data) < size:
        data += data
    return data[:size]


def change_store(say: Callable[[str], None] = print) -> Path:
    """A change store (cli/journal/changes.py) holding STORE_BACKUPS backups of 1 KB: a journal of
    that many overwrites, each with its blob, as weeks of use leave it. Copy it before use:
    writes append to it."""
    where = _fresh_cache() / "store"
    if (where / "journal.jsonl").exists():
        return where
    say(f"  generating a change store of {STORE_BACKUPS} backups in {where} …")
    building = where.with_name("store.partial")
    for stale in (building, where):
        shutil.rmtree(stale, ignore_errors=True)
    _build_store(building)
    os.replace(building, where)
    return where


def _build_store(root: Path) -> None:
    """All but the last backup written as the store writes them (a blob, a journal line of
    the same fields), not through the store: building the fixture must not cost what it
    is there to measure, were the store to slow down with its size. The last goes through
    the store's own API (keep + record), which then reads all of them back."""
    from cli.journal.changes import ChangeStore
    from cli.journal.records import Change, sha256

    rng = random.Random(f"{SEED}:store")
    blobs = root / "blobs"
    blobs.mkdir(parents=True, mode=0o700)
    session = "bench-0-00000000"
    start = 1_700_000_000
    with (root / "journal.jsonl").open("w", encoding="utf-8") as journal:
        for number in range(1, STORE_BACKUPS):
            name = f"{(start + number) * 1000}-{rng.randbytes(4).hex()}"
            content = rng.randbytes(STORE_BACKUP_BYTES)
            (blobs / name).write_bytes(content)
            os.chmod(blobs / name, 0o600)
            change = Change(
                "write_file",
                "overwrite",
                path=f"/home/user/project/src/{rng.choice(WORDS)}_{number % 700}.py",
                size=STORE_BACKUP_BYTES,
                mode=0o644,
                backup=f"blobs/{name}",
                after=sha256(content[::-1]),
                id=number,
                time=f"2025-06-{1 + number % 28:02d}T12:00:00+00:00",
                session=session,
                turn=f"turn-{start + number // 3}-0000{number % 10}",
                kept=STORE_BACKUP_BYTES,
            )
            data = dataclasses.asdict(change)
            data.pop("evicted")
            journal.write(json.dumps(data, ensure_ascii=True) + "\n")
    store = ChangeStore(root, session=session)
    backup = store.keep(rng.randbytes(STORE_BACKUP_BYTES))
    store.record(
        Change("write_file", "overwrite", path="/home/user/project/last.py", backup=backup)
    )
    held = len(store.history())
    if held != STORE_BACKUPS:
        raise RuntimeError(f"the change store reads {held} changes back, not {STORE_BACKUPS}")


def copy_store(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True)


def describe(tree: Tree) -> str:
    return f"{tree.files:,} files, {tree.bytes / 1e6:,.0f} MB"


def scales(quick: bool) -> tuple[float, ...]:
    """The trees of the scaling chart; the first is the one every other figure uses."""
    return (0.1, 0.2, 0.4) if quick else (1.0, 2.0, 4.0)
