"""Images for vision models: `agent run -a FILE` and `@shot.png` in chat, against the fakes,
which record what was sent."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cli.loop.images import MAX_IMAGE_BYTES
from cli.wiring import Choices
from tests.conftest import RunCli
from tests.fakes.context import typed
from tests.fakes.fake_ollama import FakeOllama, reply
from tests.fakes.fake_openai import Answer, FakeOpenAI

ENTER = "\r"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
JPEG = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF\x00" + bytes(32)


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


@pytest.fixture
def vision(ollama: FakeOllama) -> FakeOllama:
    ollama.add_model("gemma3:4b", ["completion", "vision"])
    return ollama


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def user_message(body: dict[str, Any]) -> dict[str, Any]:
    return [m for m in body["messages"] if m["role"] == "user"][-1]


# -- agent run -a ------------------------------------------------------------------------------


def test_run_attaches_images_for_a_vision_model(
    run_cli: RunCli, vision: FakeOllama, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    (workspace / "photo.jpg").write_bytes(JPEG)
    vision.enqueue(reply("A chart and a photo."))
    r = run_cli("run", "-m", "gemma3:4b", "-a", "shot.png", "--attach", "photo.jpg", "what?")
    assert r.code == 0, r.stderr
    assert r.stdout == "A chart and a photo.\n"
    sent = user_message(vision.chat_bodies[0])
    assert sent["images"] == [b64(PNG), b64(JPEG)]  # Ollama: base64, in the order given
    assert typed(sent["content"]).startswith("what?\n\n")
    assert '<image path="shot.png" />' in sent["content"]
    assert '<image path="photo.jpg" />' in sent["content"]


def test_run_a_model_that_cannot_see_is_sent_nothing(
    run_cli: RunCli, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    r = run_cli("run", "-a", "shot.png", "what is this?")  # qwen3:8b: completion, tools
    assert r.code == 2
    assert r.stderr == (
        "agent: -a shot.png: model 'qwen3:8b' cannot see images (it does not report the vision "
        "capability; `agent models` shows which do); nothing was sent\n"
    )
    assert ollama.chat_bodies == []


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("secret", "secret"),
        ("blocked", "blocked directory /etc"),
        ("text", "shot.png is not an image"),
        ("missing", "does not exist"),
        ("large", "is too large"),
    ],
)
def test_run_reads_an_image_through_the_read_file_policy(
    run_cli: RunCli, vision: FakeOllama, workspace: Path, setup: str, words: str
) -> None:
    path = "shot.png"
    if setup == "secret":
        (workspace / ".env").write_text("TOKEN=hunter2\n")
        os.symlink(".env", workspace / "shot.png")  # a secret under an image's name
    elif setup == "blocked":
        path = "/etc/shot.png"
    elif setup == "text":
        (workspace / "shot.png").write_text("not a picture at all\n")
    elif setup == "large":
        with open(workspace / "shot.png", "wb") as f:
            f.write(PNG)
            f.truncate(MAX_IMAGE_BYTES + 1)  # sparse: takes no room on disk
    r = run_cli("run", "-m", "gemma3:4b", "-a", path, "what?")
    assert r.code == 2, r.stderr
    assert r.stderr.startswith(f"agent: -a {path}: ") and words in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "hunter2" not in r.stderr
    assert vision.chat_bodies == []


def test_an_image_read_is_in_the_audit_log(
    run_cli: RunCli, vision: FakeOllama, workspace: Path, home: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    vision.enqueue(reply("ok"))
    assert run_cli("run", "-m", "gemma3:4b", "-a", "shot.png", "what?").code == 0
    shown = run_cli("audit", "show", "--json")
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    assert records[-1]["tool"] == "read_file", records[-1]
    assert "shot.png" in json.dumps(records[-1]) and records[-1]["outcome"] == "allowed"


def test_stream_json_start_names_the_images(
    run_cli: RunCli, vision: FakeOllama, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    vision.enqueue(reply("A chart."))
    r = run_cli(
        "run", "--output-format", "stream-json", "-m", "gemma3:4b", "-a", "shot.png", "what?"
    )
    assert r.code == 0, r.stderr
    start = json.loads(r.stdout.splitlines()[0])
    assert start["type"] == "start" and start["images"] == ["shot.png"]


# -- OpenAI-compatible servers ---------------------------------------------------------------


def test_openai_gets_image_url_content_parts(run_cli: RunCli, workspace: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    (workspace / "photo.jpg").write_bytes(JPEG)
    fake = FakeOpenAI().start()
    try:
        fake.add_model("qwen3:8b", capabilities=["tool_use", "vision"])
        fake.enqueue(Answer("I see."))
        args = ("--api", "openai", "--host", fake.url, "-a", "shot.png", "-a", "photo.jpg")
        r = run_cli("run", *args, "what?")
        assert r.code == 0, r.stderr
        sent = user_message(fake.chat_bodies[0])
    finally:
        fake.stop()
    text, first, second = sent["content"]
    assert text["type"] == "text" and typed(text["text"]).startswith("what?\n\n")
    assert first == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"},
    }
    assert second["image_url"]["url"] == f"data:image/jpeg;base64,{b64(JPEG)}"
    assert "images" not in sent


def test_openai_server_that_does_not_say_is_sent_the_image_with_a_note(
    run_cli: RunCli, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    fake = FakeOpenAI().start()
    try:
        fake.enqueue(Answer("I see."))
        r = run_cli("run", "--api", "openai", "--host", fake.url, "-a", "shot.png", "what?")
        assert r.code == 0, r.stderr
        sent = user_message(fake.chat_bodies[0])
    finally:
        fake.stop()
    assert "does not say whether 'qwen3:8b' can see images: sending them anyway" in r.stderr
    assert sent["content"][1]["type"] == "image_url"


def test_openai_model_without_vision_is_sent_nothing(run_cli: RunCli, workspace: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    fake = FakeOpenAI().start()
    try:
        fake.add_model("qwen3:8b", capabilities=["tool_use"])
        r = run_cli("run", "--api", "openai", "--host", fake.url, "-a", "shot.png", "what?")
        assert r.code == 2 and "cannot see images" in r.stderr
        assert fake.chat_bodies == []
    finally:
        fake.stop()


# -- chat: @shot.png ---------------------------------------------------------------------------


def test_chat_at_image_attaches_it(make_chat: Any, vision: FakeOllama, workspace: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    vision.enqueue(reply("A chart."), reply("Still a chart."))
    chat = make_chat("ollama:\n  model: gemma3:4b\n")
    chat.run("what is in @shot.png?" + ENTER, "and now?" + ENTER)
    first = user_message(vision.chat_bodies[0])
    assert first["images"] == [b64(PNG)]
    assert typed(first["content"]) == 'what is in @shot.png?\n\n<image path="shot.png" />'
    assert f"📎 attached shot.png (image, {len(PNG)} B)" in chat.text
    # The next message carries none of its own; the first keeps its image in the history.
    second = vision.chat_bodies[1]["messages"]
    assert "images" not in second[-1] and second[1]["images"] == [b64(PNG)]


def test_chat_at_image_for_a_model_that_cannot_see_sends_nothing(
    make_chat: Any, ollama: FakeOllama, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    chat = make_chat()
    chat.run("what is in @shot.png?" + ENTER, "\x03")
    assert ollama.chat_bodies == []
    lines = [line for line in chat.text.splitlines() if "cannot see images" in line]
    assert len(lines) == 1 and "@shot.png not attached: model 'qwen3:8b'" in lines[0]


def test_chat_at_image_on_openai_goes_as_a_data_url(make_chat: Any, workspace: Path) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    fake = FakeOpenAI().start()
    try:
        fake.add_model("qwen3:8b", capabilities=["vision"])
        fake.enqueue(Answer("A chart."))
        chat = make_chat(choices=Choices(host=fake.url, api="openai"))
        chat.run("look @shot.png" + ENTER)
        sent = user_message(fake.chat_bodies[0])
    finally:
        fake.stop()
    assert sent["content"][1]["image_url"]["url"] == f"data:image/png;base64,{b64(PNG)}"


def test_an_image_counts_in_the_token_estimate() -> None:
    from cli.loop.tokens import IMAGE_TOKENS, message_tokens

    text = {"role": "user", "content": "what is this?"}
    assert message_tokens({**text, "images": [b64(PNG)] * 2}) == (
        message_tokens(text) + 2 * IMAGE_TOKENS
    )


# -- a model that cannot see, after /model -----------------------------------------------------


def images_sent(body: dict[str, Any]) -> int:
    return sum(len(m.get("images") or []) for m in body["messages"])


def test_retry_after_switching_to_a_model_that_cannot_see_sends_no_image(
    make_chat: Any, vision: FakeOllama, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    vision.enqueue(reply("A chart."), reply("again"), reply("and back"))
    chat = make_chat("ollama:\n  model: gemma3:4b\n")
    chat.run(
        "what is in @shot.png?" + ENTER,
        "/model qwen3:8b" + ENTER,
        "/retry" + ENTER,
        "/model gemma3:4b" + ENTER,
        "/retry" + ENTER,
    )
    bodies = vision.chat_bodies
    assert [(b["model"], images_sent(b)) for b in bodies] == [
        ("gemma3:4b", 1),
        ("qwen3:8b", 0),  # the image stays in the conversation, unsent
        ("gemma3:4b", 1),  # a model that can see gets it again
    ]
    assert user_message(bodies[1])["content"].endswith('<image path="shot.png" />')
    notices = [line for line in chat.text.splitlines() if "cannot see images" in line]
    assert len(notices) == 1 and "model 'qwen3:8b'" in notices[0]


def test_later_messages_to_a_model_that_cannot_see_carry_no_image_and_stay_append_only(
    make_chat: Any, vision: FakeOllama, workspace: Path
) -> None:
    """Issue 20's rule: each request to the model is the one before and what followed, byte
    for byte — the images are left out of every one of them, the same way."""
    (workspace / "shot.png").write_bytes(PNG)
    vision.enqueue(reply("A chart."), reply("ok"), reply("fine"))
    chat = make_chat("ollama:\n  model: gemma3:4b\n")
    chat.run(
        "what is in @shot.png?" + ENTER, "/model qwen3:8b" + ENTER, "thanks" + ENTER, "bye" + ENTER
    )
    _, second, third = vision.chat_bodies
    assert (second["model"], images_sent(second), images_sent(third)) == ("qwen3:8b", 0, 0)
    before = second["messages"]
    assert third["messages"][: len(before)] == before
    assert len([line for line in chat.text.splitlines() if "cannot see images" in line]) == 1


def test_openai_model_that_cannot_see_gets_no_image_part_from_the_history(
    make_chat: Any, workspace: Path
) -> None:
    (workspace / "shot.png").write_bytes(PNG)
    fake = FakeOpenAI().start()
    try:
        fake.add_model("qwen3:8b", capabilities=["vision"])
        fake.add_model("coder", capabilities=["tool_use"])
        fake.enqueue(Answer("A chart."), Answer("ok"))
        chat = make_chat(choices=Choices(host=fake.url, api="openai"))
        chat.run("look @shot.png" + ENTER, "/model coder" + ENTER, "thanks" + ENTER)
        bodies = fake.chat_bodies
    finally:
        fake.stop()
    assert "image_url" in json.dumps(bodies[0]) and bodies[1]["model"] == "coder"
    assert "image_url" not in json.dumps(bodies[1])


# -- a conversation's images, together -----------------------------------------------------------


def test_images_past_the_conversation_cap_are_refused_so_the_session_stays_savable(
    make_chat: Any, vision: FakeOllama, workspace: Path
) -> None:
    """Each image may be 20 MB and is kept base64 in the session file, whose cap is 64 MB:
    three 18 MB screenshots made the chat unsavable. The third is refused when attached."""
    from cli.loop.images import MAX_CONVERSATION_IMAGE_BYTES

    big = PNG + bytes(18 * 1024 * 1024)
    for n in range(3):
        (workspace / f"s{n}.png").write_bytes(big)
    vision.enqueue(reply("a"), reply("b"), reply("c"))
    chat = make_chat("ollama:\n  model: gemma3:4b\n")
    # refused, the message waits in the input: Ctrl-C clears it, and Ctrl-D leaves
    chat.run("@s0.png" + ENTER, "@s1.png" + ENTER, "@s2.png" + ENTER, "\x03")
    assert "could not save the session" not in chat.text, chat.text[-600:]
    assert [images_sent(body) for body in vision.chat_bodies] == [1, 2]  # s2 was not sent
    refused = [line for line in chat.text.splitlines() if "@s2.png not attached" in line]
    assert len(refused) == 1 and "would come to 54 MB, more than the 40 MB" in refused[0]
    assert 2 * len(big) <= MAX_CONVERSATION_IMAGE_BYTES < 3 * len(big)
    assert "session saved as" in chat.text  # with both images: it can be resumed
    saved = chat.store.load(chat.session.session_name)
    assert sum(len(m.get("images") or []) for m in saved.messages) == 2


def test_run_refuses_attachments_past_the_conversation_cap(
    run_cli: RunCli, vision: FakeOllama, workspace: Path
) -> None:
    for n in range(3):
        (workspace / f"s{n}.png").write_bytes(PNG + bytes(18 * 1024 * 1024))
    args = ("run", "-m", "gemma3:4b", "-a", "s0.png", "-a", "s1.png", "-a", "s2.png", "what?")
    r = run_cli(*args)
    assert r.code == 2 and "-a s2.png: with it the conversation's images would come to" in r.stderr
    assert vision.chat_bodies == []
