"""The change journal and undo/redo."""
