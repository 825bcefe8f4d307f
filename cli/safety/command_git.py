"""Which words of a git command an allow prefix must name (pure; see cli/safety/argv.py).

git [GLOBAL…] SUBCOMMAND [ARGS…]:

- global options: only a short list passes (`--no-pager`, `-P`, `--no-optional-locks`,
  the pathspec switches, `--no-replace-objects`, `--version`). `-c`, `-C`, `--git-dir`,
  `--work-tree`, `--exec-path`, `--config-env`, `-p` (a pager) and the rest choose what
  git runs or which repository it trusts, so the prefix must name them.
- reads (`status`, `diff`, `log`, `show`, `blame`, `grep`, `ls-files`, the list forms of
  `branch`, `tag`, `remote`, `stash` and `config`…) run under the prefix `git`, each with
  its own list of harmless options. `--output`, `--ext-diff`, `--textconv`, `-O` (grep's
  pager), `--show-signature` (gpg) and every option not listed ask.
- changes (`add`, `commit`, `checkout`, `switch`, `restore`, `reset`, `fetch`, `pull`,
  `push`, `merge`, `rebase`, `stash`, `cherry-pick`, `revert`, `mv`, `rm`, creating a branch
  or tag) must be named by the prefix (`git commit`, not `git`); then their harmless
  options pass, and editors, `-x/--exec`, `--upload-pack`, `--receive-pack`, merge
  strategies (`git-merge-NAME` from PATH), gpg, interactive modes and URLs or paths as the
  remote ask.
- any other subcommand (`bundle`, `archive`, `format-patch`, `config` writes, `difftool`,
  `mergetool`, `bisect`, `submodule`, `clone`, an alias…) runs only as exactly the words of
  a prefix: its options are not read here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cli.safety.argv import Options, Reader, names, one_of, read_options

_GLOBAL = names(
    "--no-pager -P --no-optional-locks --literal-pathspecs --glob-pathspecs "
    "--noglob-pathspecs --icase-pathspecs --no-replace-objects --version"
)

DIFF = Options(
    flags="pusRabwWDz0123m",
    valued="USGI",
    attached="MCBlX",
    long_flags=names(
        "patch no-patch raw patch-with-raw patch-with-stat indent-heuristic "
        "no-indent-heuristic minimal patience histogram compact-summary numstat shortstat "
        "cumulative dirstat-by-file summary name-only name-status no-color no-color-moved "
        "no-color-moved-ws no-renames rename-empty no-rename-empty check full-index binary "
        "find-copies-harder irreversible-delete pickaxe-all pickaxe-regex no-relative text "
        "ignore-cr-at-eol ignore-space-at-eol ignore-space-change ignore-all-space "
        "ignore-blank-lines function-context exit-code quiet no-ext-diff no-textconv "
        "no-prefix default-prefix ita-invisible-in-index ita-visible-in-index cached staged "
        "merge-base no-index base ours theirs cc combined-all-paths no-diff-merges"
    ),
    long_valued=names(
        "unified anchored diff-algorithm word-diff-regex color-moved-ws ws-error-highlight "
        "diff-filter find-object inter-hunk-context src-prefix dst-prefix line-prefix "
        "ignore-matching-lines stat-width stat-name-width stat-count stat-graph-width "
        "diff-merges"
    ),
    long_attached=names(
        "stat dirstat submodule color color-moved word-diff color-words abbrev "
        "break-rewrites find-renames find-copies relative ignore-submodules"
    ),
)

# The revision walk and commit formatting options of log, show, shortlog, rev-list.
REVISIONS = Options(
    flags="iEFPgcmrt",
    valued="nL",
    numeric=True,
    long_flags=names(
        "all-match invert-grep regexp-ignore-case basic-regexp extended-regexp "
        "fixed-strings perl-regexp remove-empty merges no-merges no-min-parents "
        "no-max-parents first-parent exclude-first-parent-only not all reflog "
        "alternate-refs single-worktree ignore-missing cherry-mark cherry-pick left-only "
        "right-only cherry walk-reflogs merge boundary simplify-by-decoration show-pulls "
        "full-history dense sparse simplify-merges date-order author-date-order topo-order "
        "reverse do-walk abbrev-commit no-abbrev-commit oneline no-expand-tabs no-notes "
        "relative-date parents children left-right graph follow no-decorate "
        "clear-decorations source use-mailmap mailmap no-mailmap no-use-mailmap full-diff "
        "log-size count"
    ),
    long_valued=names(
        "max-count skip since after until before since-as-filter author committer grep "
        "grep-reflog min-parents max-parents glob exclude format date encoding "
        "decorate-refs decorate-refs-exclude"
    ),
    long_attached=names(
        "branches tags remotes ancestry-path pretty expand-tabs notes show-linear-break "
        "no-walk decorate"
    ),
)

_READS: dict[str, Options] = {
    "status": Options(
        flags="sbvz",
        attached="u",
        long_flags=names(
            "short branch show-stash long verbose no-renames ahead-behind no-ahead-behind "
            "no-column renames null"
        ),
        long_attached=names(
            "porcelain untracked-files ignore-submodules ignored column find-renames"
        ),
    ),
    "diff": DIFF,
    "log": REVISIONS | DIFF,
    "show": REVISIONS | DIFF,
    "whatchanged": REVISIONS | DIFF,
    "rev-list": REVISIONS,
    "shortlog": REVISIONS
    | Options(flags="nse", long_flags=names("numbered summary email committer")),
    "blame": Options(
        flags="bltpsnfewc",
        valued="L",
        attached="MC",
        long_flags=names(
            "root show-stats reverse first-parent porcelain line-porcelain incremental "
            "progress no-progress score-debug show-name show-number show-email color-lines "
            "color-by-age"
        ),
        long_valued=names("encoding date ignore-rev"),
        long_attached=names("abbrev"),
    ),
    "ls-files": Options(
        flags="cdmoiskutvfz",
        valued="xX",
        long_flags=names(
            "cached deleted modified others ignored stage unmerged killed directory "
            "no-empty-directory eol full-name recurse-submodules error-unmatch deduplicate "
            "sparse exclude-standard"
        ),
        long_valued=names("exclude exclude-per-directory format"),
        long_attached=names("abbrev"),
    ),
    "ls-tree": Options(
        flags="drtlz",
        long_flags=names("name-only name-status object-only full-name full-tree long"),
        long_valued=names("format"),
        long_attached=names("abbrev"),
    ),
    "grep": Options(
        flags="aiIrwvhHEGFPnlLzocpWq",
        valued="emABC",
        numeric=True,
        long_flags=names(
            "cached no-index untracked no-exclude-standard exclude-standard text "
            "ignore-case recursive no-recursive word-regexp invert-match full-name "
            "extended-regexp basic-regexp fixed-strings perl-regexp line-number column "
            "files-with-matches name-only files-without-match null only-matching count "
            "no-color break heading show-function function-context and or not all-match "
            "quiet"
        ),
        long_valued=names("max-depth context after-context before-context threads max-count"),
        long_attached=names("color"),
    ),
    "rev-parse": Options(
        flags="q",
        long_flags=names(
            "show-toplevel show-cdup show-prefix git-dir absolute-git-dir git-common-dir "
            "is-inside-work-tree is-inside-git-dir is-bare-repository "
            "is-shallow-repository verify quiet symbolic symbolic-full-name all "
            "show-superproject-working-tree shared-index-path local-env-vars sq revs-only "
            "no-revs flags no-flags"
        ),
        long_valued=names("default since after until before git-path"),
        long_attached=names("short abbrev-ref branches tags remotes glob show-object-format"),
    ),
    "describe": Options(
        long_flags=names("all tags contains exact-match always long first-parent"),
        long_valued=names("candidates match exclude"),
        long_attached=names("abbrev dirty broken"),
    ),
    "show-ref": Options(
        flags="dsq",
        long_flags=names("head tags heads branches dereference verify exists quiet"),
        long_attached=names("hash abbrev"),
    ),
    "merge-base": Options(
        flags="a",
        long_flags=names("all octopus independent is-ancestor fork-point"),
    ),
    "cat-file": Options(flags="tsep"),
    "count-objects": Options(flags="vH", long_flags=names("verbose human-readable")),
    "check-ignore": Options(flags="qvnz", long_flags=names("quiet verbose non-matching no-index")),
    "version": Options(long_flags=names("build-options")),
}

_LIST_BRANCHES = Options(
    flags="arvli",
    long_flags=names(
        "all remotes verbose list show-current ignore-case no-color no-column omit-empty no-abbrev"
    ),
    long_valued=names("sort format points-at"),
    long_attached=names("contains no-contains merged no-merged color column abbrev"),
)
_LIST_TAGS = Options(
    flags="li",
    attached="n",
    long_flags=names("list ignore-case no-column omit-empty"),
    long_valued=names("sort format points-at"),
    long_attached=names("contains no-contains merged no-merged color column"),
)

# A remote, as a name: URLs (`ext::sh -c …`, `host:path`) and paths ask.
_REMOTE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

_FETCH = Options(
    flags="aqvftpPn46",
    valued="j",
    long_flags=names(
        "all append quiet verbose force tags prune prune-tags no-tags dry-run atomic "
        "unshallow progress no-progress multiple no-recurse-submodules prefetch "
        "update-shallow ipv4 ipv6"
    ),
    long_valued=names("depth deepen shallow-since shallow-exclude jobs"),
)
_MERGE = Options(
    flags="nqv",
    valued="m",
    long_flags=names(
        "ff no-ff ff-only squash no-squash commit no-commit no-edit stat no-stat quiet "
        "verbose allow-unrelated-histories autostash no-autostash no-log signoff "
        "no-signoff no-verify verify abort continue quit"
    ),
    long_valued=names("message"),
    long_attached=names("log"),
)
_PICK = Options(
    flags="nsm",
    long_flags=names(
        "no-commit signoff continue abort skip quit ff allow-empty allow-empty-message "
        "keep-redundant-commits no-edit"
    ),
    long_valued=names("mainline"),
)

_CHANGES: dict[str, Options] = {
    "add": Options(
        flags="nvfuAN",
        long_flags=names(
            "dry-run verbose force update all no-ignore-removal ignore-removal "
            "intent-to-add refresh ignore-errors ignore-missing sparse renormalize no-all "
            "no-warn-embedded-repo"
        ),
    ),
    "commit": Options(
        flags="aqvsnio",
        valued="mcC",
        long_flags=names(
            "all quiet verbose signoff no-signoff no-verify verify amend allow-empty "
            "allow-empty-message no-edit include only dry-run short branch porcelain long "
            "null reset-author no-post-rewrite status no-status"
        ),
        long_valued=names(
            "message reuse-message reedit-message author date cleanup fixup squash trailer"
        ),
    ),
    "checkout": Options(
        flags="qfm",
        valued="bB",
        attached="t",
        long_flags=names(
            "quiet force merge ours theirs progress no-progress overlay no-overlay "
            "ignore-skip-worktree-bits guess no-guess no-track detach"
        ),
        long_valued=names("orphan conflict"),
        long_attached=names("track"),
    ),
    "switch": Options(
        flags="dfmq",
        valued="cC",
        attached="t",
        long_flags=names(
            "detach guess no-guess force discard-changes merge quiet progress no-progress no-track"
        ),
        long_valued=names("create force-create orphan conflict"),
        long_attached=names("track"),
    ),
    "restore": Options(
        flags="SWmq",
        valued="s",
        long_flags=names(
            "staged worktree ours theirs merge overlay no-overlay quiet progress "
            "no-progress ignore-unmerged"
        ),
        long_valued=names("source conflict"),
    ),
    "reset": Options(
        flags="qN",
        long_flags=names("soft mixed hard merge keep quiet no-refresh refresh intent-to-add"),
    ),
    "fetch": _FETCH,
    "pull": _FETCH
    | _MERGE
    | Options(
        long_flags=names("no-rebase"),
        long_attached=names("rebase"),
        values={"--rebase": one_of(["true", "false", "merges"])},  # not interactive
    ),
    "push": Options(
        flags="fuqvnd",
        long_flags=names(
            "force force-if-includes set-upstream quiet verbose dry-run all tags "
            "follow-tags delete no-verify atomic porcelain progress prune"
        ),
        long_attached=names("force-with-lease"),
    ),
    "merge": _MERGE,
    "rebase": Options(
        flags="qvnfm",
        long_flags=names(
            "continue abort skip quit keep-base quiet verbose stat no-stat autostash "
            "no-autostash autosquash no-autosquash fork-point no-fork-point root "
            "update-refs no-update-refs committer-date-is-author-date ignore-date "
            "reset-author-date signoff force-rebase no-ff apply merge keep-empty "
            "no-keep-empty reapply-cherry-picks no-reapply-cherry-picks "
            "allow-empty-message no-verify verify no-rebase-merges"
        ),
        long_valued=names("onto empty"),
        long_attached=names("rebase-merges"),
    ),
    "cherry-pick": _PICK,
    "revert": _PICK,
    "mv": Options(flags="fknv", long_flags=names("force dry-run verbose sparse")),
    "rm": Options(
        flags="frnq",
        long_flags=names("force dry-run quiet cached ignore-unmatch sparse"),
    ),
}
_REMOTE_FIRST = frozenset({"fetch", "pull", "push"})
_STASH = Options(
    flags="kuaqmS",
    valued="m",
    long_flags=names(
        "keep-index no-keep-index include-untracked only-untracked all quiet staged index"
    ),
    long_valued=names("message"),
)
_STASH_CHANGES = frozenset({"push", "save", "pop", "apply", "drop", "clear", "branch"})
_CONFIG_READS = names("--get --get-all --get-regexp --get-urlmatch -l --list")
_CONFIG = Options(
    flags="lz",
    long_flags=names(
        "get get-all get-regexp get-urlmatch list show-origin show-scope name-only null "
        "local global system worktree includes no-includes bool int bool-or-int path "
        "expiry-date"
    ),
    long_valued=names("type default"),
)


def read_git(r: Reader, start: int) -> None:
    """Mark what the prefix must name in `git …` (words from `start`)."""
    words = r.words
    i = start
    while i < len(words) and words[i].startswith("-"):
        if words[i] not in _GLOBAL:
            r.risky_rest(i)
            return
        i += 1
    if i >= len(words):
        return
    if r.unknown(i):
        r.risky_rest(i)
        return
    reader = _SUBCOMMANDS.get(words[i])
    if reader is None:
        r.risky_rest(i)  # not read here: only the prefix's exact words
        return
    reader(r, i)


def _read(spec: Options) -> Callable[[Reader, int], None]:
    def read(r: Reader, at: int) -> None:
        read_options(r, at + 1, spec)

    return read


def _change(spec: Options) -> Callable[[Reader, int], None]:
    def read(r: Reader, at: int) -> None:
        r.risky(at)
        remote = r.words[at] in _REMOTE_FIRST
        operands: list[int] = []

        def operand(r: Reader, i: int) -> None:
            operands.append(i)
            if remote and len(operands) == 1 and not _REMOTE_NAME.fullmatch(r.words[i]):
                r.risky(i)

        read_options(r, at + 1, spec, operand)

    return read


def _branch_or_tag(listing: Options, changing: Options) -> Callable[[Reader, int], None]:
    """`git branch` / `git tag` list, unless an operand names something to create (without
    `-l`/`--list` it does) or an option changes one: then the prefix must name them."""

    def read(r: Reader, at: int) -> None:
        probe = Reader(r.words)
        operands: list[int] = []
        read_options(probe, at + 1, listing, lambda _, i: operands.append(i))
        listed = {"-l", "--list"} & set(r.words[at + 1 :])
        if probe.needed == 0 and (not operands or listed):
            return
        _change(changing)(r, at)

    return read


def _stash(r: Reader, at: int) -> None:
    words = r.words
    sub = words[at + 1] if at + 1 < len(words) else ""
    if sub == "list":
        read_options(r, at + 2, REVISIONS | DIFF)
    elif sub == "show":
        untracked = Options(flags="u", long_flags=names("include-untracked only-untracked"))
        read_options(r, at + 2, DIFF | untracked)
    elif sub in _STASH_CHANGES or sub.startswith("-") or not sub:
        r.risky(at)
        read_options(r, at + (2 if sub in _STASH_CHANGES else 1), _STASH)
    else:
        r.risky_rest(at)


def _remote(r: Reader, at: int) -> None:
    """`git remote [-v]`, `git remote get-url …`, `git remote show -n NAME`: reads. `show`
    without -n connects (ssh); add, set-url and the rest change the config."""
    rest = r.words[at + 1 :]
    if all(w in ("-v", "--verbose") for w in rest):
        return
    if rest[0] == "get-url":
        read_options(r, at + 2, Options(long_flags=names("push all")))
    elif rest[0] == "show" and "-n" in rest[1:]:
        read_options(r, at + 2, Options(flags="n"))
    else:
        r.risky_rest(at)


def _config(r: Reader, at: int) -> None:
    """The reading forms of `git config` (`--get`, `--list`, `get`, `list`); any other
    form writes the config or opens an editor."""
    rest = r.words[at + 1 :]
    first = next((w for w in rest if not w.startswith("-")), "")
    if not (_CONFIG_READS & set(rest)) and first not in ("get", "list"):
        r.risky_rest(at)
        return
    read_options(r, at + 1, _CONFIG)


_SUBCOMMANDS: dict[str, Callable[[Reader, int], None]] = {
    **{name: _read(spec) for name, spec in _READS.items()},
    **{name: _change(spec) for name, spec in _CHANGES.items()},
    "branch": _branch_or_tag(
        _LIST_BRANCHES,
        _LIST_BRANCHES
        | Options(
            flags="dDmMcCft",
            long_flags=names("delete move copy force no-track quiet unset-upstream"),
            long_valued=names("set-upstream-to"),
            long_attached=names("track"),
        ),
    ),
    "tag": _branch_or_tag(
        _LIST_TAGS,
        _LIST_TAGS
        | Options(
            flags="afd",
            valued="m",
            long_flags=names("annotate force delete"),
            long_valued=names("message"),
        ),
    ),
    "stash": _stash,
    "remote": _remote,
    "config": _config,
}
