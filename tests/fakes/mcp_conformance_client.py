"""The client under test for the official MCP conformance suite (client mode):

    conformance client --command "python tests/fakes/mcp_conformance_client.py" --scenario NAME

The suite appends the server's URL to the command and names the scenario in
$MCP_CONFORMANCE_SCENARIO. This goes through the agent's own MCP layer (cli/mcp/servers.py,
as `agent run` does): start the server's session, list its tools, call the scenario's tool,
stop. Exit 0 when the calls succeeded; 1 and one line on stderr otherwise.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cli.config.settings import McpServerConfig
from cli.mcp.servers import McpServers

CALLS = {  # scenario → (tool, arguments)
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
}


def main() -> int:
    url, scenario = sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    with tempfile.TemporaryDirectory() as logs:
        servers = McpServers(
            {"conformance": McpServerConfig(url=url, timeout=20, startup_timeout=20)},
            environ=dict(os.environ),
            cwd=os.getcwd(),
            log_dir=Path(logs),
        )
        servers.start()
        try:
            failed = servers.wait()
            if failed:
                print(failed[0], file=sys.stderr)
                return 1
            if scenario in CALLS:
                tool, arguments = CALLS[scenario]
                result = servers.call(f"mcp__conformance__{tool}", arguments)
                print(result)
                if not result.get("success"):
                    print(f"{tool}: {result.get('error')}", file=sys.stderr)
                    return 1
        finally:
            servers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
