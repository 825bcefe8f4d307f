"""Where run_command's commands and stdio MCP servers run: bubblewrap or Landlock."""
