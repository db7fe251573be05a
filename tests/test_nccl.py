"""NCCL's grammar: every rule with valid and invalid values, plus properties over many inputs."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nccl_launch.nccl import catalog, grammar, rules
from nccl_launch.nccl.grammar import TomlValue
from tests.conftest import RunCli, WriteProfile

VALID: list[tuple[str, TomlValue, str]] = [
    # name, profile value, what the child gets
    ("PROTO", "LL", "LL"),
    ("PROTO", "ll", "LL"),
    ("PROTO", "LL,LL128,simple", "LL,LL128,Simple"),
    ("PROTO", "^LL128", "^LL128"),
    ("PROTO", "allreduce:LL;allgather:Simple", "AllReduce:LL;AllGather:Simple"),
    ("PROTO", "LL;ReduceScatter:^LL", "LL;ReduceScatter:^LL"),
    ("ALGO", "Ring", "Ring"),
    ("ALGO", "ring,tree", "Ring,Tree"),
    ("ALGO", "^NVLS,NVLSTree", "^NVLS,NVLSTree"),
    ("ALGO", "allreduce:tree", "AllReduce:Tree"),
    ("ALGO", "Broadcast:Ring;Reduce:PAT", "Broadcast:Ring;Reduce:PAT"),
    ("ALGO", "CollNetDirect,CollNetChain", "CollNetDirect,CollNetChain"),
    ("P2P_LEVEL", "SYS", "SYS"),
    ("P2P_LEVEL", "PXN", "PXN"),
    ("P2P_LEVEL", "C2C", "C2C"),
    ("P2P_LEVEL", 0, "LOC"),
    ("P2P_LEVEL", 1, "PIX"),
    ("P2P_LEVEL", "4", "SYS"),
    ("P2P_LEVEL", 5, "SYS"),
    ("NET_GDR_LEVEL", "PHB", "PHB"),
    ("NTHREADS", 64, "64"),
    ("NTHREADS", 512, "512"),
    ("NTHREADS", "256", "256"),
    ("NTHREADS", 96, "96"),
    ("MAX_NCHANNELS", 1, "1"),
    ("MAX_NCHANNELS", 16, "16"),
    ("MIN_NCHANNELS", 64, "64"),
    ("MAX_CTAS", 32, "32"),
    ("MIN_CTAS", "8", "8"),
    ("BUFFSIZE", 16777216, "16777216"),
    ("BUFFSIZE", "16777216", "16777216"),
    ("BUFFSIZE", "16MiB", "16777216"),
    ("BUFFSIZE", "16M", "16777216"),
    ("BUFFSIZE", "512K", "524288"),
    ("BUFFSIZE", "1GiB", "1073741824"),
    ("BUFFSIZE", 2**31 - 1, "2147483647"),
    ("LL_BUFFSIZE", "1KiB", "1024"),
    ("P2P_NET_CHUNKSIZE", "128K", "131072"),
    ("CHUNK_SIZE", 0, "0"),
    ("IB_AR_THRESHOLD", "4G", "4294967296"),
    ("SHM_DISABLE", True, "1"),
    ("SHM_DISABLE", False, "0"),
    ("IB_DISABLE", 1, "1"),
    ("P2P_DISABLE", "0", "0"),
    ("SET_THREAD_NAME", True, "1"),
    ("DEBUG", "info", "INFO"),
    ("DEBUG", "WARN", "WARN"),
    ("DEBUG_SUBSYS", "INIT,ENV", "INIT,ENV"),
    ("DEBUG_SUBSYS", "^coll", "^COLL"),
    ("DEBUG_TIMESTAMP_LEVELS", "WARN,INFO", "WARN,INFO"),
    ("SOCKET_FAMILY", "AF_INET6", "AF_INET6"),
    ("CHECK_MODE", "debug_local", "DEBUG_LOCAL"),
    ("LAUNCH_MODE", "PARALLEL", "PARALLEL"),
    ("NET_MERGE_POLICY", "rail", "RAIL"),
    ("CTA_POLICY", "EFFICIENCY|ZERO", "EFFICIENCY|ZERO"),
    ("NETDEVS_POLICY", "MAX:2", "MAX:2"),
    ("CROSS_NIC", 2, "2"),
    ("NVLS_ENABLE", 0, "0"),
    ("IB_TIMEOUT", 22, "22"),
    ("IB_RETRY_CNT", 7, "7"),
    ("SOCKET_NTHREADS", 4, "4"),
    ("SOCKET_IFNAME", "^docker,lo", "^docker,lo"),
    ("SOCKET_IFNAME", "=eth0", "=eth0"),
    ("IB_HCA", "mlx5_0:1,mlx5_1:1", "mlx5_0:1,mlx5_1:1"),
    ("TOPO_FILE", "/etc/nccl/topo.xml", "/etc/nccl/topo.xml"),
    ("DEBUG_FILE", "/tmp/nccl.%h.%p.log", "/tmp/nccl.%h.%p.log"),
    ("COMM_ID", "10.0.0.1:23456", "10.0.0.1:23456"),
    ("IB_GID_INDEX", -1, "-1"),
    ("GRAPH_REGISTER", 0, "0"),
]

INVALID: list[tuple[str, TomlValue, str]] = [
    # name, profile value, a fragment of the message
    ("PROTO", "LL, Simple", "whitespace"),
    ("PROTO", " LL", "whitespace"),
    ("PROTO", "LLL", "not a protocol"),
    ("PROTO", "Ring", "not a protocol"),
    ("PROTO", "", "empty"),
    ("PROTO", "LL,", "'' in 'LL,' is not a protocol"),
    ("PROTO", "AllReduce:LL;Simple", "only the first"),
    ("PROTO", "AllReduce:LL;AllReduce:Simple", "twice"),
    ("PROTO", "Gather:LL", "not a collective"),
    ("PROTO", 1, "written as a TOML string"),
    ("ALGO", "Ring;Tree", "only the first"),
    ("ALGO", "Rings", "not an algorithm"),
    ("ALGO", "Ring\tTree", "whitespace"),
    ("ALGO", "LL", "not an algorithm"),
    ("P2P_LEVEL", "sys", "NCCL treats 'sys' as unset"),
    ("P2P_LEVEL", "foo", "exact case"),
    ("P2P_LEVEL", -1, "legacy integer 0-5"),
    ("P2P_LEVEL", 6, "legacy integer 0-5"),
    ("P2P_LEVEL", "", "unset"),
    ("P2P_LEVEL", True, "valid"),
    ("NTHREADS", 500, "multiple of 32"),
    ("NTHREADS", 1024, "from 64 to 512"),
    ("NTHREADS", 32, "from 64 to 512"),
    ("NTHREADS", "512.0", "decimal integer"),
    ("NTHREADS", 512.0, "decimal integer"),
    ("NTHREADS", True, "decimal integer"),
    ("MAX_NCHANNELS", 0, "from 1 to 64"),
    ("MAX_NCHANNELS", 65, "from 1 to 64"),
    ("MIN_NCHANNELS", "0x10", "NCCL would read it as 16"),
    ("NTHREADS", "0x99999999999999999999", "(NCCL keeps its default: strtoll overflows)"),
    ("MAX_CTAS", 128, "from 1 to 64"),
    ("MIN_CTAS", -1, "from 1 to 64"),
    ("BUFFSIZE", "16MB", "NCCL would read it as 16"),
    ("BUFFSIZE", "1e6", "NCCL would read it as 1"),
    ("BUFFSIZE", "16 MiB", "not a size"),
    ("BUFFSIZE", "16mib", "not a size"),
    ("BUFFSIZE", "2GiB", "below 2^31"),
    ("BUFFSIZE", 2**31, "below 2^31"),
    ("BUFFSIZE", 0, "at least 1"),
    ("BUFFSIZE", -4, "at least 1"),
    ("BUFFSIZE", "0x1000000", "not a size"),
    ("BUFFSIZE", 4.5, "valid: a size"),
    ("SHM_DISABLE", "yes", "not a boolean"),
    ("SHM_DISABLE", 2, "not a boolean"),
    ("SHM_DISABLE", "true", "not a boolean"),
    ("DEBUG", "VERBOSE", "VERSION, WARN, INFO, TRACE, ABORT"),
    ("DEBUG", 1, "written as a TOML string"),
    ("DEBUG_SUBSYS", "INIT, ENV", "' ENV'"),
    ("DEBUG_SUBSYS", "NETWORK", "'NETWORK'"),
    ("SOCKET_FAMILY", "af_inet", "exact case"),
    ("CTA_POLICY", "DEFAULT,ZERO", "joined by '|'"),
    ("NETDEVS_POLICY", "MAX:0", "AUTO, ALL or MAX:N"),
    ("CROSS_NIC", 3, "from 0 to 2"),
    ("IB_TIMEOUT", 32, "from 0 to 31"),
    ("IB_RETRY_CNT", 8, "from 0 to 7"),
    ("SOCKET_NTHREADS", 17, "from 1 to 16"),
    ("SOCKET_IFNAME", "eth0, eth1", "whitespace"),
    ("TOPO_FILE", "", "non-empty"),
    ("TOPO_FILE", "a\nb", "one line"),
    ("IB_GID_INDEX", "abc", "NCCL would read it as 0"),
    ("IB_GID_INDEX", 2**63, "decimal integer"),
    # Arabic-Indic digits (64, 3): int() reads them, NCCL's strtoll does not.
    ("NTHREADS", "٦٤", "NCCL would read it as 0"),
    ("BUFFSIZE", "٣K", "NCCL would read it as 0"),
    ("NETDEVS_POLICY", "MAX:1٣", "AUTO, ALL or MAX:N"),
]


@pytest.mark.parametrize(("short", "value", "emitted"), VALID)
def test_valid_values_are_emitted_canonically(short: str, value: TomlValue, emitted: str) -> None:
    assert rules.canonical("NCCL_" + short, value) == emitted


@pytest.mark.parametrize(("short", "value", "fragment"), INVALID)
def test_invalid_values_are_refused_saying_what_is_valid(
    short: str, value: TomlValue, fragment: str
) -> None:
    with pytest.raises(ValueError) as error:
        rules.canonical("NCCL_" + short, value)
    assert fragment in str(error.value)


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        ("16777216", 16777216),
        ("0x1000000", 16777216),
        ("16MB", 16),
        ("1e6", 1),
        ("abc", 0),
        ("010", 8),
        ("08", 0),
        ("  42", 42),
        ("-7", -7),
        ("+7", 7),
        ("0x", 0),
        ("", 0),
        ("99999999999999999999", None),
        ("9" * 5000, None),  # past Python's 4300-digit limit on int(): never converted
        ("-" + "9" * 5000, None),
        ("0x" + "f" * 5000, None),
        ("0" * 5000 + "17", 15),  # leading zeros: octal, and still small
        ("0x" + "0" * 5000 + "10", 16),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),
        ("\u0663", 0),  # an Arabic-Indic three is no digit to C
    ],
)
def test_strtoll_reads_like_nccl(raw: str, read: int | None) -> None:
    assert grammar.strtoll(raw) == read


@pytest.mark.parametrize(
    ("name", "expected", "actual", "same"),
    [
        ("NCCL_BUFFSIZE", "16777216", "0x1000000", True),
        ("NCCL_BUFFSIZE", "16777216", "16MiB", False),  # NCCL reads 16
        ("NCCL_PROTO", "LL", "ll", True),
        ("NCCL_PROTO", "LL,Simple", "simple,LL", True),
        ("NCCL_PROTO", "LL", "Simple", False),
        ("NCCL_PROTO", "LL", "LL ", False),
        ("NCCL_P2P_LEVEL", "SYS", "4", True),
        ("NCCL_P2P_LEVEL", "SYS", "9", True),  # NCCL clamps legacy integers above 5
        ("NCCL_P2P_LEVEL", "SYS", "sys", False),  # NCCL treats it as unset
        ("NCCL_DEBUG", "INFO", "info", True),
        ("NCCL_SOCKET_FAMILY", "AF_INET", "af_inet", False),
        ("NCCL_TOPO_FILE", "/a", "/a/", False),
        ("CUDA_VISIBLE_DEVICES", "0,1", "0,1", True),
        ("CUDA_VISIBLE_DEVICES", "0,1", "1,0", False),
    ],
)
def test_values_compare_by_what_nccl_makes_of_them(
    name: str, expected: str, actual: str, same: bool
) -> None:
    assert rules.same_meaning(name, expected, actual) is same


def test_every_known_variable_has_a_rule() -> None:
    for name, var in catalog.catalog().items():
        assert rules.rule_for(name) is not None, name
        if var.kind == "enum":
            assert name.removeprefix("NCCL_") in rules.RULES, f"{name} is an enum without a rule"


def test_catalog_holds_both_reference_files() -> None:
    variables = catalog.catalog()
    assert sum(var.documented for var in variables.values()) == 119
    assert sum(var.read_by_source for var in variables.values()) == 245
    assert variables["NCCL_LL_BUFFSIZE"].documented is False


def test_the_catalog_holds_every_name_any_covered_release_reads() -> None:
    """2.21.5 to 2.30.7: what the servers' torch wheels pin (2.30.7) and what an image's own
    libnccl or an older torch puts under them; a name only older releases read is NCCL's."""
    variables = catalog.catalog()
    assert catalog.covered() == ("2.21.5", "2.30.7")
    assert catalog.release() == "2.30.7"
    assert sum(bool(var.releases) for var in variables.values()) == 254
    older = {name: var.releases for name, var in variables.items() if catalog.older_releases(var)}
    assert older == {
        "NCCL_CREATE_THREAD_CONTEXT": "2.21.5-2.30.4",
        "NCCL_GIN_COUNTER_POOL_SIZE": "2.28.7-2.29.7",
        "NCCL_GIN_EXCLUSIVE_CONTEXTS": "2.29.7",
        "NCCL_GIN_NCONTEXTS": "2.28.7-2.29.7",
        "NCCL_GIN_SIGNAL_POOL_SIZE": "2.28.7-2.29.7",
        "NCCL_PROXY_PROFILE": "2.21.5-2.22.3",
        "NCCL_SHM_MEMCPY_MODE": "2.21.5-2.30.4",
        "NCCL_SHM_USE_CUDA_MEMCPY": "2.21.5-2.30.4",
        "NCCL_WORK_FIFO_DEPTH": "2.21.5",
    }
    assert variables["NCCL_PROTO"].releases == "2.21.5-2.30.7"
    assert variables["NCCL_ENV_PLUGIN"].releases == "2.28.7-2.30.7"
    assert variables["NCCL_CHECKS_DISABLE"].releases == ""  # documented, read by none
    assert catalog.older_releases(variables["NCCL_PROTO"]) is None
    assert catalog.name_note("NCCL_SHM_MEMCPY_MODE") == (
        "ignored",
        "read by NCCL 2.21.5-2.30.4, not 2.30.7, the catalog's release (undocumented; read at "
        "src/transport/shm.cc:69 in NCCL 2.30.4)",
        "keep it only where the server loads one of those releases",
    )


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("NCCL_PROTOCOL", "NCCL_PROTO"),
        ("NCCL_ALGORITHM", "NCCL_ALGO"),
        ("NCCL_BUFFER_SIZE", "NCCL_BUFFSIZE"),
        ("NCCL_NTHREAD", "NCCL_NTHREADS"),
        ("NCCL_P2P_LEVL", "NCCL_P2P_LEVEL"),
        ("NCCL_MAX_NCHANNEL", "NCCL_MAX_NCHANNELS"),
        ("NCCL_LL_BUFSIZE", "NCCL_LL_BUFFSIZE"),  # only the source reads this one
        ("NCCL_DEBUG_LEVEL", "NCCL_DEBUG"),  # written out longer, not NCCL_DEBUG_FILE
        ("NCCL_IB_HCA_LIST", "NCCL_IB_HCA"),
        ("NCCL_SOCKET_IF", "NCCL_SOCKET_IFNAME"),
        ("NCCL_NET_GDR_LEVELS", "NCCL_NET_GDR_LEVEL"),
        # Cut short at a word: the family's switch, not the shorter NCCL_NET, nor a sibling.
        ("NCCL_NET_GDR", "NCCL_NET_GDR_LEVEL"),
        ("NCCL_IB_GDR", "NCCL_IB_GDR_LEVEL"),
        ("NCCL_NVLS", "NCCL_NVLS_ENABLE"),
        ("NCCL_CUMEM", "NCCL_CUMEM_ENABLE"),
        ("NCCL_COLLNET", "NCCL_COLLNET_ENABLE"),
        ("NCCL_SHM", "NCCL_SHM_DISABLE"),
        ("NCCL_P2P", "NCCL_P2P_LEVEL"),  # the shorter of its two switches
        ("NCCL_GRAPH_DUMP", "NCCL_GRAPH_DUMP_FILE"),  # the family's only name
        ("NCCL_SHM_MEMCPY", "NCCL_SHM_MEMCPY_MODE"),  # read by 2.21.5-2.30.4 only
    ],
)
def test_typos_get_a_suggestion_from_both_catalogs(typo: str, meant: str) -> None:
    assert catalog.lookup(typo) is None
    assert catalog.did_you_mean(typo) == meant


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_VERSION",  # an image's; close to no name
        "NCCL_SITE_RACK",
        "NCCL_SOCKET",  # cut short of twelve names, none its switch: no guess
        "NCCL_HOME",
        "NCCL_ROOT_DIR",
    ],
)
def test_names_close_to_none_get_no_suggestion(name: str) -> None:
    assert catalog.did_you_mean(name) is None


