"""Profiles: the TOML format, finding and resolving files, what they declare, comparing, new."""
