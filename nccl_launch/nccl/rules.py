"""Which rule reads each NCCL variable, and the lookups every other module uses."""

from __future__ import annotations

from nccl_launch.nccl.catalog import PREFIX, Kind, NcclVar, lookup
from nccl_launch.nccl.grammar import (
    INT32_LIMIT,
    BoolRule,
    ChoiceRule,
    IntRule,
    LevelRule,
    PatternRule,
    Rule,
    SizeRule,
    StringRule,
    TokenListRule,
    TomlValue,
)
from nccl_launch.nccl.selection import SelectionRule

_LEVEL = LevelRule()
_CHANNELS = IntRule(1, 64)
_INT32_SIZE = SizeRule(1, INT32_LIMIT - 1)
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
    """The exact string the child gets for a declared NCCL variable (raises ValueError)."""
    rule = rule_for(name)
    if rule is None:
        raise ValueError(f"{name} has no NCCL rule")
    return rule.parse(value)


def meaning(name: str, raw: str) -> object:
    """What NCCL makes of a raw environment string; plain text for other variables."""
    rule = rule_for(name)
    return raw if rule is None else rule.meaning(raw)


def same_meaning(name: str, expected: str, actual: str) -> bool:
    """True when NCCL (or the process, for other variables) treats both strings alike."""
    return expected == actual or meaning(name, expected) == meaning(name, actual)