def test_a_name_older_releases_read_is_no_typo_of_another() -> None:
    """NCCL 2.21.5 to 2.30.4 read NCCL_SHM_USE_CUDA_MEMCPY: it is never "fixed" to
    NCCL_P2P_USE_CUDA_MEMCPY."""
    assert catalog.lookup("NCCL_SHM_USE_CUDA_MEMCPY") is not None
    assert catalog.did_you_mean("NCCL_SHM_USE_CUDA_MEMCP") == "NCCL_SHM_USE_CUDA_MEMCPY"


@pytest.mark.parametrize(
    ("short", "value", "binary", "decimal"),
    [
        ("BUFFSIZE", "16MB", 'write "16MiB" or 16777216', "for 16000000 bytes write 16000000"),
        ("BUFFSIZE", "16mb", 'write "16MiB" or 16777216', "for 16000000 bytes write 16000000"),
        ("LL_BUFFSIZE", "64KB", 'write "64KiB" or 65536', "for 64000 bytes write 64000"),
        ("WORK_ARGS_BYTES", "1GB", 'write "1GiB" or 1073741824', "write 1000000000"),
        ("BUFFSIZE", "2GB", "2147483648 bytes (what NCCL users almost always mean), nothing: "
         "it is out of range", "for 2000000000 bytes write 2000000000"),
    ],
)  # fmt: skip
def test_a_decimal_unit_is_refused_with_both_readings_to_copy(
    short: str, value: str, binary: str, decimal: str
) -> None:
    with pytest.raises(ValueError) as error:
        rules.canonical("NCCL_" + short, value)
    message = str(error.value)
    assert message.startswith(f"{value!r} is not a size (NCCL would read it as ")
    assert "is ambiguous" in message
    assert binary in message
    assert decimal in message
    assert "\n" not in message


