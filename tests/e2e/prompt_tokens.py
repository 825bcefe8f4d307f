"""Run by the e2e venv's Python (it imports llama_cpp): each chat request a task sent, rendered
into the prompt llama-cpp-python's server builds from it and counted in the model's own
tokens (tests/e2e/server_work.py reads what this prints).

stdin: {"model": "<.gguf path>", "bodies": [<request body>, ...]}
stdout: [{"tokens": N, "blocks": [[key, n], ...], "evaluated_by_prefix": E}, ...], one entry
a body: the prompt's tokens; each message's own tokens (key: a hash of its rendered text, so
that the same message rendered the same way is the same block); and what a server that kept
only the previous prompt would evaluate (everything after the longest common prefix).

The prompt is the one the `chatml-function-calling` chat format renders (the format
tests/e2e/server.py starts the server with), got by calling that handler with a stand-in for
the model that keeps the prompt it is given instead of completing it. Its template renders
each message on its own (a role header, the content or the function calls, the end marker;
the tool definitions inside the system message; tool results not at all), so a message's
share of the prompt is that message rendered alone, less the generation prompt at the end.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from llama_cpp import Llama, llama_chat_format

GENERATION_PROMPT = "<|im_start|>assistant\n"


class _Prompt(Exception):
    def __init__(self, prompt: str) -> None:
        super().__init__("captured")
        self.prompt = prompt


class _Capture:
    """What the chat handler is given as the model: it raises with the first prompt."""

    verbose = False

    def create_completion(self, prompt: str = "", **_: Any) -> Any:
        raise _Prompt(prompt)


def render(body: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    try:
        llama_chat_format.chatml_function_calling(
            llama=_Capture(),
            messages=messages,
            tools=body.get("tools"),
            tool_choice=body.get("tool_choice"),
        )
    except _Prompt as captured:
        return captured.prompt
    raise RuntimeError("the chat handler asked for no completion")


def main() -> int:
    given = json.load(sys.stdin)
    vocab = Llama(model_path=given["model"], vocab_only=True, verbose=False)

    def tokens(text: str, bos: bool) -> list[int]:
        return list(vocab.tokenize(text.encode("utf-8"), add_bos=bos, special=True))

    counted: list[dict[str, Any]] = []
    previous: list[int] = []
    for body in given["bodies"]:
        messages = list(body.get("messages") or [])
        prompt = tokens(render(body, messages), True)
        blocks = []
        for message in messages:
            text = render(body, [message])
            if text.endswith(GENERATION_PROMPT):
                text = text[: -len(GENERATION_PROMPT)]
            key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
            blocks.append([key, len(tokens(text, False)) if text else 0])
        common = 0
        for a, b in zip(previous, prompt, strict=False):
            if a != b:
                break
            common += 1
        counted.append(
            {"tokens": len(prompt), "blocks": blocks, "evaluated_by_prefix": len(prompt) - common}
        )
        previous = prompt
    json.dump(counted, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
