"""The `agent` subcommands, one module per command group."""
