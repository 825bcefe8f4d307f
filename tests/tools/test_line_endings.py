"""edit_file keeps each line's end as the file has it (issue 19, "Keep what the file was"): a
line the model did not touch keeps its bytes (CRLF, LF, a lone CR, a mix of them), and a line
it wrote takes the end of the line it replaces, or the file's most common end when it adds
one — in every matching stage and with replace_all. Through the real agent and the pure
matcher, with a property over random mixed files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cli.tools.edits import EditFailed, plan_edit
from tests.conftest import MakeAgent
from tests.fakes.fake_ollama import FakeOllama
from tests.tools.test_edit_move import YES, run_calls

# How many random files and edits the property runs.
EXAMPLES = 300


def test_a_lenient_edit_keeps_the_crlf_of_the_line_it_changes_in_a_mixed_file(
    make_agent: MakeAgent, ollama: FakeOllama, workspace: Path
) -> None:
    # The finding: the trailing-whitespace stage took the line's "\r" for whitespace and
    # dropped it, leaving b"a\r\nB\nc\n".
    target = workspace / "mixed.txt"
    target.write_bytes(b"a\r\nb  \r\nc\n")
    out = run_calls(
        make_agent(YES),
        ollama,
        ("read_file", {"path": "mixed.txt"}),
        ("edit_file", {"path": "mixed.txt", "old_string": "b\t", "new_string": "B"}),
    )
    assert out[1]["success"] is True, out[1]
    assert out[1]["matched"] == "ignoring trailing whitespace"
    assert target.read_bytes() == b"a\r\nB\r\nc\n"


MIXED = "one\r\n  two  \r\n  three\nfour\r\n"  # CRLF the most common end


@pytest.mark.parametrize(
    ("old", "new", "expected", "stage"),
    [
        pytest.param(
            "two  \r\n  three", "2\n3", "one\r\n  2\r\n3\nfour\r\n", "exact", id="exact",
        ),
        pytest.param(
            "  two\n  three", "2\n3", "one\r\n2\r\n3\nfour\r\n", "trailing whitespace",
            id="trailing-whitespace",
        ),
        pytest.param(
            "two\nthree", "2\n3", "one\r\n  2\r\n  3\nfour\r\n", "indentation",
            id="indentation",
        ),
        pytest.param(
            '  two  \n  "three"', "2\n3", "one\r\n2\r\n3\nfour\r\n", "typography",
            id="typography",
        ),
        pytest.param(
            "  two  \n  three\n", "2\n2b\n3\n", "one\r\n2\r\n2b\n3\r\nfour\r\n", "exact",
            id="added-line-takes-the-most-common-end",
        ),
        pytest.param(
            "one\n  two  \n  three", "one\nnew\n  two  \n  three",
            "one\r\nnew\r\n  two  \r\n  three\nfour\r\n", "exact",
            id="lines-kept-around-an-insertion-keep-their-ends",
        ),
        pytest.param(
            "  two  \n  three\n", "", "one\r\nfour\r\n", "exact",
            id="lines-deleted-with-their-ends",
        ),
    ],
)  # fmt: skip
def test_every_stage_keeps_the_ends_of_a_mixed_file(
    old: str, new: str, expected: str, stage: str
) -> None:
    text = MIXED.replace("three", "\u201cthree\u201d") if stage == "typography" else MIXED
    edit = plan_edit(text, old, new)
    assert (edit.text, edit.stage) == (expected, stage)


def test_replace_all_keeps_each_lines_own_end() -> None:
    text = "x = 1\r\nx = 1  \nkeep\r\nx = 1\n"
    edit = plan_edit(text, "x = 1", "x = 2\ny = 0", replace_all=True)
    # Each replaced line keeps its end; the line each adds takes the file's most common (a
    # tie: LF).
    assert edit.text == "x = 2\ny = 0\r\nx = 2\ny = 0  \nkeep\r\nx = 2\ny = 0\n"
    lenient = plan_edit("a  \r\nb\na\t\n", "a\n", "c\n", replace_all=True)
    assert lenient.text == "c\r\nb\nc\n" and lenient.stage == "trailing whitespace"


@pytest.mark.parametrize(
    ("text", "old", "new", "expected"),
    [
        pytest.param("a\rb\rc\r", "b\n", "B\nB2\n", "a\rB\rB2\rc\r", id="classic-mac-file"),
        pytest.param(
            "10%\r50%\nnext\n", "next", "then\nmore", "10%\r50%\nthen\nmore\n",
            id="a-cr-inside-a-line-is-content",
        ),
        pytest.param("a\nb\n", "a", "x\r\ny", "x\ny\nb\n", id="crlf-written-into-an-lf-file"),
        pytest.param("a\r\nb\r\n", "a", "x\ny", "x\r\ny\r\nb\r\n", id="lf-written-into-crlf"),
    ],
)  # fmt: skip
def test_lines_written_take_the_files_ends(text: str, old: str, new: str, expected: str) -> None:
    assert plan_edit(text, old, new).text == expected


def test_an_edit_of_line_ends_alone_is_refused_with_what_to_do() -> None:
    with pytest.raises(EditFailed, match="differ only in line ends") as info:
        plan_edit("a\r\nb\n", "a\r\nb", "a\nb")
    assert "write_file" in info.value.hint


# -- the property: nothing outside the replaced lines moves -------------------------------------

ENDS = st.sampled_from(["\n", "\r\n"])
INDENT = st.sampled_from(["", "  ", "\t"])
# What follows a line's number: letters, spaces and tabs, now and then a lone CR inside.
BODY = st.text(alphabet="ab \t\r", max_size=6).filter(lambda s: not s.rstrip(" \t").endswith("\r"))


@st.composite
def mixed_edits(draw: st.DrawFn) -> tuple[list[tuple[str, str]], int, int, str, str]:
    """A file as (content, end) lines — each numbered, so that old_string matches one place
    only; the last line maybe without an end — a run of lines to replace (first, last),
    old_string as a model would copy them (LF ends; perhaps without trailing whitespace, or
    indented otherwise), and new_string."""
    drawn = draw(st.lists(st.tuples(INDENT, BODY, ENDS), min_size=1, max_size=12))
    lines = [(f"{indent}<{n}>{body}", end) for n, (indent, body, end) in enumerate(drawn)]
    if draw(st.booleans()):
        lines[-1] = (lines[-1][0], "")
    first = draw(st.integers(0, len(lines) - 1))
    last = draw(st.integers(first, min(first + 3, len(lines) - 1)))
    how = draw(st.sampled_from([str, str.rstrip, lambda line: " " + line.strip()]))
    old = "\n".join(how(content) for content, _ in lines[first : last + 1])
    new = "\n".join(draw(st.lists(st.text(alphabet="XY ", max_size=4), min_size=1, max_size=4)))
    return lines, first, last, old, new


@settings(
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
    deadline=None,
    database=None,
)
@given(mixed_edits())
def test_property_lines_outside_the_replaced_span_keep_their_bytes(
    case: tuple[list[tuple[str, str]], int, int, str, str],
) -> None:
    lines, first, last, old, new = case
    text = "".join(content + end for content, end in lines)
    # A file without "\n" whose lone CRs would be its line ends (classic Mac OS) is another
    # case, tested above.
    assume("\n" in text or "\r" not in text)
    edit = plan_edit(text, old, new)
    before = "".join(content + end for content, end in lines[:first])
    # Up to the end of the last line replaced: whole-line stages replace its content and
    # leave its end (new_string's last "\n" aside), unless they delete the lines, ends and
    # all; the exact stage may end inside it (trailing whitespace not copied).
    written = new.removesuffix("\n") if edit.stage != "exact" else new
    deleted = not written and edit.stage != "exact"
    after = "".join(content + end for content, end in lines[last + 1 :])
    after = after if deleted else lines[last][1] + after
    assert edit.text.startswith(before)
    assert edit.text.endswith(after)
    middle = edit.text[len(before) : len(edit.text) - len(after)]
    # The lines written: new_string's (re-indented by that stage), each ending as one of the
    # lines it replaces did, or as most of the file's lines do.
    if edit.stage != "indentation":
        assert written in middle.replace("\r\n", "\n")
    dominant = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"
    replaced = {end for _, end in lines[first:last]}
    for piece in middle.split("\n")[:-1]:
        assert ("\r\n" if piece.endswith("\r") else "\n") in replaced | {dominant}, middle
