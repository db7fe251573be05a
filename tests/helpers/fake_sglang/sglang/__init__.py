"""A stand-in for the `sglang` package, so `python -m sglang.launch_server` runs here.

Only `launch_server` exists: it records what it received (see tests/helpers/child.py).
"""
