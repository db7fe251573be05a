"""Turning what exists into a profile: a start script (a small shell reader) or a running server."""
