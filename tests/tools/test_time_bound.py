"""Every tool call is bounded in time (issue 18).

edit_file's matching and its similar-lines hint take time about linear in the file, whatever
old_string is (a property test holds the new matcher to a straightforward reference kept
here: the same result for every input); and every call has a deadline,
policy.limits.tool_seconds, checked at safe points only, so a call that runs out of time
fails with an error the model can act on and has changed nothing.

Nothing here sleeps or measures time: the deadline's clock is passed in (a clock that jumps
when told to), and work is counted in function calls (sys.setprofile), not seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.backends.messages import ToolCall
from cli.config.loading import parse_config
from cli.config.settings import ConfigError
from cli.fs.deadline import NO_DEADLINE, Deadline
from cli.loop.agent import Agent
from cli.loop.events import ToolResult
from cli.tools import check_arguments, execute, ripgrep
from cli.tools.base import ToolContext
from cli.tools.edits import (
    _FOLD,
    CUT_SHORT,
    Edit,
    EditFailed,
    _LineEnds,
    _Room,
    _Span,
    _Work,
    plan_edit,
)
from tests.conftest import MakeAgent, RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call

Result = dict[str, Any]

# -- the reference: edit matching as it was, straightforward and slow ----------------------------


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def reference_plan_edit(text: str, old: str, new: str, replace_all: bool = False) -> Edit:
    """plan_edit as it was before it was made linear: every stage compares line by line at
    every position. What it answers is what plan_edit must answer. Line ends are not what it
    checks: it takes them off and puts them back as plan_edit does (_LineEnds, held to its
    own tests in test_line_endings.py)."""
    if old == "":
        raise EditFailed(
            "old_string is empty", hint="give the exact text to replace (read_file shows it)"
        )
    if old == new:
        raise EditFailed("old_string and new_string are the same; nothing would change")
    ends = _LineEnds.of(text)
    text, old, new = ends.text, ends.normal(old), ends.normal(new)
    if old == new:
        raise EditFailed(
            "old_string and new_string differ only in line ends, and edit_file keeps each "
            "line's end as the file has it; nothing would change",
            hint="to change the file's line ends, write_file its whole content",
        )
    for stage, finder in REFERENCE_STAGES:
        spans = finder(text, old, new)
        if not spans:
            continue
        if len(spans) > 1 and not replace_all:
            numbers = [str(text.count("\n", 0, s[0]) + 1) for s in spans[:10]]
            more = f" and {len(spans) - 10} more" if len(spans) > 10 else ""
            how = "" if stage == "exact" else f" (ignoring {stage})"
            raise EditFailed(
                f"old_string matches {len(spans)} places{how}, at lines {', '.join(numbers)}{more}",
                "add surrounding lines to old_string to pick one, or set replace_all to change "
                "them all",
            )
        edit = reference_apply(text, spans, stage)
        work = _Work(NO_DEADLINE, _Room(None), replace_all)
        restored = ends.restore(edit.text, [_Span(*span) for span in spans], work)
        return dataclasses.replace(edit, text=restored)
    raise EditFailed(*reference_no_match(text, old))


Span = tuple[int, int, str]


def reference_exact(text: str, old: str, new: str) -> list[Span]:
    spans, at = [], text.find(old)
    while at != -1:
        spans.append((at, at + len(old), new))
        at = text.find(old, at + len(old))
    return spans


def reference_typography(text: str, old: str, new: str) -> list[Span]:
    folded, old_folded = text.translate(_FOLD), old.translate(_FOLD)
    if folded == text and old_folded == old:
        return []
    spans = reference_exact(folded, old_folded, new)
    return spans or reference_lines(folded, old_folded, new, str.strip, reindent=True)


def reference_lines(
    text: str, old: str, new: str, norm: Callable[[str], str], *, reindent: bool
) -> list[Span]:
    wanted = old.split("\n")
    if wanted and wanted[-1] == "":
        wanted.pop()
    while wanted and not wanted[0].strip():
        wanted.pop(0)
    while wanted and not wanted[-1].strip():
        wanted.pop()
    if not wanted:
        return []
    key = [norm(line) for line in wanted]
    lines = text.split("\n")
    starts, at = [], 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    spans: list[Span] = []
    for i in range(len(lines) - len(key) + 1):
        if all(norm(lines[i + j]) == key[j] for j in range(len(key))):
            last = i + len(key) - 1
            start, end = starts[i], starts[last] + len(lines[last])
            replacement = reference_reindent(new, wanted, lines[i : last + 1]) if reindent else new
            replacement = replacement.removesuffix("\n")
            if not replacement and end < len(text):
                end += 1
            if not spans or start >= spans[-1][1]:  # overlapping: the earlier one counts
                spans.append((start, end, replacement))
    return spans


def reference_common_indent(lines: list[str]) -> str:
    indents = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    if not indents:
        return ""
    common = indents[0]
    for indent in indents[1:]:
        while not indent.startswith(common):
            common = common[:-1]
    return common


def reference_reindent(new: str, old_lines: list[str], matched: list[str]) -> str:
    theirs, ours = reference_common_indent(old_lines), reference_common_indent(matched)
    if theirs == ours:
        return new
    out = []
    for line in new.split("\n"):
        if not line.strip():
            out.append(line)
        elif line.startswith(theirs):
            out.append(ours + line[len(theirs) :])
        else:
            out.append(ours + line.lstrip())
    return "\n".join(out)


REFERENCE_STAGES: list[tuple[str, Callable[[str, str, str], list[Span]]]] = [
    ("exact", reference_exact),
    ("trailing whitespace", lambda t, o, n: reference_lines(t, o, n, str.rstrip, reindent=False)),
    ("indentation", lambda t, o, n: reference_lines(t, o, n, str.strip, reindent=True)),
    ("typography", reference_typography),
]


def reference_apply(text: str, spans: list[Span], stage: str) -> Edit:
    parts, at, shift = [], 0, 0
    first_line = last_line = added = removed = 0
    for n, (start, end, new) in enumerate(spans):
        parts += [text[at:start], new]
        at = end
        replaced = text[start:end]
        start_line = text.count("\n", 0, start) + 1 + shift
        if n == 0:
            first_line = start_line
        last_line = start_line + max(lines_in(new), 1) - 1
        shift += new.count("\n") - replaced.count("\n")
        added += lines_in(new)
        removed += lines_in(replaced)
    parts.append(text[at:])
    return Edit("".join(parts), len(spans), (first_line, last_line), added, removed, stage)


def lines_in(region: str) -> int:
    return region.count("\n") + (0 if region.endswith("\n") else 1) if region else 0


def reference_no_match(text: str, old: str) -> tuple[str, str]:
    lines = text.split("\n")
    wanted = [line for line in old.split("\n") if line.strip()] or [old]
    at = reference_most_similar(lines, wanted[0].strip())
    if at is None:
        return "old_string was not found in the file", "read_file it again, copy the text exactly"
    count = min(max(len(wanted), 1), 6)
    quoted = "\n".join(f"{n + 1:>5}: {lines[n]}" for n in range(at, min(at + count, len(lines))))
    return (
        "old_string was not found in the file (whitespace, quotes and dashes were forgiven too)",
        f"the most similar lines are:\n{quoted}\n"
        "copy the text exactly from there (without the line numbers), or read_file it again",
    )


def reference_most_similar(lines: list[str], wanted: str) -> int | None:
    if not wanted:
        return None
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted)
    scored = []
    for n, line in enumerate(lines[:20_000]):
        stripped = line.strip()
        if not stripped:
            continue
        matcher.set_seq1(stripped)
        if matcher.real_quick_ratio() > 0.5 and matcher.quick_ratio() > 0.5:
            scored.append((matcher.quick_ratio(), n, stripped))
    best: tuple[float, int] | None = None
    for _, n, stripped in sorted(scored, reverse=True)[:50]:
        matcher.set_seq1(stripped)
        ratio = matcher.ratio()
        if ratio > 0.5 and (best is None or ratio > best[0]):
            best = (ratio, n)
    return best[1] if best else None


def outcome(plan: Callable[[], Edit]) -> object:
    """An edit, or the failure's words (message and hint): what the two must agree on."""
    try:
        return plan()
    except EditFailed as exc:
        return ("failed", str(exc), exc.hint)


