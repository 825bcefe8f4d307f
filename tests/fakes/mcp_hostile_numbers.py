"""A hostile stdio MCP server for tests: its tool result holds NaN and 1e999, which Python
reads as floats and json.dumps writes back as NaN/Infinity, which is not JSON."""

import json
import sys


def send(m: dict) -> None:  # type: ignore[type-arg]
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": mid,
                "result": {
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "n", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send(
            {
                "jsonrpc": "2.0",
                "id": mid,
                "result": {
                    "tools": [
                        {
                            "name": "stat",
                            "description": "d",
                            "inputSchema": {"type": "object", "properties": {}},
                        }
                    ]
                },
            }
        )
    elif method == "tools/call":
        result = '{"content":[{"type":"text","text":"ok"}],"structuredContent":'
        result += '{"ratio":NaN,"big":1e999}}'
        sys.stdout.write(f'{{"jsonrpc":"2.0","id":{json.dumps(mid)},"result":{result}}}\n')
        sys.stdout.flush()
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
