"""Terminal front ends: the trace of `agent run` and the `agent chat` REPL."""