# -- the property: the same answer as the reference, for every input ------------------------------

# Pieces of lines that make every stage matter: spaces and tabs (indentation, trailing
# whitespace), typographic quotes, dashes and no-break spaces (folding), CR (Windows files),
# repeats (several matches, overlapping runs of lines).
PIECES = ["a", "b", "x = 1", "()", " ", "  ", "\t", "“q”", "’", "—", "-", "\u00a0", '"', "'", "é"]
line_text = st.lists(st.sampled_from(PIECES), max_size=4).map("".join)


@st.composite
def edit_cases(draw: st.DrawFn) -> tuple[str, str, str, bool]:
    body = draw(st.lists(line_text, min_size=1, max_size=14))
    if draw(st.booleans()):  # a repeated block: many matches, and runs that overlap
        body = body[:3] * draw(st.integers(1, 5))
    ending = draw(st.sampled_from(["\n", "\r\n", "mixed"]))
    text = ""
    for line in body:
        text += line + (draw(st.sampled_from(["\n", "\r\n"])) if ending == "mixed" else ending)
    if draw(st.booleans()) and text:
        text = text[: -len(ending if ending != "mixed" else "\n")]  # no final line end
    kind = draw(st.sampled_from(["slice", "lines", "free"]))
    if kind == "slice" and text:
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i + 1, len(text)))
        old = text[i:j]
    elif kind == "lines" and body:
        i = draw(st.integers(0, len(body) - 1))
        j = draw(st.integers(i + 1, len(body)))
        changed = []
        for line in body[i:j]:
            how = draw(st.sampled_from(["same", "strip", "rstrip", "indent", "trail", "fold"]))
            changed.append(
                {
                    "same": line,
                    "strip": line.strip(),
                    "rstrip": line.rstrip(),
                    "indent": "    " + line,
                    "trail": line + " \t",
                    "fold": line.translate(_FOLD),
                }[how]
            )
        pad = draw(st.sampled_from(["", "\n", "\n\n  \n"]))
        old = pad + draw(st.sampled_from(["\n", "\r\n"])).join(changed) + pad
        if draw(st.booleans()):
            old += "\n"
    else:
        old = "\n".join(draw(st.lists(line_text, min_size=1, max_size=4))) or "a"
    new = draw(st.sampled_from(["\n", "\r\n"])).join(draw(st.lists(line_text, max_size=4)))
    if draw(st.booleans()):
        new += "\n"
    return text, old, new, draw(st.booleans())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit_cases())
