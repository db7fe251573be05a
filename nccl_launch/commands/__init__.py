"""The subcommands, grouped by when a user reaches for them; `cli.py` registers them."""