def test_the_profile_error_for_16mb_names_both_sizes(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("bad", 'schema = 1\nname = "bad"\nversion = 1\n[nccl]\nBUFFSIZE = "16MB"\n')
    result = run_cli("validate", "profiles/bad.toml")
    assert result.returncode == 2
    assert result.stderr == (
        "profiles/bad.toml: nccl.BUFFSIZE: '16MB' is not a size (NCCL would read it as 16); MB is "
        "ambiguous: for 16MiB = 16777216 bytes (what NCCL users almost always mean) write "
        '"16MiB" or 16777216; for 16000000 bytes write 16000000\n'
    )


def test_a_name_only_older_releases_read_is_declared_with_a_warning(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Refused as unknown before: NCCL 2.21.5 to 2.30.4 read it, 2.30.7 does not."""
    path = write_profile(
        "old", 'schema = 1\nname = "old"\nversion = 1\n[nccl]\nSHM_MEMCPY_MODE = 3\n'
    )
    warning = (
        "NCCL_SHM_MEMCPY_MODE: read by NCCL 2.21.5-2.30.4, not 2.30.7, the catalog's release "
        "(undocumented; read at src/transport/shm.cc:69 in NCCL 2.30.4); keep it only where "
        "the server loads one of those releases"
    )
    result = run_cli("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert f'{warning} [accept: "NCCL_SHM_MEMCPY_MODE ignored"]' in result.stdout + result.stderr
    shown = run_cli("show", "--format", "json", str(path))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["warnings"] == [warning]


def test_an_undeclared_name_only_older_releases_read_is_said_so(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """Not "unknown to NCCL; did you mean NCCL_P2P_USE_CUDA_MEMCPY?"."""
    write_profile("plain", 'schema = 1\nname = "plain"\nversion = 1\n[nccl]\nPROTO = "LL"\n')
    env = {"NCCL_SHM_USE_CUDA_MEMCPY": "1"}
    result = run_cli("run", "--dry-run", "plain", "--", "true", env=env)
    assert result.returncode == 1
    assert (
        "(calling environment; undeclared, read by NCCL 2.21.5-2.30.4, not 2.30.7)" in result.stderr
    )
    assert "P2P_USE_CUDA_MEMCPY" not in result.stderr


def test_deprecated_and_undocumented_names_get_notes() -> None:
    kind, message, fix = catalog.name_note("NCCL_MAX_NCHANNELS") or ("", "", "")
    assert kind == "deprecated"
    assert "deprecated in favor of NCCL_MAX_CTAS" in message
    assert "NCCL 2.30.7, the catalog's release, still reads it and the value applies" in message
    assert fix == "moving to the replacement is a tuning change to measure again"
    assert catalog.name_note("NCCL_CHECKS_DISABLE") == (
        "ignored",
        "deprecated and not read by NCCL 2.21.5 to 2.30.7 (Disabled per-call argument checks; "
        "deprecated 2.2.12, no longer read)",
        "",
    )
    kind, message, _ = catalog.name_note("NCCL_LL_BUFFSIZE") or ("", "", "")
    assert kind == "undocumented"
    assert "not in NCCL's documentation" in message
    assert catalog.name_note("NCCL_PROTO") is None


# Properties: whatever the spelling, the child gets one canonical value with the same meaning.

_UNITS = {"": 1, "K": 1024, "KiB": 1024, "M": 2**20, "MiB": 2**20, "G": 2**30, "GiB": 2**30}


@given(st.sampled_from(sorted(_UNITS)), st.integers(min_value=1, max_value=2**31 - 1))
def test_sizes_with_units_emit_decimal_bytes(unit: str, target: int) -> None:
    count = max(1, target // _UNITS[unit])
    emitted = rules.canonical("NCCL_BUFFSIZE", f"{count}{unit}")
    assert emitted == str(count * _UNITS[unit])
    assert grammar.strtoll(emitted) == count * _UNITS[unit]


@given(st.integers(min_value=2**31, max_value=2**62))
def test_sizes_nccl_would_truncate_are_refused(size: int) -> None:
    with pytest.raises(ValueError, match="below 2"):
        rules.canonical("NCCL_BUFFSIZE", size)


_PROTOCOLS = ["LL", "LL128", "Simple"]


@given(
    st.lists(st.sampled_from(_PROTOCOLS), min_size=1, max_size=3, unique=True),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_protocol_lists_in_any_case_mean_the_same(
    names: list[str], negate: bool, rng: random.Random
) -> None:
    spelled = ",".join(name.upper() if rng.random() < 0.5 else name.lower() for name in names)
    value = ("^" if negate else "") + spelled
    emitted = rules.canonical("NCCL_PROTO", value)
    assert set(emitted.lstrip("^").split(",")) <= set(_PROTOCOLS)
    assert rules.same_meaning("NCCL_PROTO", emitted, value)


@given(st.text(alphabet=" \t,;:^LlSsimpe1280", min_size=1, max_size=12))
def test_protocol_values_either_parse_or_explain(text: str) -> None:
    try:
        emitted = rules.canonical("NCCL_PROTO", text)
    except ValueError as error:
        assert str(error)
    else:
        assert not any(char.isspace() for char in emitted)
        assert rules.canonical("NCCL_PROTO", emitted) == emitted  # canonical is a fixed point


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_decimal_integers_read_back_exactly(number: int) -> None:
    assert grammar.strtoll(str(number)) == number
    assert rules.canonical("NCCL_IB_GID_INDEX", number) == str(number)


@given(st.integers(min_value=0, max_value=600))
def test_nthreads_accepts_exactly_multiples_of_32_in_range(number: int) -> None:
    ok = 64 <= number <= 512 and number % 32 == 0
    try:
        rules.canonical("NCCL_NTHREADS", number)
    except ValueError:
        assert not ok
    else:
        assert ok


_NAMES = sorted(catalog.catalog())
_SCALARS = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.floats())


@given(st.sampled_from(_NAMES), _SCALARS, st.text(max_size=12))
def test_no_value_or_env_string_makes_a_rule_crash(name: str, value: TomlValue, raw: str) -> None:
    try:
        emitted = rules.canonical(name, value)
    except ValueError as error:
        assert str(error)
    else:
        assert rules.same_meaning(name, emitted, emitted)
    rules.meaning(name, raw)  # any environment string, as `check` reads them