def test_matching_answers_as_the_reference_does(case: tuple[str, str, str, bool]) -> None:
    text, old, new, replace_all = case
    expected = outcome(lambda: reference_plan_edit(text, old, new, replace_all))
    assert outcome(lambda: plan_edit(text, old, new, replace_all)) == expected


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        pytest.param("a\na\na\na\nb\n", "a\na\n", "c\n", id="runs-overlap"),
        pytest.param("x  \nx  \nx  \n", "x\nx\n", "", id="overlapping-deletes"),
        pytest.param("  a\n\tb\n  a\n\tb\n", "a\nb", "  c\n\td", id="reindented-twice"),
        pytest.param("“a”\n‘b’\n“a”\n", '"a"', "z", id="folded-twice"),
        pytest.param("a\r\nb\r\na\r\nb\r\n", "a\nb\n", "c\n", id="crlf"),
        pytest.param("\n\n\n", "\n\n", "x", id="blank-only"),
    ],
)
@pytest.mark.parametrize("replace_all", [False, True])
def test_matching_answers_as_the_reference_does_on_repeats(
    text: str, old: str, new: str, replace_all: bool
) -> None:
    expected = outcome(lambda: reference_plan_edit(text, old, new, replace_all))
    assert outcome(lambda: plan_edit(text, old, new, replace_all)) == expected


