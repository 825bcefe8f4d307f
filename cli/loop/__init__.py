"""The agent loop: messages and tools in, typed events out. Never prints."""
