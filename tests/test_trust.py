"""Trust, as a table: what root (and a user) reads, writes through and starts, and what it
refuses, on one host laid out as a red team would lay it out beside two users (uid 65534 and
uid 1000) and a Kubernetes pod would (a configMap volume the kubelet updates by swapping
`..data`).

The host is real: a mount namespace of the test's own (`unshare --mount`) whose /tmp is a
fresh tmpfs, with tmpfs volumes remounted read-only and read-only binds; the other user acts
through `setpriv`. Nothing outside the namespace changes, and the host's
fs.protected_symlinks is never read nor set: the rule refuses another user's symlink by
itself, whatever that setting is. Each row of RULES runs in order in that namespace (a row
may change what a later row sees, as the kubelet's swap does), and each is a test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Isolation, console_script

OTHER, THIRD = 65534, 1000  # nobody, and a second user

P = 'schema = 1\\nname = "p"\\nversion = 1\\n[nccl]\\nPROTO = "LL"\\n'
KIMI = """schema = 1
name = "kimi"
version = 1
env_files = ["kimi.env"]
secret_files = { API_KEY = "api_key" }
[nccl]
PROTO = "LL"
[server]
python = "/usr/bin/python3"
model_path = "/models/m"
args = ["--api-key", "${API_KEY}"]
"""
# A profile whose key is a file another user may make: /tmp/key does not exist at first.
PLANTED = """schema = 1
name = "planted"
version = 1
secret_files = { API_KEY = "%s" }
[server]
python = "/usr/bin/python3"
model_path = "/models/m"
args = ["--api-key", "${API_KEY}"]
"""

# The host: root's own folder /tmp/root (0755); two configMap volumes as the kubelet lays
# them out (/tmp/cm read-only, /tmp/cm-rw left writable); read-only binds of files others may
# write at their source; other users' symlinks in the sticky /tmp; state homes.
FIXTURE = r"""
set -e
exec 9</tmp  # the host's /tmp, for what of it the tool runs from (a clone in /tmp)
mount -t tmpfs -o mode=1777 tmpfs /tmp
for kept in $KEEP; do  # bound back where it was, through the descriptor: it is hidden now
    mkdir -p "$kept"
    mount --no-canonicalize --bind "/proc/$$/fd/9${kept#/tmp}" "$kept"
done
exec 9<&-
cd /tmp
mkdir -p "$HOME"
mkdir -m 0755 /tmp/root /tmp/cm-src /tmp/src /tmp/bound /tmp/cm /tmp/cm-rw
printf "$P" > /tmp/root/p.toml
printf 'sk-root-only\n' > /tmp/root/key && chmod 0600 /tmp/root/key
printf "$PLANTED" /tmp/key > /tmp/root/planted.toml
printf "$PLANTED" /tmp/bound/key > /tmp/root/bound-key.toml
printf '%s' "$KIMI" > /tmp/cm-src/kimi.toml
printf 'OMP_NUM_THREADS=8\n' > /tmp/cm-src/kimi.env
printf 'sk-from-the-secret\n' > /tmp/cm-src/api_key

fill() {  # $1 volume, $2 its new timestamped folder, as the kubelet writes it
    mkdir -m 0755 "$1/$2"
    cp /tmp/cm-src/* "$1/$2/"
    chmod 0644 "$1/$2"/*
}
volume() {  # a configMap volume at $1: the files symlinks through ..data, the folder 0777
    mount -t tmpfs -o size=256k,mode=0777 tmpfs "$1"
    fill "$1" "$2"
    ln -s "$2" "$1/..data"
    for file in /tmp/cm-src/*; do ln -s "..data/${file##*/}" "$1/${file##*/}"; done
}
swap() {  # the kubelet's update of volume $1: a new folder, ..data swapped, the old removed
    mount -o remount,rw "$1"
    old=$(readlink "$1/..data")
    fill "$1" "$2"
    ln -s "$2" "$1/..data_tmp"
    mv -T "$1/..data_tmp" "$1/..data"
    rm -rf "${1:?}/$old"
    mount -o remount,ro "$1"
}
volume /tmp/cm ..2026_12_07_19_40_00.000000001
mount -o remount,ro /tmp/cm
volume /tmp/cm-rw ..2026_12_07_19_40_00.000000001

