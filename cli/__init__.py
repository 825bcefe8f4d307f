"""metona-agent: a local Ollama model working on your files through tool calls, safely."""

__version__ = "0.1.0"