# -- counting work ------------------------------------------------------------------------------


class TooManyCalls(BaseException):
    """More function calls than the test allows: the work is not linear."""


def calls_at_most(limit: int, run: Callable[[], Any]) -> Any:
    """run(), stopped with TooManyCalls once it has made more than `limit` function calls
    (Python and C ones alike, counted by a profile hook): an operation count that does not
    depend on the machine's speed or load."""
    count = 0

    def profile(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
            if count > limit:
                sys.setprofile(None)
                raise TooManyCalls(f"more than {limit} calls")

    sys.setprofile(profile)
    try:
        return run()
    finally:
        sys.setprofile(None)


# -- the tool layer, with a clock passed in -------------------------------------------------------


class Clock:
    """A clock for the deadline: 0.0 for its first `after` reads, then a day later. The
    deadline starts at the first read (ToolContext.started), so `after=1` is a call whose
    time is up at its first check, and `after=n` one that runs out at its n-th."""

    def __init__(self, after: int = 1_000_000_000) -> None:
        self.after = after
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= self.after else 86_400.0


FROZEN = 10**12  # reads before the clock moves: never, in these tests


@dataclasses.dataclass
class Calls:
    """Calls the way the agent makes them (schema, policy, then the tool under its deadline),
    on the real agent's context with another clock."""

    agent: Agent

    def run(self, name: str, clock: Callable[[], float] | None = None, **args: Any) -> Result:
        context = self.agent.context
        if clock is not None:
            context = dataclasses.replace(context, clock=clock)
        arguments = check_arguments(name, args)
        decision = self.agent.policy.decide(name, arguments)
        assert decision.action in ("allow", "ask"), (decision.rule, decision.reason)
        return execute(name, context, arguments, decision.paths)


@pytest.fixture
def calls(make_agent: MakeAgent) -> Calls:
    return Calls(make_agent("policy: {confirm: none}\n").agent)


def deadline_error(result: Result, tool: str, seconds: int = 60) -> None:
    assert result["success"] is False, result
    assert result["error"] == (
        f"{tool} took longer than policy.limits.tool_seconds ({seconds} s) and was stopped; "
        "nothing was changed"
    )
    assert result["hint"]


# -- the findings ---------------------------------------------------------------------------------

# 120 KB of short lines, and 16 KB of the same lines ending in one that is not there (with a
# typographic quote, so that every stage runs): each stage compared every line of old_string
# at every line of the file, 480 million comparisons a stage; it was still computing after
# 45 s (about 45 s a stage here).
FINDING_TEXT = "}\n" * 60_000
FINDING_OLD = "}\n" * 7_999 + "”\n"


def test_finding_edit_of_120kb_file_with_16kb_old_string_not_there_fails_cleanly(
    calls: Calls, workspace: Path
) -> None:
    path = workspace / "big.txt"
    path.write_text(FINDING_TEXT)
    assert calls.run("read_file", path="big.txt", end_line=1)["success"] is True
    lines = FINDING_TEXT.count("\n") + FINDING_OLD.count("\n")
    result = calls_at_most(
        # A few calls a line of the file and of old_string, all stages and the hint
        # together; the old matcher made thousands a line.
        20 * lines,
        lambda: calls.run(
            "edit_file", clock=Clock(FROZEN), path="big.txt", old_string=FINDING_OLD, new_string="x"
        ),
    )
    assert result["success"] is False, result
    assert result["error"].startswith("old_string was not found in the file")
    assert "the most similar lines are:\n" in result["hint"]
    assert path.read_text() == FINDING_TEXT


def test_finding_similar_lines_hint_is_bounded_and_says_so() -> None:
    # Seven 16 KB lines of a and b, and old_string another such line: difflib's ratio on two
    # such lines is worse than quadratic (its first step alone reads 128 million pairs),
    # and the hint ran it on each.
    rng = random.Random(18)
    text = "\n".join("".join(rng.choice("ab") for _ in range(16_000)) for _ in range(7)) + "\n"
    old = "".join(rng.choice("ab") for _ in range(16_000)) + "\n"
    with pytest.raises(EditFailed) as failed:
        calls_at_most(1_000_000, lambda: plan_edit(text, old, "x"))
    assert str(failed.value).startswith("old_string was not found in the file")
    assert CUT_SHORT in failed.value.hint


def test_reindenting_under_a_long_indentation_is_linear() -> None:
    # The common indentation was found by cutting one character at a time: quadratic in
    # an indentation the file may make as long as it likes.
    text = " " * 200_000 + "a\n" + "\t" * 200_000 + "b\n"
    edit = calls_at_most(100_000, lambda: plan_edit(text, "a\nb\n", "c\nd\n"))
    assert edit.stage == "indentation" and edit.text == "c\nd\n"


def test_a_hint_that_is_not_cut_short_says_nothing_of_it() -> None:
    with pytest.raises(EditFailed) as failed:
        plan_edit("def f():\n    return 1\n", "    retrun 1\n", "x")
    assert CUT_SHORT not in failed.value.hint and "    2:     return 1" in failed.value.hint


def test_an_edit_too_large_to_write_is_refused_before_it_is_made() -> None:
    text = "x\n" * 1000
    edit = plan_edit(text, "x", "yyyy", replace_all=True, max_chars=5000)
    assert len(edit.text) == 5000
    with pytest.raises(EditFailed, match="more than 4999 characters"):
        plan_edit(text, "x", "yyyy", replace_all=True, max_chars=4999)
    # Re-indented replacements count as they are made, not once they all are.
    with pytest.raises(EditFailed, match=r"policy\.limits\.max_write_bytes"):
        plan_edit("  a\n" * 1000, "    a", "b\n" * 100, replace_all=True, max_chars=10_000)


ALL = {"replace_all": True}


def test_an_edit_too_large_to_write_fails_through_the_tool(
    make_agent: MakeAgent, workspace: Path
) -> None:
    calls = Calls(make_agent("policy: {limits: {max_write_bytes: 1000}}\n").agent)
    (workspace / "f.txt").write_text("x\n" * 100)
    calls.run("read_file", path="f.txt")
    result = calls.run("edit_file", path="f.txt", old_string="x", new_string="y" * 50, **ALL)
    assert result["success"] is False
    assert "more than 1000 characters" in result["error"] and "replace fewer" in result["hint"]
    assert (workspace / "f.txt").read_text() == "x\n" * 100


# -- the deadline, tool by tool -------------------------------------------------------------------


def test_an_edit_out_of_time_changes_nothing_wherever_it_stops(
    calls: Calls, workspace: Path
) -> None:
    # The clock jumps at each possible read in turn: the edit is made whole, or the call
    # fails with the deadline error and the file is as it was. Never anything between.
    original = "".join(f"line {n}  \n" for n in range(3000))  # matched ignoring trailing spaces
    path = workspace / "f.txt"
    outcomes = set()
    for after in range(1, 40):
        path.write_text(original)
        calls.run("read_file", path="f.txt", end_line=1)
        result = calls.run(
            "edit_file",
            clock=Clock(after),
            path="f.txt",
            old_string="line 2998\nline 2999\n",
            new_string="end\n",
        )
        if result["success"]:
            assert path.read_text() == original.replace("line 2998  \nline 2999  \n", "end\n")
            outcomes.add("edited")
        else:
            deadline_error(result, "edit_file")
            assert "write_file" in result["hint"]
            assert path.read_text() == original
            outcomes.add("stopped")
    assert outcomes == {"edited", "stopped"}


def test_the_similar_lines_hint_is_cut_short_by_the_deadline_not_the_edit(
    calls: Calls, workspace: Path
) -> None:
    path = workspace / "f.txt"
    path.write_text("".join(f"value_{n} = compute({n})\n" for n in range(5000)))
    calls.run("read_file", path="f.txt", end_line=1)
    errors = set()
    for after in [*range(1, 60), FROZEN]:
        result = calls.run(
            "edit_file",
            clock=Clock(after),
            path="f.txt",
            old_string="value_17 = compute(71)\n",
            new_string="x\n",
        )
        assert result["success"] is False
        errors.add((result["error"].split(" (")[0], CUT_SHORT in result["hint"]))
    assert errors == {
        ("edit_file took longer than policy.limits.tool_seconds", False),  # while matching
        ("old_string was not found in the file", True),  # while looking for similar lines
        ("old_string was not found in the file", False),  # in time
    }


def tree(top: Path, dirs: int = 3, files: int = 4) -> int:
    """A small tree below `top`; how many entries it holds."""
    for d in range(dirs):
        (top / f"d{d}").mkdir(parents=True)
        for f in range(files):
            (top / f"d{d}" / f"f{f}.txt").write_text(f"needle {d} {f}\n")
    return dirs * (files + 1)


@pytest.mark.parametrize("engine", ["python", "rg"])
def test_a_search_out_of_time_stops_with_the_deadline_error(
    make_agent: MakeAgent, workspace: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "rg" and ripgrep.find(dict(os.environ)) is None:
        pytest.skip("no rg here (the fast extra installs one)")
    monkeypatch.setenv("METONA_SEARCH_ENGINE", engine)  # read by the agent's environment
    calls = Calls(make_agent("").agent)
    for n in range(40):  # enough files for rg to be asked
        (workspace / f"f{n}.txt").write_text("needle\n")
    tree(workspace / "sub")
    whole = calls.run("search_files", clock=Clock(FROZEN), path=".", query="needle", **CONTENT)
    assert whole["success"] is True and whole["total_matches"] == 52
    for after in (1, 5, 30):
        result = calls.run("search_files", clock=Clock(after), path=".", query="needle", **CONTENT)
        deadline_error(result, "search_files")
        assert "search a subdirectory" in result["hint"]


CONTENT = {"search_type": "content", "max_results": 500}


def test_a_listing_out_of_time_stops_with_the_deadline_error(calls: Calls, workspace: Path) -> None:
    tree(workspace)
    whole = calls.run("list_directory", clock=Clock(FROZEN), path=".", recursive=True)
    assert whole["success"] is True and whole["total"] == 15
    for after in (1, 3, 10):
        result = calls.run("list_directory", clock=Clock(after), path=".", recursive=True)
        deadline_error(result, "list_directory")
        assert result["hint"] == "list a subdirectory, or lower max_depth"


def snapshot(top: Path) -> list[tuple[str, str]]:
    return sorted(
        (str(p.relative_to(top)), p.read_text() if p.is_file() else "/") for p in top.rglob("*")
    )


def trash_entries(agent: Agent) -> list[Path]:
    assert agent.context.changes is not None
    trash = agent.context.changes.root / "trash"
    return [p for p in trash.rglob("*")] if trash.is_dir() else []


def delete_at_every_read(calls: Calls, workspace: Path) -> set[str]:
    """Delete a tree with the clock jumping at each read in turn: it is gone and in the trash
    (and undoable), or the call failed with the deadline error and the tree is as it was
    and the trash empty."""
    outcomes = set()
    top = workspace / "gone"
    tree(top)
    before = snapshot(top)
    for after in range(1, 1000):
        result = calls.run("delete_file", clock=Clock(after), path="gone", recursive=True)
        if not result["success"]:
            deadline_error(result, "delete_file")
            assert snapshot(top) == before
            assert trash_entries(calls.agent) == []
            outcomes.add("stopped")
            continue
        assert not top.exists() and result["trashed"] is True
        (kept,) = [p for p in trash_entries(calls.agent) if p.name == "gone"]
        assert snapshot(kept) == before
        outcomes.add("deleted")
        break  # from here on the clock would jump after the call has finished
    return outcomes


def test_a_recursive_delete_out_of_time_deletes_nothing(calls: Calls, workspace: Path) -> None:
    assert delete_at_every_read(calls, workspace) == {"stopped", "deleted"}


@pytest.fixture
def state_elsewhere(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The agent's state (its trash among it) on another file system: a delete copies."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == workspace.stat().st_dev:
        pytest.skip("needs a second file system (/dev/shm) for the state dir")
    state = shm / f"metona-time-{os.getpid()}-{os.urandom(3).hex()}"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    yield state
    shutil.rmtree(state, ignore_errors=True)


def test_a_copy_into_the_trash_cut_short_is_removed_again(
    state_elsewhere: Path, make_agent: MakeAgent, workspace: Path
) -> None:
    calls = Calls(make_agent("policy: {confirm: none}\n").agent)
    assert calls.agent.context.changes is not None
    assert str(calls.agent.context.changes.root).startswith(str(state_elsewhere))
    assert delete_at_every_read(calls, workspace) == {"stopped", "deleted"}


def test_a_move_whose_tree_cannot_be_looked_through_in_time_needs_a_person(
    make_agent: MakeAgent, workspace: Path
) -> None:
    agent = make_agent("policy: {tools: {move_file: allow}}\n").agent
    tree(workspace / "src")
    call = ToolCall("move_file", {"source": "src", "destination": "dst"})
    assert agent.decide(call).allowed is True  # in time: looked through, nothing to fear
    agent.context = dataclasses.replace(agent.context, clock=Clock(3))
    decided = agent.decide(call)  # the scripted person says no
    assert decided.decision.action == "ask" and decided.decision.needs_human
    assert decided.decision.reason == (
        "src could not be looked through within policy.limits.tool_seconds (60 s), so a "
        "person must confirm"
    )
    assert (workspace / "src").is_dir() and not (workspace / "dst").exists()


def test_a_no_op_edit_not_told_in_time_is_decided_as_any_edit(
    make_agent: MakeAgent, workspace: Path
) -> None:
    agent = make_agent("").agent
    (workspace / "f.txt").write_text("x\n")
    Calls(agent).run("read_file", path="f.txt")
    # Matched ignoring trailing whitespace, and replaced by what is there: no change.
    call = ToolCall("edit_file", {"path": "f.txt", "old_string": "x \n", "new_string": "x\n"})
    assert agent.decide(call).decision.rule == "unchanged"  # told in time: not asked
    agent.context = dataclasses.replace(agent.context, clock=Clock(1))
    decided = agent.decide(call)  # not told in time: asked, as an edit is (write-only)
    assert decided.decision.rule != "unchanged" and decided.decision.action == "ask"
    assert (workspace / "f.txt").read_text() == "x\n"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_git_out_of_time_stops_with_the_deadline_error(calls: Calls, workspace: Path) -> None:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("a\n")
    assert calls.run("git_status", clock=Clock(FROZEN))["untracked"] == ["a.txt"]
    result = calls.run("git_status", clock=Clock(1))
    deadline_error(result, "git_status")
    assert "pass a smaller path" in result["hint"]


def test_run_command_keeps_its_own_timeout_not_tool_seconds(
    make_agent: MakeAgent, workspace: Path
) -> None:
    # The call's deadline is long past at every read; the command's own timeout (30 s on
    # the same clock, which stands still after that) is what bounds it, and it runs.
    calls = Calls(make_agent("policy: {tools: {run_command: allow}}\n").agent)
    result = calls.run("run_command", clock=Clock(1), command="echo ran")
    assert result["success"] is True and result["stdout"] == "ran\n", result


def test_the_model_reads_the_deadline_error(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    harness = make_agent("policy: {limits: {tool_seconds: 5}}\n")
    harness.agent.context = dataclasses.replace(harness.agent.context, clock=Clock(2))
    tree(workspace)
    ollama.enqueue(
        reply(tool_calls=[tool_call("list_directory", {"path": ".", "recursive": True})]),
        reply("too big"),
    )
    events = harness.run("list everything")
    (result,) = [e.result for e in events if isinstance(e, ToolResult)]
    told = json.loads(ollama.chat_bodies[-1]["messages"][-1]["content"])
    assert (
        told["error"]
        == result["error"]
        == (
            "list_directory took longer than policy.limits.tool_seconds (5 s) and was stopped; "
            "nothing was changed"
        )
    )
    assert told["hint"] == "list a subdirectory, or lower max_depth"


def test_agent_run_with_a_tiny_tool_seconds_gives_the_model_the_deadline_error(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path, tmp_path: Path
) -> None:
    # A search whose rg (METONA_RG) takes 30 s: no machine finishes it within
    # tool_seconds: 1, and the search stops at the deadline rather than waiting for rg or
    # searching on without it.
    slow_rg = tmp_path / "rg"
    slow_rg.write_text("#!/bin/sh\nexec sleep 30\n")
    slow_rg.chmod(0o755)
    for n in range(40):
        (workspace / f"f{n}.txt").write_text("needle\n")
    (workspace / "c.yaml").write_text("policy:\n  limits:\n    tool_seconds: 1\n")
    search = {"path": ".", "query": "needle", "search_type": "content"}
    ollama.enqueue(reply(tool_calls=[tool_call("search_files", search)]), reply("it took too long"))
    env = {"METONA_RG": str(slow_rg), "METONA_SEARCH_ENGINE": "rg"}
    done = run_cli("run", "--json", "-c", "c.yaml", "find the needle", env=env)
    assert done.code == 0, done.stderr
    told = json.loads(ollama.chat_bodies[-1]["messages"][-1]["content"])
    assert told["success"] is False
    assert told["error"] == (
        "search_files took longer than policy.limits.tool_seconds (1 s) and was stopped; "
        "nothing was changed"
    )
    assert "search a subdirectory" in told["hint"]
    call = json.loads(done.stdout)["tool_calls"][0]
    assert call["outcome"] == "failed" and call["result"]["error"] == told["error"]


# -- the setting ----------------------------------------------------------------------------------


def test_tool_seconds_is_a_whole_number_of_seconds_at_least_one() -> None:
    assert parse_config("", "t.yaml").policy.limits.tool_seconds == 60
    config = parse_config("policy:\n  limits:\n    tool_seconds: 5\n", "t.yaml")
    assert config.policy.limits.tool_seconds == 5
    for bad, words in (("0", "must be at least 1, got 0"), ("'5'", "whole number")):
        with pytest.raises(ConfigError) as error:
            parse_config(f"policy:\n  limits:\n    tool_seconds: {bad}\n", "t.yaml")
        assert error.value.message.startswith("config t.yaml, line 3: policy.limits.tool_seconds")
        assert words in error.value.message


def test_a_deadline_starts_when_its_call_does() -> None:
    clock = Clock(after=2)
    context = ToolContext(cwd="/", clock=clock)
    deadline = context.started("edit_file").deadline
    assert isinstance(deadline, Deadline) and clock.reads == 1 and deadline.tool == "edit_file"
    assert not deadline.expired  # read 2: still 0.0
    assert deadline.expired  # read 3: a day later
    assert context.deadline.left() == float("inf")  # outside a call: none
