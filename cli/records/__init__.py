"""What the agent keeps of its work: the audit log and saved sessions."""
