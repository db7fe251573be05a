"""Drift: where an environment disagrees with a profile, compared by what NCCL makes of it.

One rule decides whether a difference fails (`classify`), for `run`, `preflight` and `check`
alike; an entry carries the answer as a typed reason, and a report knows its exit code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, computed_field

from nccl_launch.errors import EXIT_DRIFT, EXIT_OK
from nccl_launch.nccl import catalog, others, rules
from nccl_launch.profile.markers import NCCL_DEBUG_KEYS, OWN_VARIABLES
from nccl_launch.profile.model import Policy
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import secret_value

DriftKind = Literal["changed", "missing", "undeclared"]
DRIFT_KINDS: tuple[DriftKind, ...] = get_args(DriftKind)
# Why an entry is in a report: "drift" fails; the others are shown and tolerated. "not-nccl":
# a name with NCCL's prefix that NCCL does not read and someone else sets (`not_nccl_note`).
Reason = Literal["drift", "server-owned", "policy", "stripped", "nccl-debug", "not-nccl"]
# Where the environment compared was read: before `run` execs (the calling env with the env
# files), the nccl.conf files NCCL applies inside the server, or a live process.
Stage = Literal["start", "nccl.conf", "live"]


class DriftEntry(BaseModel):
    """One variable that differs: `expected` is the profile's value, `actual` the one found,
    `source` where that came from; `declared_by`, the env file of the profile that declares
    the key (`env file PATH`); `set_in`, the file that sets the value found (an `--env-file`,
    an nccl.conf), None where the calling environment does. A value people must not see (a
    secret's name, an env file of the profile holds the key: the one found may be its key of
    before; a password in a URL) is a `Secret` from where it is read (`diff_env`), masked in
    text and JSON alike."""

    model_config = ConfigDict(frozen=True)

    key: str
    kind: DriftKind
    expected: str | Secret | None
    actual: str | Secret | None
    source: str | None = None
    note: str | None = None
    reason: Reason = "drift"
    declared_by: str | None = None
    set_in: str | None = Field(default=None, exclude=True)  # JSON's `source` says it

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tolerated(self) -> bool:
        """Shown but not failed."""
        return self.reason != "drift"

    @property
    def read_by_nccl(self) -> bool:
        """Whether NCCL documents or reads the name: else a misspelling it ignores."""
        return catalog.lookup(self.key) is not None

    @property
    def close_to(self) -> str | None:
        """The known NCCL name this unknown one is close to (`catalog.did_you_mean`)."""
        return catalog.did_you_mean(self.key)


class DriftReport(BaseModel):
    """Every difference between a profile and one environment, plus the keys that matched."""

    profile: str
    digest: str
    entries: list[DriftEntry]
    matched: list[str]

    @property
    def drifted(self) -> list[DriftEntry]:
        return [entry for entry in self.entries if not entry.tolerated]

    @property
    def exit_code(self) -> int:
        return EXIT_DRIFT if self.drifted else EXIT_OK

    def summary(self) -> str:
        """`3 drift (1 changed, 2 undeclared), 1 tolerated, 4 match`: only the kinds present."""
        drifted = self.drifted
        counts = Counter(entry.kind for entry in drifted)
        kinds = ", ".join(f"{counts[kind]} {kind}" for kind in DRIFT_KINDS if counts[kind])
        text = f"{len(drifted)} drift ({kinds})" if drifted else "no drift"
        tolerated = len(self.entries) - len(drifted)
        if tolerated:
            text += f", {tolerated} tolerated"
        return f"{text}, {len(self.matched)} match"


def not_nccl_note(key: str, value: str | None, policy: Policy) -> str | None:
    """What an undeclared `NCCL_*` variable NCCL does not read is, where it is someone
    else's: an image's, a build system's, a Kubernetes service link (`others`), or one the
    profile names (`[policy] not_nccl`); None otherwise."""
    if key in policy.not_nccl:
        return "named by [policy] not_nccl, not read by NCCL"
    what = None if value is None else others.what_is(key, value)
    return None if what is None else f"{what}, not read by NCCL"


def classify(
    key: str,
    kind: DriftKind,
    policy: Policy,
    stage: Stage,
    *,
    nccl_debug: bool = False,
    value: str | None = None,
) -> Reason:
    """Whether a difference fails, and if not, why.

    An undeclared variable NCCL does not read that is someone else's (`not_nccl_note`, of
    its `value`) is never drift, in any stage, and left to the server (never stripped). The
    server's own keys (`policy.server_owned`) are tolerated when undeclared, and in a live
    process also when they differ or are missing: the server sets them in its workers. A live
    process started with `run --nccl-debug` may carry NCCL_DEBUG. Otherwise the policy
    decides: `conflict = "warn"` tolerates an inherited value that differs at start;
    `undeclared_nccl = "warn"` tolerates undeclared NCCL variables, `"strip"` removes them
    from the child at start (nccl.conf entries cannot be removed, and a live one is there).
    """
    owned = key in policy.server_owned
    if kind == "undeclared":
        if not_nccl_note(key, value, policy) is not None:
            return "not-nccl"
        if owned:
            return "server-owned"
        if stage == "live" and nccl_debug and key in NCCL_DEBUG_KEYS:
            return "nccl-debug"
        if policy.undeclared_nccl == "warn":
            return "policy"
        return "stripped" if policy.undeclared_nccl == "strip" and stage == "start" else "drift"
    if stage == "live":
        return "server-owned" if owned else "drift"
    return "policy" if policy.conflict == "warn" else "drift"


def undeclared_note(key: str, value: str, policy: Policy) -> str:
    """Why an undeclared NCCL variable matters, with a did-you-mean when the name is unknown,
    and the releases that read it where only older ones do; what it is where it is someone
    else's."""
    var = catalog.lookup(key)
    if var is not None:
        older = catalog.older_releases(var)
        return "undeclared" + (f", {older}" if older else "")
    other = not_nccl_note(key, value, policy)
    if other is not None:
        return other
    hint = catalog.did_you_mean(key)
    return "undeclared, unknown to NCCL" + (f"; did you mean {hint}?" if hint else "")


