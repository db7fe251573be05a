"""`python -m sglang.launch_server` for tests: record argv, env and cwd like child.py."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).parents[2] / "child.py"), run_name="__main__")
