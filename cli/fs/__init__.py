"""File-system building blocks below the tools: path resolution and reading our own files back."""
