"""What an image's first bytes say it is: the MIME type a message's image travels under (a
data URL in the OpenAI-compatible dialect) and what `@shot.png` and `-a` check a file is
(cli/loop/images.py)."""

from __future__ import annotations

import base64


def image_type(data: bytes) -> str | None:
    """The MIME type the first bytes say, or None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"BM"):
        return "image/bmp"
    return None


def encoded_type(encoded: str) -> str:
    """The MIME type of a base64 image (as a message's `images` hold them), for a data URL;
    PNG when its first bytes say nothing we know."""
    try:
        head = base64.b64decode(encoded[:24] + "=" * (-len(encoded[:24]) % 4))
    except ValueError:
        return "image/png"
    return image_type(head) or "image/png"
