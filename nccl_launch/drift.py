"""Drift reports: where an environment disagrees with a profile, compared by meaning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, field_serializer

from nccl_launch import catalog, grammar
from nccl_launch.profile import OWN_VARIABLES, Policy

DriftKind = Literal["changed", "missing", "undeclared"]
DRIFT_KINDS: tuple[DriftKind, ...] = get_args(DriftKind)

_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")


class DriftEntry(BaseModel):
    """One variable that differs: `expected` is the profile's value, `actual` the inherited one."""

    model_config = ConfigDict(frozen=True)

    key: str
    kind: DriftKind
    expected: str | None
    actual: str | None
    source: str | None = None
    note: str | None = None
    tolerated: bool = False  # shown but not failed: server-owned keys and `warn` policies

    @field_serializer("expected", "actual")
    def _masked(self, value: str | None) -> str | None:
        """JSON output masks secret-looking values, as the text does."""
        return "***" if value is not None and is_secret(self.key) else value


class DriftReport(BaseModel):
    """Every difference between a profile and one environment, plus the keys that matched."""

    model_config = ConfigDict(frozen=True)

    profile: str
    digest: str
    entries: list[DriftEntry]
    matched: list[str]

    @property
    def drifted(self) -> list[DriftEntry]:
        return [entry for entry in self.entries if not entry.tolerated]


def is_secret(key: str) -> bool:
    """Values of keys that look like credentials are masked in every report."""
    return not key.startswith(catalog.PREFIX) and any(word in key.upper() for word in _SECRET_WORDS)


def undeclared_note(key: str) -> str:
    """Why an undeclared NCCL variable matters, with a did-you-mean when the name is unknown."""
    if catalog.lookup(key) is not None:
        return "undeclared"
    hint = catalog.did_you_mean(key)
    return "undeclared, unknown to NCCL" + (f"; did you mean {hint}?" if hint else "")


def changed_note(key: str, actual: str) -> str | None:
    """What NCCL really makes of an inherited value, when that is not what it looks like."""
    rule = grammar.rule_for(key)
    if rule is None:
        return None
    read = rule.meaning(actual)
    if isinstance(read, int) and str(read) != actual:
        return f"NCCL reads {read}"
    if read is None:
        return "NCCL treats it as unset"
    return None


def compare(
    expected: Mapping[str, str],
    actual: Mapping[str, str],
    sources: Mapping[str, str],
    *,
    missing_is_drift: bool,
) -> tuple[list[DriftEntry], list[str]]:
    """Entries for declared keys that differ (or are absent), and the keys that match."""
    entries, matched = [], []
    for key, value in expected.items():
        if key not in actual:
            if missing_is_drift:
                entries.append(DriftEntry(key=key, kind="missing", expected=value, actual=None))
        elif grammar.same_meaning(key, value, actual[key]):
            matched.append(key)
        else:
            entries.append(
                DriftEntry(
                    key=key,
                    kind="changed",
                    expected=value,
                    actual=actual[key],
                    source=sources.get(key),
                    note=changed_note(key, actual[key]),
                )
            )
    return entries, matched


def undeclared(
    expected: Mapping[str, str],
    actual: Mapping[str, str],
    sources: Mapping[str, str],
    policy: Policy,
    *,
    tolerate: bool,
) -> list[DriftEntry]:
    """NCCL variables present but not declared; the server's own keys are always tolerated."""
    entries = []
    for key in sorted(set(actual) - set(expected)):
        if not key.startswith(catalog.PREFIX) or key in OWN_VARIABLES:
            continue
        owned = key in policy.server_owned
        entries.append(
            DriftEntry(
                key=key,
                kind="undeclared",
                expected=None,
                actual=actual[key],
                source=sources.get(key),
                note="server-owned" if owned else undeclared_note(key),
                tolerated=owned or tolerate,
            )
        )
    return entries
