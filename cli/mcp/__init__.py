"""MCP servers as tool sources, under the same policy as our own tools (docs/mcp.md): a
small synchronous client (protocol.py, transport.py, client.py), the servers of a session
(servers.py) and the import of other tools' JSON configs (importing.py)."""
