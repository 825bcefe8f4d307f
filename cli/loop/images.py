"""Images for vision models: `@shot.png` in chat, `agent run -a FILE`.

An image is read as read_file reads a file — the same policy decision (secrets, blocked and
allowed dirs; a person asked where read_file would ask), the same read gate, the same audit
record — but whole, up to MAX_IMAGE_BYTES, and only when it is one (its first bytes say PNG,
JPEG, GIF, WebP or BMP). It travels on the user message as Ollama takes it: `images`, a
list of base64 strings; the OpenAI-compatible dialect sends each as an `image_url` content
part holding a data URL (cli/backends/openai_dialect.py). Only a model that reports the
`vision` capability is sent one; a server that does not say what a model can do (most
OpenAI-compatible ones) is sent it, and the caller says so. A model that cannot see (after
`/model`, or a session resumed with another model) is sent the conversation without its
images (without_images), said once.
"""

from __future__ import annotations

import base64
import html
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cli.backends.messages import Message, ModelInfo, ToolCall
from cli.backends.mime import image_type
from cli.errors import ToolError
from cli.fs import reading
from cli.loop.events import ToolDecided, ToolResult
from cli.tools import gate

if TYPE_CHECKING:
    from cli.loop.agent import Agent

# Ollama takes a request of any size; OpenAI's own API takes 20 MB an image, and a local
# vision model scales every image down to a few hundred tokens anyway. Sent again with every
# request of the conversation (and kept in its session file), so the cap is generous but firm.
MAX_IMAGE_BYTES = 20 * 1024 * 1024
# All the images of one conversation, together: it is saved with them (base64, a third more)
# in a session file of at most MAX_SESSION_BYTES (64 MB), which must leave room for the text.
# Two images of the largest size fit; an image past it is refused when attached.
MAX_CONVERSATION_IMAGE_BYTES = 2 * MAX_IMAGE_BYTES
SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")


def is_image_name(path: str) -> bool:
    """A name that says image: what `@path` and `-a` read as one (the bytes must agree)."""
    return path.lower().endswith(SUFFIXES)


def sees_images(info: ModelInfo) -> bool | None:
    """True: the model reports `vision`; False: the server says what it can do, and that is
    not; None: the server does not say."""
    if info.capabilities_assumed:
        return None
    return "vision" in info.capabilities


def without_images(messages: list[Message]) -> list[Message]:
    """The messages as a model that cannot see is sent them: each one's `images` left out
    (the conversation keeps them, for a model that can). The same every time, so that the
    requests to that model stay append-only (cli/loop/window.py)."""
    return [{k: v for k, v in m.items() if k != "images"} if "images" in m else m for m in messages]


def image_bytes(messages: list[Message]) -> int:
    """What the images the messages carry weigh (decoded, as MAX_* count them)."""
    encoded = sum(len(i) for m in messages for i in m.get("images") or [] if isinstance(i, str))
    return encoded * 3 // 4


def too_many_images(held: int, image: Image) -> str:
    """Why `image` is refused, with `held` bytes of images in the conversation already;
    "" if it may join."""
    if held + image.size <= MAX_CONVERSATION_IMAGE_BYTES:
        return ""
    return (
        f"with it the conversation's images would come to {_mb(held + image.size)}, more than "
        f"the {_mb(MAX_CONVERSATION_IMAGE_BYTES)} one may hold (its session could not be "
        "saved)"
    )


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")


def blind_notice(model: str) -> str:
    return (
        f"model '{model}' cannot see images: the conversation's images are left out of what "
        "it is sent (they are kept; a model that can see gets them)"
    )


def cannot_see(model: str) -> str:
    return (
        f"model '{model}' cannot see images (it does not report the vision capability; "
        "`agent models` shows which do)"
    )


def unknown_sight(model: str) -> str:
    return f"the server does not say whether '{model}' can see images: sending them anyway"


@dataclass(frozen=True)
class Image:
    path: str  # as the user is shown it
    mime: str
    size: int  # bytes
    data: str  # base64


@dataclass(frozen=True)
class Attached:
    """What became of one image: `image`, or `error` (one line, naming the file)."""

    image: Image | None
    error: str
    record: ToolResult  # for the audit log, as a read_file of the file


def read_image(agent: Agent, path: str) -> Attached:
    """The image at `path` as read_file would read it: decided by the same policy and
    approver, read through the same gate, at most MAX_IMAGE_BYTES."""
    call = ToolCall("read_file", {"path": path, "encoding": "base64"})
    started = time.monotonic()
    decided = agent.decide(call)
    image, error = None, ""
    if not decided.allowed:
        error = decided.reason
    else:
        try:
            image = _read(agent, decided, path)
        except ToolError as exc:
            error = str(exc)
    if image is None:
        result: dict[str, object] = {"success": False, "error": error}
    else:
        result = {"success": True, "path": image.path, "size": image.size, "image": image.mime}
    record = ToolResult(call, result, time.monotonic() - started, decided)
    return Attached(image, error, record)


def _read(agent: Agent, decided: ToolDecided, path: str) -> Image:
    checked = decided.decision.paths["path"]
    ctx = agent.context.started("read_file")
    real, shown = checked.real, ctx.show(checked.real)
    reads = gate.Reads(ctx, MAX_IMAGE_BYTES, under=real, asked=checked.file)
    file = reading.read(ctx.target(real, checked.file), reads.max_bytes, reads.hook(real))
    mime = image_type(file.data)
    if mime is None:
        raise ToolError(f"{shown} is not an image (PNG, JPEG, GIF, WebP or BMP)")
    encoded = base64.b64encode(file.data).decode("ascii")
    return Image(shown, mime, len(file.data), encoded)


def attribute(value: str) -> str:
    """`value` as it may stand between an attribute's quotes in what the model is sent: a
    name holding `"`, `<` or a newline cannot end the attribute or the tag (a file name is
    the file system's, not ours)."""
    return html.escape(value, quote=True).replace("\n", "&#10;").replace("\r", "&#13;")


def image_note(images: list[Image]) -> str:
    """What the message's text says of its images, so the model can name them."""
    return "\n\n".join(f'<image path="{attribute(image.path)}" />' for image in images)
