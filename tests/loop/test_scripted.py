"""The loop's logic against a scripted model in this process (tests/fakes/scripted.py): what
each request carries, what the tools did on real files, how a turn ends. The same loop
against the HTTP fakes is tests/loop/test_agent.py; this file needs no server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli.loop.events import ContentDelta, Finished, ThinkingDelta, ToolDecided, ToolResult
from tests.conftest import MakeAgent
from tests.fakes.context import typed
from tests.fakes.scripted import Answer, ScriptedModel, call


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def test_an_answer_without_calls_ends_the_turn_in_one_request(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel
) -> None:
    scripted.enqueue(Answer("All done here.", thinking="nothing to do"))
    events = make_scripted_agent().run("hi")
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert (finished.stop_reason, finished.answer, finished.steps) == (
        "answer",
        "All done here.",
        1,
    )
    assert "".join(e.text for e in of_type(events, ContentDelta)) == "All done here."
    assert "".join(e.text for e in of_type(events, ThinkingDelta)) == "nothing to do"
    assert len(scripted.requests) == 1
    last = scripted.requests[0].messages[-1]
    assert last["role"] == "user" and typed(last["content"]) == "hi"


def test_a_read_result_goes_back_to_the_model_in_the_next_request(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    scripted.enqueue(Answer(calls=[call("read_file", {"path": "notes.txt"})]), "It says 42.")
    harness = make_scripted_agent()
    events = harness.run("what do the notes say?")
    assert events[-1].answer == "It says 42."
    assert len(scripted.requests) == 2
    (result,) = tool_results(scripted.requests[1].messages)
    assert result["success"] is True and "the answer is 42" in result["content"], result
    # The history holds the call and its result, in order, and the final answer.
    roles = [m["role"] for m in harness.conversation]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]


def test_a_declined_write_changes_nothing_and_the_model_is_told(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("old\n")
    scripted.enqueue(
        Answer(calls=[call("write_file", {"path": "a.txt", "content": "new\n"})]), "Understood."
    )
    harness = make_scripted_agent(answers=[False])
    events = harness.run("rewrite a.txt")
    assert (workspace / "a.txt").read_text() == "old\n"
    assert len(harness.approver.requests) == 1
    decided = of_type(events, ToolDecided)
    assert [d.allowed for d in decided] == [False]
    (result,) = tool_results(scripted.requests[1].messages)
    assert result["success"] is False, result


def test_an_approved_write_is_made_on_disk(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel, workspace: Path
) -> None:
    scripted.enqueue(
        Answer(calls=[call("write_file", {"path": "b.txt", "content": "hello\n"})]), "Written."
    )
    harness = make_scripted_agent(answers=[True])
    events = harness.run("write b.txt")
    assert (workspace / "b.txt").read_text() == "hello\n"
    assert [r.result["success"] for r in of_type(events, ToolResult)] == [True]
    assert events[-1].answer == "Written."


def test_a_call_to_a_tool_nobody_offered_is_refused_and_the_loop_goes_on(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel, workspace: Path
) -> None:
    scripted.enqueue(Answer(calls=[call("format_disk", {"path": "/"})]), "Sorry.")
    harness = make_scripted_agent()
    events = harness.run("clean up")
    assert events[-1].answer == "Sorry."
    (result,) = tool_results(scripted.requests[1].messages)
    assert result["success"] is False and "format_disk" in json.dumps(result), result
    assert harness.approver.requests == []  # nothing to ask about: it does not exist
    assert list(workspace.iterdir()) == []


def test_the_step_limit_ends_with_a_request_that_wants_no_call(
    make_scripted_agent: MakeAgent, scripted: ScriptedModel, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("a")
    for n in range(3):
        scripted.enqueue(Answer(calls=[call("read_file", {"path": f"a.txt#{n}"})]))
    scripted.enqueue("What I found: nothing more.")
    events = make_scripted_agent(max_steps=3).run("loop")
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert (finished.stop_reason, finished.steps) == ("max_steps", 3)
    assert len(scripted.requests) == 4
    # The tools stay (they lead the prompt the server holds); no call is wanted.
    assert scripted.requests[-1].tools == scripted.requests[-2].tools
    assert scripted.requests[-1].tool_choice == "none"
    assert scripted.requests[-2].tool_choice is None
    assert finished.answer == "What I found: nothing more."
