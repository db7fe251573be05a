"""What one TAB costs: completion requests through the console script beside
`python -c "import click"` (docs/performance.md#shell-completion).

Run: .venv/bin/python benchmarks/completion.py [--rounds N]

Each request is what bash's completion script runs for one TAB: the `nccl-launch` next to this
Python with _NCCL_LAUNCH_COMPLETE=bash_complete and COMP_WORDS / COMP_CWORD, in a folder whose
`profiles/` holds the shipped profiles. Interleaved and paired as benchmarks/bench.py measures;
exit 1 when a request costs more than GUARD times the import of click (a TAB that lags).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench import NCCL_LAUNCH, PYTHON, compare, describe, setup

GUARD = 2.0
SHIPPED = Path(__file__).parent.parent / "profiles"
REFERENCE = 'python -c "import click"'
SOURCE = "the bash script (bash_source)"
# What is typed before the TAB, as bash's COMP_WORDS and COMP_CWORD pass it.
REQUESTS = {
    "nccl-launch <TAB>": ("nccl-launch ", 1),
    "nccl-launch run <TAB>": ("nccl-launch run ", 2),
    "nccl-launch run kimi<TAB>": ("nccl-launch run kimi", 2),
    "nccl-launch bench --<TAB>": ("nccl-launch bench --", 2),
    "nccl-launch check kimi<TAB>": ("nccl-launch check kimi", 2),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    args = parser.parse_args()
    describe()
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        env = setup(cwd)
        for profile in SHIPPED.glob("*.toml"):
            shutil.copy(profile, cwd / "profiles")
        group = {REFERENCE: [PYTHON, "-c", "import click"]}
        # What `eval "$(...)"` in ~/.bashrc costs every new shell, beside what a TAB costs.
        group[SOURCE] = ["env", "_NCCL_LAUNCH_COMPLETE=bash_source", NCCL_LAUNCH]
        for name, (words, index) in REQUESTS.items():
            request = ["_NCCL_LAUNCH_COMPLETE=bash_complete", f"COMP_CWORD={index}"]
            group[name] = ["env", *request, f"COMP_WORDS={words}", NCCL_LAUNCH]
        ratios = compare("one TAB", group, REFERENCE, args.rounds, env, cwd)
    worst = max(REQUESTS, key=ratios.__getitem__)
    verdict = "within" if ratios[worst] <= GUARD else "OVER"
    print(f"  guard: the slowest, {worst}, is {ratios[worst]:.2f}x, {verdict} the {GUARD:g}x")
    if ratios[worst] > GUARD:
        sys.exit(f"completion: {worst} costs {ratios[worst]:.2f}x {REFERENCE}, over {GUARD:g}x")


if __name__ == "__main__":
    main()
