"""The variables nccl-launch sets in the child or reads itself; no profile may declare them."""

from __future__ import annotations

from nccl_launch.nccl.conf import SYSTEM_CONF_VAR

MARKER_PROFILE = "NCCL_LAUNCH_PROFILE"  # name@version of the profile the child runs
MARKER_DIGEST = "NCCL_LAUNCH_DIGEST"  # sha256 of its env and argv
MARKER_PROFILE_FILE = "NCCL_LAUNCH_PROFILE_FILE"  # absolute path of the file it was started from
MARKER_NCCL_DEBUG = "NCCL_LAUNCH_NCCL_DEBUG"  # set by `run --nccl-debug`, so `check` tolerates it
# Set by `tune` in each trial's server: the journal, the candidate's digest, tune's "PID START".
MARKER_TUNE_JOURNAL = "NCCL_LAUNCH_TUNE_JOURNAL"
MARKER_TUNE_DIGEST = "NCCL_LAUNCH_TUNE_DIGEST"
MARKER_TUNE = "NCCL_LAUNCH_TUNE"
SEARCH_PATH_VAR = "NCCL_LAUNCH_PATH"
SYSTEM_DIR_VAR = "NCCL_LAUNCH_SYSTEM_DIR"  # for packagers, and for tests to stay off the host
OWN_VARIABLES = frozenset(
    {
        MARKER_PROFILE,
        MARKER_DIGEST,
        MARKER_PROFILE_FILE,
        MARKER_NCCL_DEBUG,
        MARKER_TUNE_JOURNAL,
        MARKER_TUNE_DIGEST,
        MARKER_TUNE,
        SEARCH_PATH_VAR,
        SYSTEM_DIR_VAR,
        SYSTEM_CONF_VAR,
        "SPT_NOENV",
    }
)
# What `run --nccl-debug` adds so that `verify-log` has NCCL's own lines to read.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
# And where each process writes them, its own file (NCCL expands %h and %p): `check` reads it.
NCCL_DEBUG_FILE = "NCCL_DEBUG_FILE"
NCCL_DEBUG_KEYS = frozenset({*NCCL_DEBUG_ENV, NCCL_DEBUG_FILE})
