"""What hostile TOML costs: files of up to the 1 MiB cap read by the nesting scan alone, by
the guarded parse (the scan, then tomllib) and by bare tomllib, and `nccl-launch validate` of
each as a whole (docs/performance.md#hostile-toml). Not a test: CI times nothing.

Run: .venv/bin/python benchmarks/toml_depth.py [--rounds N] [--timeout SECONDS]

Each figure is a fresh Python (its wall time and max RSS), so one file's memory is not
another's: the least time and the most memory of --rounds (default 3). Bare tomllib is given
--timeout seconds (default 20) and shown as `> N s` past it. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from bench import NCCL_LAUNCH, PYTHON, describe

from nccl_launch.files.reading import MAX_BYTES

HEAD = 'schema = 1\nname = "hostile"\nversion = 1\n\n[env]\n'


def _filled(line: str) -> str:
    """`line` with a counter, repeated to the cap."""
    lines, size, index = [], len(HEAD), 0
    while size + len(line) + 8 < MAX_BYTES:
        lines.append(line.format(index))
        size += len(lines[-1])
        index += 1
    return "".join(lines)


# Each a profile's tail: refused ones first, then what the guard lets through at the cap.
FILES = {
    "one key of 20,000 parts (40 KB)": "a" + ".a" * 19_999 + " = 1\n",
    "one key of 1 MiB of parts": "a" + ".a" * (MAX_BYTES // 2 - 40) + " = 1\n",
    "a [table] name of 1 MiB of parts": "[" + "a." * (MAX_BYTES // 2 - 40) + "a]\n",
    "arrays in arrays, 1 MiB": "a = " + "[" * (MAX_BYTES - 100) + "\n",
    "inline tables in inline tables, 1 MiB": "a = " + "{a=" * (MAX_BYTES // 3 - 40) + "\n",
    "unterminated strings, 1 MiB": 'a = """' + '\\"""' * (MAX_BYTES // 4 - 40) + "\n",
    "keys of 16 parts (the limit), to the cap": _filled("k{}" + ".a" * 14 + " = 1\n"),
    "flat keys, to the cap": _filled("k{} = 1\n"),
    "strings of dots and brackets, to the cap": _filled('k{} = "a.b.c.d[[[{{{{"\n'),
}

PARSE = (
    "import resource, sys, time\n"
    "IMPORT\n"
    "text = open(sys.argv[1], encoding='utf-8').read()\n"
    "start = time.perf_counter()\n"
    "try:\n"
    "    PARSE(text)\n"
    "except Exception as error:\n"
    "    outcome = type(error).__name__\n"
    "else:\n"
    "    outcome = 'ok'\n"
    "took = time.perf_counter() - start\n"
    "print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, outcome)\n"
)
OURS = "from nccl_launch.files.toml_text import check_nesting, parse_toml"
SCRIPTS = {
    "scan alone": PARSE.replace("IMPORT", OURS).replace("PARSE", "check_nesting"),
    "guarded parse": PARSE.replace("IMPORT", OURS).replace("PARSE", "parse_toml"),
    "bare tomllib": PARSE.replace("IMPORT", "import tomllib").replace("PARSE", "tomllib.loads"),
}
# `nccl-launch validate FILE` as the only child of a fresh Python: its time, RSS, exit code.
VALIDATE = (
    "import resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], capture_output=True).returncode\n"
    "took = time.perf_counter() - start\n"
    "print(took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, f'exit-{code}')\n"
)


def measure(argv: list[str], rounds: int, timeout: float) -> str:
    """`s, MiB, outcome` of `argv` (which prints them), the least time and the most memory of
    `rounds`; `> N s` past `timeout`."""
    runs = []
    for _ in range(rounds):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"> {timeout:g} s"
        took, rss, outcome = done.stdout.split()
        runs.append((float(took), int(rss) // 1024, outcome.replace("-", " ")))
    return f"{min(run[0] for run in runs):.3f} s, {max(run[1] for run in runs)} MiB, {runs[0][2]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds for each run")
    args = parser.parse_args()
    describe()
    print(f"\n| file | bytes | {' | '.join(SCRIPTS)} | validate |")
    print("|---|---|" + "---|" * (len(SCRIPTS) + 1))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hostile.toml"
        for name, tail in FILES.items():
            path.write_text(HEAD + tail, encoding="utf-8")
            cells = [
                measure([PYTHON, "-c", script, str(path)], args.rounds, args.timeout)
                for script in SCRIPTS.values()
            ]
            argv = [PYTHON, "-c", VALIDATE, NCCL_LAUNCH, "validate", str(path)]
            cells.append(measure(argv, args.rounds, args.timeout))
            size = path.stat().st_size
            print(f"| {name} | {size:,} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
