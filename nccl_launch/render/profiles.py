"""Profiles as text: `validate`'s verdicts, `show` as TOML, `diff`, the `list` table."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import tomli_w

from nccl_launch.escaping import escaped, toml_escaped
from nccl_launch.findings import WARNING_PREFIX, lines
from nccl_launch.profile.diff import ProfileDiff
from nccl_launch.profile.lint import accept_line
from nccl_launch.profile.overview import ListedProfile, ShownProfile, Validation
from nccl_launch.render.drift import quoted_value
from nccl_launch.secrets.masking import mask_argv, mask_command_line, mask_value


def _masked(table: dict[str, Any], path: str = "") -> dict[str, Any]:
    """`resolved` as people may see it: [env] values of secret names, credential flags in
    [server] args or any text, and passwords in URLs masked; [nccl] holds no secret."""
    masked: dict[str, Any] = {}
    for key, value in table.items():
        if path == "env" and isinstance(value, str):
            masked[key] = mask_value(key, value)
        elif path == "server" and key == "args" and isinstance(value, list):
            masked[key] = mask_argv([str(word) for word in value])
        elif isinstance(value, dict):
            masked[key] = _masked(value, f"{path}.{key}" if path else key)
        elif isinstance(value, str) and path != "nccl":  # an entrypoint may hold flags too
            masked[key] = mask_command_line(value)
        else:
            masked[key] = value
    return masked


def show_toml(profile: ShownProfile) -> str:
    """The resolved profile as TOML, under a comment naming its digest and its files; secrets
    are masked, and a comment says so; what is not printable is escaped (`toml_escaped`)."""
    chain = ", ".join(map(escaped, profile.chain))
    header = f"# {profile.profile} {profile.digest}\n# resolved from {chain}\n"
    masked = _masked(profile.resolved)
    if masked != profile.resolved:
        header += "# secrets masked as ***: --format json or an export format prints them\n"
    return header + toml_escaped(tomli_w.dumps(masked))


def _change_text(key: str, value: str | None) -> str:
    """A diff value: an argv (joined) with its credential flags masked, a secret file's path as
    it is (the secret stays in the file), else as `quoted_value`."""
    if key == "argv" and value is not None:
        return json.dumps(shlex.join(mask_argv(shlex.split(value))))
    if key.startswith("secret_files.") and value is not None:
        return json.dumps(value)
    return quoted_value(key, value)


def list_lines(rows: list[ListedProfile], search_path: list[tuple[Path, str]]) -> list[str]:
    """NAME, VERSION, DIGEST, SOURCE and PATH columns; an invalid file shows its first problem;
    `(shadowed)` after the source of a file no lookup by name picks. Paths and problems are
    printed with control characters escaped, so that a file name cannot forge a row."""
    if not rows:
        return [f"no profiles in {', '.join(str(folder) for folder, _ in search_path)}"]
    cells = [("NAME", "VERSION", "DIGEST", "SOURCE", "PATH")]
    for row in rows:
        source = row.source + (" (shadowed)" if row.shadowed else "")
        path = escaped(str(row.path))
        if row.problem is not None:
            cells.append(("(invalid)", "", escaped(row.problem.line()), source, path))
        else:
            cells.append((row.name, str(row.version), row.short_digest, source, path))
    widths = [max(len(cell[i]) for cell in cells) for i in range(4)]
    return [
        "  ".join(
            [*(text.ljust(width) for text, width in zip(cell[:4], widths, strict=True)), cell[4]]
        )
        for cell in cells
    ]


def diff_lines(diff: ProfileDiff) -> list[str]:
    """A header per profile, `~` changed, `-` only in the old one, `+` only in the new, a count
    naming the changes the digest does not cover."""
    lines = []
    for sign, side in (("---", diff.old), ("+++", diff.new)):
        lines.append(f"{sign} {side.label} ({side.short_digest}) {side.path}")
    width = max((len(key) for key, _, _ in diff.changes), default=0)
    for key, old, new in diff.changes:
        if old is None:
            lines.append(f"  + {key.ljust(width)}  {_change_text(key, new)}")
        elif new is None:
            lines.append(f"  - {key.ljust(width)}  {_change_text(key, old)}")
        else:
            old_text, new_text = _change_text(key, old), _change_text(key, new)
            lines.append(f"  ~ {key.ljust(width)}  {old_text} -> {new_text}")
    count, outside = len(diff.changes), len(diff.outside_digest)
    total = f"{count} difference{'' if count == 1 else 's'}"
    if outside:
        total += f", {outside} outside the digest ({', '.join(diff.outside_digest)})"
    return [*lines, total]


def validate_lines(validation: Validation) -> tuple[list[str], list[str]]:
    """What `validate` prints: an ok line per valid file (stdout); problems, warnings (stderr);
    unescaped, as every list of lines for people until `echo_lines` prints it."""
    out: list[str] = []
    err: list[str] = []
    for result in validation.results:
        if result.problems:
            err += lines(result.problems)
            continue
        err += [f"{WARNING_PREFIX}{result.path}: {accept_line(note)}" for note in result.warnings]
        accepted = "".join(f'; accepts "{id_}"' for id_ in result.acknowledged)
        baseline = result.baseline
        reaches = "" if baseline is None else f", baseline {baseline.decode_tok_s:g} tok/s"
        out.append(f"{result.path}: ok ({result.label}, {result.short_digest}{reaches}{accepted})")
    count, invalid = len(validation.results), validation.invalid
    if count > 1:
        out.append(f"{count - invalid} valid, {invalid} invalid")
    return out, err
