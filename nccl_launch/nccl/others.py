"""Other programs' variables: names with NCCL's prefix that NCCL does not read (a container
image's metadata, build systems' paths, Kubernetes service links), and a container image's own
variables, from the shipped TSV file."""

from __future__ import annotations

import re
from functools import cache

from nccl_launch.nccl import catalog

# Kubernetes gives every pod these variables for each Service of its namespace, PREFIX being
# the Service's name upper-cased, '-' and '.' as '_' (pkg/kubelet/envvars/envvars.go,
# FromServices and makeLinkVariables): a Service named `nccl-proxy` makes NCCL_PROXY_*, one
# named `nccl` NCCL_SERVICE_HOST, NCCL_PORT and the like.
_IP = r"[0-9A-Fa-f.:]+"  # the ClusterIP, IPv4 or IPv6 (written without brackets)
_NUMBER = r"[0-9]{1,5}"
_URL = rf"(?:tcp|udp|sctp)://{_IP}:{_NUMBER}"
_LINK = r"NCCL(?:_[A-Z0-9_]+)?"
_PORT = rf"{_LINK}_PORT_{_NUMBER}_(?:TCP|UDP|SCTP)"
SERVICE_LINKS = tuple(
    (re.compile(name), re.compile(value))
    for name, value in (
        (rf"{_LINK}_SERVICE_HOST", _IP),
        (rf"{_LINK}_SERVICE_PORT(?:_[A-Z0-9_]+)?", _NUMBER),
        (rf"{_LINK}_PORT", _URL),
        (_PORT, _URL),
        (rf"{_PORT}_PROTO", r"tcp|udp|sctp"),
        (rf"{_PORT}_PORT", _NUMBER),
        (rf"{_PORT}_ADDR", _IP),
    )
)
SERVICE_LINK = "a Kubernetes service link"


@cache
def _rows() -> dict[str, dict[str, str]]:
    """The rows of other-variables.tsv by name (a name ending in `*` is a prefix)."""
    return {row["name"]: row for row in catalog.rows("other-variables.tsv")}


def _row(name: str) -> dict[str, str] | None:
    rows = _rows()
    if name in rows:
        return rows[name]
    return next(
        (row for key, row in rows.items() if key.endswith("*") and name.startswith(key[:-1])),
        None,
    )


def what_is(name: str, value: str) -> str | None:
    """What an `NCCL_*` name NCCL neither documents nor reads is, when someone else's
    (`set by NVIDIA's CUDA image`); None for a name NCCL reads, and for one nobody documents.
    A service link is recognised by its name and its value together."""
    if catalog.lookup(name) is not None:
        return None
    row = _row(name)
    if row is not None and name.startswith(catalog.PREFIX):
        return row["what"]
    if any(n.fullmatch(name) and v.fullmatch(value) for n, v in SERVICE_LINKS):
        return SERVICE_LINK
    return None


def image_variable(name: str) -> str | None:
    """Who sets `name` where a container image sets it as its own metadata (CUDA_VERSION,
    NV_*: `set by NVIDIA's CUDA image`), no setting of the server's; else None."""
    row = _row(name)
    return row["what"] if row is not None and row["set_by"] == "image" else None
