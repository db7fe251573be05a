"""A stand-in for the server process: records what it really received, then maybe waits.

Writes {"pid", "argv", "cwd", "env"} as JSON to $CHILD_OUT. With CHILD_WAIT set it then waits for
SIGTERM and exits with code 7, so a test can prove signals and exit codes reach it.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

out = Path(os.environ["CHILD_OUT"])
record = {"pid": os.getpid(), "argv": sys.argv, "cwd": str(Path.cwd()), "env": dict(os.environ)}
partial = out.with_suffix(".partial")
partial.write_text(json.dumps(record))
partial.replace(out)

if os.environ.get("CHILD_WAIT"):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)
