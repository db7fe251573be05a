"""Which rule reads each NCCL variable, and the lookups every other module uses: no module
outside nccl/ looks at a rule itself (`reading` says what NCCL makes of a value)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nccl_launch.nccl.catalog import PREFIX, Kind, NcclVar, lookup
from nccl_launch.nccl.grammar import (
    INT32_LIMIT,
    BoolRule,
    ChoiceRule,
    IntRule,
    Invalid,
    LevelRule,
    PatternRule,
    Rule,
    SizeRule,
    StringRule,
    TokenListRule,
    TomlValue,
    Undefined,
    strtoll,
)
from nccl_launch.nccl.selection import Rejected, SelectionRule

_LEVEL = LevelRule()
_CHANNELS = IntRule(1, 64)
_INT32_SIZE = SizeRule(1, INT32_LIMIT - 1)
# A size under 1/64 of NCCL's default is no tuning (tuned sizes stay a few powers of two from
# it), and one under 1024 bytes was written without a unit (`1KiB` is 1024): such a count is
# a unit NCCL stopped at (strtoll reads `16MiB` as 16) or one left out.
FAR_BELOW = 64
_SUBSYSTEMS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "ALLOC_HOST", "CALL",
    "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL",
)  # fmt: skip

# Rules by name without the prefix; every other variable gets the default rule of its kind.
RULES: dict[str, Rule] = {
    "PROTO": SelectionRule(("LL", "LL128", "Simple"), "a protocol", auto=("LL128",)),
    "ALGO": SelectionRule(
        ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
        "an algorithm",
    ),
    "P2P_LEVEL": _LEVEL,
    "NET_GDR_LEVEL": _LEVEL,
    "IB_GDR_LEVEL": _LEVEL,
    "NTHREADS": IntRule(64, 512, multiple=32),
    "MAX_NCHANNELS": _CHANNELS,
    "MIN_NCHANNELS": _CHANNELS,
    "MAX_CTAS": _CHANNELS,
    "MIN_CTAS": _CHANNELS,
    "BUFFSIZE": _INT32_SIZE,
    "LL_BUFFSIZE": _INT32_SIZE,
    "LL128_BUFFSIZE": _INT32_SIZE,
    "P2P_NET_CHUNKSIZE": _INT32_SIZE,
    "P2P_PCI_CHUNKSIZE": _INT32_SIZE,
    "P2P_NVL_CHUNKSIZE": _INT32_SIZE,
    "NVLS_CHUNKSIZE": _INT32_SIZE,
    "NVLSTREE_MAX_CHUNKSIZE": _INT32_SIZE,
    "SHADOW_MEMPOOL_MAX_SIZE": SizeRule(),
    "SYM_CE_THRESHOLD": SizeRule(),
    "WORK_ARGS_BYTES": SizeRule(),
    "WORK_FIFO_BYTES": SizeRule(),
    "SOCKET_INLINE": SizeRule(),
    "SOCKET_MIN_TASKSIZE": SizeRule(),
    "DEBUG": ChoiceRule(("VERSION", "WARN", "INFO", "TRACE", "ABORT")),
    "DEBUG_SUBSYS": TokenListRule(_SUBSYSTEMS),
    "DEBUG_TIMESTAMP_LEVELS": TokenListRule(("VERSION", "WARN", "INFO", "ABORT", "TRACE", "ALL")),
    "SOCKET_FAMILY": ChoiceRule(("AF_INET", "AF_INET6"), case_sensitive=True),
    "IB_ADDR_FAMILY": ChoiceRule(("AF_INET", "AF_INET6"), case_sensitive=True),
    "CHECK_MODE": ChoiceRule(("DEFAULT", "DEBUG_LOCAL", "DEBUG_GLOBAL")),
    "LAUNCH_MODE": ChoiceRule(("PARALLEL", "GROUP")),
    "NET_MERGE_POLICY": ChoiceRule(("ALL", "RAIL")),
    "CTA_POLICY": TokenListRule(("DEFAULT", "EFFICIENCY", "ZERO", "0", "1", "2"), "|", False),
    "NETDEVS_POLICY": PatternRule(r"AUTO|ALL|MAX:[1-9][0-9]*", "AUTO, ALL or MAX:N"),
    "CROSS_NIC": IntRule(0, 2),
    "IB_PCI_RELAXED_ORDERING": IntRule(0, 2),
    "MEM_SYNC_DOMAIN": IntRule(0, 1),
    "NVLS_ENABLE": IntRule(0, 2),
    "MNNVL_ENABLE": IntRule(0, 2),
    "P2P_PXN_LEVEL": IntRule(0, 2),
    "IB_TIMEOUT": IntRule(0, 31),
    "IB_RETRY_CNT": IntRule(0, 7),
    "IB_ROCE_VERSION_NUM": IntRule(1, 2),
    "IB_QPS_PER_CONNECTION": IntRule(1, 128),
    "SOCKET_NTHREADS": IntRule(1, 16),
    "NSOCKS_PERTHREAD": IntRule(1, 64),
    "CGA_CLUSTER_SIZE": IntRule(0, 8),
    "SOCKET_RETRY_CNT": IntRule(1),
    "SOCKET_RETRY_SLEEP_MSEC": IntRule(1),
    "SOCKET_POLL_TIMEOUT_MSEC": IntRule(0),
    "UID_STAGGER_THRESHOLD": IntRule(1),
    "UID_STAGGER_RATE": IntRule(1),
    "RAS_TIMEOUT_FACTOR": IntRule(1),
    "SOCKET_MAGIC": IntRule(0, 2**64 - 1),
    "SET_THREAD_NAME": BoolRule(words=True),
    "PARAM_DUMP_ALL": BoolRule(words=True),
    "WARN_ENABLE_DEBUG_INFO": BoolRule(words=True),
}

_KIND_RULES: dict[Kind, Rule] = {
    "int": IntRule(),
    "size": SizeRule(),
    "bool": BoolRule(),
    "list": StringRule(no_spaces=True),
    "string": StringRule(),
    "level": _LEVEL,
}


def catalog_rule(var: NcclVar) -> Rule:
    """The rule of a known variable: its own, or the default of its kind."""
    short = var.name.removeprefix(PREFIX)
    if short in RULES:
        return RULES[short]
    if var.kind == "enum":
        raise LookupError(f"{var.name} is an enum without a rule")  # caught by the catalog test
    return _KIND_RULES[var.kind]


def rule_for(name: str) -> Rule | None:
    """The rule for a full variable name; None for non-NCCL and unknown NCCL names."""
    var = lookup(name) if name.startswith(PREFIX) else None
    return None if var is None else catalog_rule(var)


def canonical(name: str, value: TomlValue) -> str:
    """The exact string the child gets for a declared NCCL variable (raises `Invalid`)."""
    rule = rule_for(name)
    if rule is None:
        raise Invalid("unknown-variable", f"{name} has no NCCL rule")
    return rule.parse(value)


def meaning(name: str, raw: str) -> object:
    """What NCCL makes of a raw environment string; plain text for other variables."""
    rule = rule_for(name)
    return raw if rule is None else rule.meaning(raw)


def same_meaning(name: str, expected: str, actual: str) -> bool:
    """True when NCCL (or the process, for other variables) treats both strings alike."""
    return expected == actual or meaning(name, expected) == meaning(name, actual)


def size_slip(name: str, raw: str) -> tuple[str, str] | None:
    """Where NCCL reads `raw` for the size `name` as 1 to 1023 bytes and under 1/FAR_BELOW of
    its documented default (`16MiB` is 16 to strtoll): what is wrong, and what the value
    likely meant, spelled to copy; None for any other value or variable."""
    rule, var, read = rule_for(name), lookup(name), strtoll(raw)
    if not isinstance(rule, SizeRule) or var is None or not var.default.isdigit() or not read:
        return None
    default = int(var.default)
    if not 0 < read < min(1024, default // FAR_BELOW):
        return None
    # The unit written, where strtoll stopped, else the one that lands nearest the default.
    letter = raw.strip().lstrip("0123456789")[:1].upper()
    sizes = {f"{unit}iB": read * 1024 ** (1 + "KMG".index(unit)) for unit in "KMG"}
    fits = {unit: size for unit, size in sizes.items() if size <= rule.high}
    nearest = min(fits, key=lambda unit: max(fits[unit], default) / min(fits[unit], default))
    unit = f"{letter}iB" if f"{letter}iB" in fits else nearest
    wrong = f"{read} bytes is under 1/{FAR_BELOW} of NCCL's default {default}"
    return wrong, f'for {read}{unit} ({fits[unit]} bytes) write "{read}{unit}"'


@dataclass(frozen=True)
class Reading:
    """What NCCL makes of one raw value of a variable (`reading`): `note` says it where that
    is not what the value looks like ("NCCL reads 16"), in the one wording every command
    shows; `stored` is what a profile keeps so that the value means the same to NCCL (None:
    nothing, NCCL keeps its default); `hint` what a size in the wrong unit likely meant;
    `refused` why a profile cannot say it at all."""

    name: str
    raw: str
    note: str | None = None
    stored: TomlValue | None = None
    hint: str | None = None
    refused: str | None = None

    @property
    def changed(self) -> bool:
        """Whether a profile keeps another value than the one written."""
        return self.stored != self.raw

    def toml(self) -> TomlValue | None:
        """`stored` as a profile writes it, checked with the variable's rule (`Invalid`
        saying what would be valid): an integer as a TOML integer, a 0/1 switch as
        false/true, a size in the largest binary unit that divides it (16777216 is "16MiB"),
        other text as it is; all mean the same to NCCL, so the digest is the same."""
        if self.refused is not None:
            raise Invalid("undefined-reading", f"{self.raw!r}: {self.refused}")
        if self.stored is None:
            return None
        canonical(self.name, self.stored)
        return _typed(rule_for(self.name), self.stored)


def reading(name: str, raw: str) -> Reading:
    """What NCCL makes of `raw` for the variable `name` (as written, for other variables):
    `010` is 8 (octal), `0x200` 512, `16MB` 16 (strtoll stops at the M), `4` the level PHB."""
    rule = rule_for(name)
    if rule is None:
        return Reading(name, raw, stored=raw)
    read = rule.meaning(raw)
    counted = isinstance(rule, IntRule | SizeRule)
    if isinstance(read, Undefined):
        return Reading(name, raw, read.why, refused=f"{read.why}; write the level NCCL should use")
    if isinstance(read, Rejected):  # NCCL_PROTO / NCCL_ALGO that parseList refuses
        return Reading(name, raw, read.note, raw)
    if read is None and counted:
        # ncclLoadParam (src/misc/param.cc:130-135) keeps the default for both.
        if not raw:
            return Reading(name, raw, "empty: NCCL keeps its default")
        return Reading(name, raw, "overflow: NCCL keeps its default", raw)
    if read is None:
        return Reading(name, raw, "NCCL treats it as unset", raw)
    level = isinstance(rule, LevelRule) and read != raw
    if not level and not (isinstance(read, int) and str(read) != raw):
        return Reading(name, raw, stored=raw, hint=_size_hint(name, rule, raw))
    kept = read if (counted or level) and isinstance(read, int | str) else raw
    return Reading(name, raw, f"NCCL reads {read}", kept, _size_hint(name, rule, raw))


def _size_hint(name: str, rule: Rule, raw: str) -> str | None:
    """For a size: both readings of a decimal unit, or what a slipped unit likely meant."""
    slip = size_slip(name, raw)
    ambiguity = rule.ambiguity(raw) if isinstance(rule, SizeRule) else None
    return ambiguity or ("; ".join(slip) if slip else None)


_DECIMAL = re.compile(r"-?[0-9]+")
_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _typed(rule: Rule | None, value: TomlValue) -> TomlValue:
    """`value` as a profile reads best (`Reading.toml`)."""
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value) and str(int(value)) == value:
        number = int(value)
    if number is None:
        return value
    if isinstance(rule, BoolRule) and number in (0, 1):
        return bool(number)
    if isinstance(rule, SizeRule):
        unit = next(((name, size) for name, size in _BINARY_UNITS if number % size == 0), None)
        return f"{number // unit[1]}{unit[0]}" if unit and number else number
    return number if isinstance(rule, IntRule) else value