def diff_env(
    expected: Mapping[str, str],
    actual: Mapping[str, str],
    sources: Mapping[str, str],
    policy: Policy,
    stage: Stage,
    *,
    nccl_debug: bool = False,
    declared_by: Mapping[str, str] | None = None,
    set_in: Mapping[str, str] | None = None,
) -> tuple[list[DriftEntry], list[str]]:
    """Entries for declared keys that differ (or, live, are absent) and for undeclared NCCL
    keys, each classified; and the declared keys that match. `declared_by` names the env
    file of an expected key the profile holds in one, `set_in` the file that sets an actual
    value (an `--env-file`, an nccl.conf)."""
    entries, matched = [], []
    files, setting = declared_by or {}, set_in or {}

    def travelling(key: str, value: str | None) -> str | Secret | None:
        """A value wrapped where people must not see it: both of a key an env file of the
        profile declares, as the one found may be its key of before."""
        return None if value is None else secret_value(key, value, key in files)

    def entry(key: str, kind: DriftKind, note: str | None) -> DriftEntry:
        reason = classify(key, kind, policy, stage, nccl_debug=nccl_debug, value=actual.get(key))
        return DriftEntry(
            key=key,
            kind=kind,
            expected=travelling(key, expected.get(key)),
            actual=travelling(key, actual.get(key)),
            source=sources.get(key),
            note=None if key in files else note,  # never an NCCL key, so NCCL reads nothing
            reason=reason,
            declared_by=files.get(key),
            set_in=setting.get(key),
        )

    for key, value in expected.items():
        if key not in actual:
            if stage == "live":  # at start the profile supplies it
                entries.append(entry(key, "missing", None))
        elif rules.same_meaning(key, value, actual[key]):
            matched.append(key)
        else:
            entries.append(entry(key, "changed", rules.reading(key, actual[key]).note))
    for key in sorted(set(actual) - set(expected)):
        if key.startswith(catalog.PREFIX) and key not in OWN_VARIABLES:
            entries.append(entry(key, "undeclared", undeclared_note(key, actual[key], policy)))
    return entries, matched