bind_ro() {  # $1, written where it comes from, seen read-only at $2
    touch "$2"
    mount --bind "$1" "$2"
    mount -o remount,bind,ro "$2"
}
printf "$P" > /tmp/src/open.toml && chmod 0666 /tmp/src/open.toml
printf "$P" > /tmp/src/theirs.toml && chown $OTHER /tmp/src/theirs.toml
printf 'sk-anyone-wrote\n' > /tmp/src/key && chmod 0666 /tmp/src/key
for name in open.toml theirs.toml key; do bind_ro "/tmp/src/$name" "/tmp/bound/$name"; done

# Another user's symlinks in a folder root owns (0755, not sticky): the kernel follows them
# whatever fs.protected_symlinks says, so only the rule refuses them.
mkdir -m 0755 /tmp/links /tmp/root/state /tmp/root/mine
mkdir -m 0755 /tmp/their-folder && cp /tmp/root/p.toml /tmp/their-folder/
chown $OTHER /tmp/their-folder
ln -s /tmp/root/p.toml /tmp/links/theirs.toml
ln -s /tmp/root /tmp/links/their-folder
ln -s /tmp/root/state /tmp/links/state-theirs
chown -h $OTHER /tmp/links/*
ln -s /tmp/root/p.toml /tmp/mine.toml
ln -s /tmp/root/mine /tmp/state-mine
chmod 0700 /tmp/root/state /tmp/root/mine
mkdir -m 0700 /tmp/other-state /tmp/other-state/nccl-launch /tmp/other-own
mkdir -m 0777 /tmp/other-state/nccl-launch/nccl-debug
chown -R $OTHER /tmp/other-state /tmp/other-own
chown $THIRD /tmp/other-state/nccl-launch/nccl-debug
set +e
"""


@dataclass(frozen=True)
class Rule:
    """One row: what is run (`command`, a shell line: $CLI the console script, $AS_OTHER
    setpriv as uid 65534), its exit code, what its output says and what it never holds."""

    name: str
    command: str
    exit: int
    said: str
    unsaid: str = "\x00"


DRY = "$CLI run --dry-run"
# What NCCL is told, as the server's environment has it.
NCCL_DEBUG = (
    "$CLI run --nccl-debug /tmp/root/p.toml -- "
    "sh -c 'echo NCCL_DEBUG_FILE=${NCCL_DEBUG_FILE-unset}'"
)
STATE_FIX = "set XDG_STATE_HOME to a folder of your own"
UNIT_LINES = "grep -E '^(EnvironmentFile|ExecStart)=' /tmp/unit"
# The unit's own start line, as systemd would run it, but printing what it would start.
UNIT_START = "eval \"$(sed -n 's/^ExecStart=//p' /tmp/unit) --dry-run\""
STAMP = "..2026_"  # the kubelet's timestamped folder, which its next update removes

RULES = [
    # A read-only mount excuses the write bits of a folder root owns (the configMap's 0777
    # volume, where nothing can be renamed), never those of a file, nor its owner.
    Rule("configmap-read-only", f"{DRY} /tmp/cm/kimi.toml", 0, "profile kimi@1", STAMP),
    Rule(
        "configmap-writable",
        f"{DRY} /tmp/cm-rw/kimi.toml",
        2,
        "nccl-launch: profile /tmp/cm-rw/kimi.toml: its directory /tmp/cm-rw (uid 0, mode "
        "0777) lets other users replace it; chown root and chmod go-w, or move it out of reach "
        "of other users\n",
    ),
    Rule(
        "read-only-bind-of-a-0666-file",
        f"{DRY} /tmp/bound/open.toml -- true",
        2,
        "nccl-launch: profile /tmp/bound/open.toml: writable by group or others (mode 0666); "
        "chown root and chmod go-w, or move it out of reach of other users\n",
    ),
    Rule(
        "read-only-bind-of-another-users-file",
        f"{DRY} /tmp/bound/theirs.toml -- true",
        2,
        f"nccl-launch: profile /tmp/bound/theirs.toml: owned by uid {OTHER}, not root",
    ),
    Rule(
        "read-only-bind-of-a-0666-secret-file",
        f"{DRY} /tmp/root/bound-key.toml",
        3,
        "secret_files: API_KEY: secret file /tmp/bound/key: writable by group or others "
        "(mode 0666)",
        unsaid="sk-anyone-wrote",
    ),
    # No path through another user's symlink, nor a folder another user may write.
    Rule("roots-own-symlink", f"{DRY} /tmp/mine.toml -- true", 0, "profile p@1"),
    Rule(
        "another-users-symlink",
        f"{DRY} /tmp/links/theirs.toml -- true",
        2,
        f"nccl-launch: profile /tmp/links/theirs.toml: the symlink /tmp/links/theirs.toml (uid "
        f"{OTHER}) on its way is another user's, who may point it elsewhere; name the file "
        "itself\n",
    ),
    Rule(
        "another-users-symlink-to-a-folder",
        f"{DRY} /tmp/links/their-folder/p.toml -- true",
        2,
        f"nccl-launch: profile /tmp/links/their-folder/p.toml: the symlink /tmp/links/their-folder"
        f" (uid {OTHER}) on its way is another user's, who may point it elsewhere; name the "
        "file itself\n",
    ),
    Rule(
        "another-users-folder",
        f"{DRY} /tmp/their-folder/p.toml -- true",
        2,
        f"nccl-launch: profile /tmp/their-folder/p.toml: its directory /tmp/their-folder (uid "
        f"{OTHER}, mode 0755) lets other users replace it",
    ),
    Rule(
        "secret-file-missing",
        f"{DRY} /tmp/root/planted.toml",
        3,
        "secret_files: API_KEY: secret file /tmp/key: cannot read: No such file or directory",
    ),
    Rule(
        "secret-file-planted-by-another-user",
        f"$AS_OTHER ln -s /tmp/root/key /tmp/key && {DRY} /tmp/root/planted.toml",
        3,
        # In the sticky /tmp, where fs.protected_symlinks=1 has the kernel refuse it first.
        "secret_files: API_KEY: secret file /tmp/key: ",
        unsaid="sk-root-only",
    ),
    # NCCL writes where run --nccl-debug made the run's folder, by its resolved path.
    Rule(
        "state-home-through-another-users-symlink",
        f"XDG_STATE_HOME=/tmp/links/state-theirs {NCCL_DEBUG} "
        '&& test -z "$(ls -A /tmp/root/state)"',
        0,
        "nccl-launch: warning: NCCL's log folder /tmp/links/state-theirs/nccl-launch/nccl-debug/",
        unsaid="NCCL_DEBUG_FILE=/",
    ),
    Rule(
        "state-home-through-roots-own-symlink",
        f"XDG_STATE_HOME=/tmp/state-mine {NCCL_DEBUG}",
        0,
        "NCCL_DEBUG_FILE=/tmp/root/mine/nccl-launch/nccl-debug/",
        unsaid="NCCL_DEBUG_FILE=/tmp/state-mine",
    ),
    Rule(
        "user-meets-another-users-nccl-debug-folder",
        f"XDG_STATE_HOME=/tmp/other-state $AS_OTHER {NCCL_DEBUG}",
        0,
        f"/tmp/other-state/nccl-launch/nccl-debug (uid {THIRD}, mode 0777) is not uid "
        f"{OTHER}'s alone, and uid {OTHER} writes nothing in another user's folder; "
        f"{STATE_FIX}; NCCL's log goes to the server's output",
        unsaid="NCCL_DEBUG_FILE=/",
    ),
    Rule(
        "user-in-a-state-home-of-its-own",
        f"XDG_STATE_HOME=/tmp/other-own $AS_OTHER {NCCL_DEBUG}",
        0,
        "NCCL_DEBUG_FILE=/tmp/other-own/nccl-launch/nccl-debug/",
    ),
    # A unit names the profile as the user gave it, never the kubelet's timestamped folder,
    # and judges what it resolves to at every start.
    Rule(
        "unit-names-the-path-given",
        f"$CLI systemd /tmp/cm/kimi.toml > /tmp/unit && {UNIT_LINES}",
        0,
        "EnvironmentFile=/tmp/cm/kimi.env\nExecStart=",
        unsaid=STAMP,
    ),
    Rule(
        "unit-starts-after-a-swap-of-the-same-content",
        f"swap /tmp/cm ..2026_12_07_19_50_00.000000002 && {UNIT_START}",
        0,
        # The secret file fills only the args, so it is no env change; the env file is one.
        "(env file /tmp/cm/kimi.env)",
        unsaid=STAMP,
    ),
    Rule(
        "unit-refuses-new-content-by-its-digest",
        'sed -i \'s/PROTO = "LL"/PROTO = "Simple"/\' /tmp/cm-src/kimi.toml && '
        f"swap /tmp/cm ..2026_12_07_20_00_00.000000003 && {UNIT_START}",
        1,
        "nccl-launch: profile kimi@1 (/tmp/cm/kimi.toml) is sha256:",
        unsaid=STAMP,
    ),
    Rule(
        "write-baseline-on-a-configmap",
        "$CLI bench /tmp/cm/kimi.toml --url http://127.0.0.1:1 --write-baseline",
        3,
        "nccl-launch: --write-baseline: /tmp/cm/kimi.toml: on a read-only mount; bench writes "
        "nothing there: change the file where it comes from, or drop --write-baseline\n",
        unsaid=STAMP,
    ),
]


def _under_tmp() -> list[str]:
    """What the tool runs from that lies under /tmp (a clone, its venv, a Python), which the
    fixture's own /tmp would hide."""
    tmp = Path("/tmp")
    ran_from = {Path(__file__).resolve().parents[1], Path(sys.prefix), Path(sys.base_prefix)}
    return sorted(str(path) for path in ran_from if path.is_relative_to(tmp) and path != tmp)


def _script() -> str:
    """FIXTURE, then each rule between markers that say its name and its exit code."""
    steps = [
        f"printf '=== %s\\n' {rule.name}\n({rule.command}) </dev/null 2>&1\n"
        "printf '=== exit %s\\n' $?"
        for rule in RULES
    ]
    return FIXTURE + "\n".join(steps) + "\n"


@pytest.fixture(scope="module")
def outputs() -> dict[str, tuple[str, int]]:
    """Each rule's output and exit code, all run in one namespace, in order."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        pytest.skip("needs root, unshare(1) and setpriv(1): mounts and another user")
    as_other = f"setpriv --reuid={OTHER} --regid={OTHER} --clear-groups"
    env = Isolation(Path("/tmp/isolated")).environ(os.environ) | {
        "CLI": console_script(),
        "KEEP": " ".join(_under_tmp()),
        "AS_OTHER": as_other,
        "OTHER": str(OTHER),
        "THIRD": str(THIRD),
        "P": P,
        "KIMI": KIMI,
        "PLANTED": PLANTED,
    }
    done = subprocess.run(
        ["unshare", "--mount", "bash", "-c", _script()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "=== " not in done.stdout:  # the host was not laid out
        if "unshare failed" in done.stderr or "permission denied" in done.stderr:
            pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
        pytest.fail(f"the host was not laid out: {done.stderr.strip()}")
    found = {}
    for name, text, code in re.findall(r"=== (\S+)\n(.*?)=== exit (\d+)\n", done.stdout, re.S):
        found[name] = (text, int(code))
    return found


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_trust_rule(rule: Rule, outputs: dict[str, tuple[str, int]]) -> None:
    text, code = outputs[rule.name]
    assert (code, rule.said in text, rule.unsaid in text) == (rule.exit, True, False), text
