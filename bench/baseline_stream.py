"""The streaming baseline: POST one chat request with requests, read the NDJSON stream line by
line with json, write the content to a file.

    python bench/baseline_stream.py URL BODY_FILE OUT_FILE"""

from __future__ import annotations

import json
import sys

import requests


def main(url: str, body_file: str, out_file: str) -> None:
    with open(body_file, encoding="utf-8") as file:
        body = json.load(file)
    with (
        requests.post(url + "/api/chat", json=body, stream=True, timeout=60) as response,
        open(out_file, "w", encoding="utf-8") as out,
    ):
        response.raise_for_status()
        for line in response.iter_lines():
            if line:
                out.write(json.loads(line)["message"].get("content", ""))
        out.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
