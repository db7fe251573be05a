"""Writing files all at once: a reader sees the old content or the new, never half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str, *, replace: bool) -> None:
    """Write `text` to `path` via a temporary file; without `replace` never touch an existing one.

    Raises FileExistsError when `replace` is false and the file exists (even if it appears
    while writing: the final step is a hard link, which fails rather than overwrite).
    """
    if not replace and path.exists():
        raise FileExistsError(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary = Path(handle.name)
    try:
        temporary.chmod(0o644)  # readable by node_exporter and other users, like a plain write
        if replace:
            temporary.replace(path)
        else:
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
