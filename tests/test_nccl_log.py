"""nccl/log.py: NCCL's own log read per process, and the one judgement of a value against it.

tests/logs/nccl-2.28.9-one-rank.log and nccl-2.28.9-two-ranks.log are NCCL's own output,
unchanged: NCCL 2.28.9 (PyTorch 2.11) on one H200, one rank and then two ranks on the one GPU,
with NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16
NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 (and NCCL_SOCKET_IFNAME=lo, NCCL_HOSTID per rank for
the two ranks). Lines of other NCCL versions (2.30's init and WARN formats, a split) are
written here from the format strings of NCCL's src/init.cc and src/debug.cc.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_launch.nccl import catalog
from nccl_launch.nccl import log as log_module
from nccl_launch.nccl.log import LogReader, ProcessLog, judge, parse_line, read_log

LOGS = Path(__file__).parent / "logs"
ONE_RANK = (LOGS / "nccl-2.28.9-one-rank.log").read_text().splitlines()
TWO_RANKS = (LOGS / "nccl-2.28.9-two-ranks.log").read_text().splitlines()
PROFILE = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}


def applied(log: ProcessLog) -> dict[str, list[str]]:
    return {key: log.values(key) for key in log.applied}


def verdicts(log: ProcessLog, profile: dict[str, str]) -> dict[str, str]:
    return {key: judge(key, value, log).verdict for key, value in profile.items()}


def test_a_one_rank_communicator_reads_no_proto_or_algo() -> None:
    processes = read_log(ONE_RANK)
    assert list(processes) == ["vm:498 [0]"]
    log = processes["vm:498 [0]"]
    assert (log.communicators, log.completed) == ({"0x162dc720": 1}, {"0x162dc720"})
    assert applied(log) == {
        "NCCL_P2P_LEVEL": ["SYS"],
        "NCCL_MAX_NCHANNELS": ["16"],
        "NCCL_BUFFSIZE": ["16777216"],
        "NCCL_NTHREADS": ["512"],
    }
    assert verdicts(log, PROFILE) == {
        "NCCL_PROTO": "not-read",
        "NCCL_ALGO": "not-read",
        "NCCL_P2P_LEVEL": "ok",
        "NCCL_MAX_NCHANNELS": "ok",
        "NCCL_BUFFSIZE": "ok",
        "NCCL_NTHREADS": "ok",
    }
    assert judge("NCCL_PROTO", "LL", log).detail == "not read: one-rank communicator"
    # a value every communicator reads, never logged by a process that completed one
    assert judge("NCCL_SOCKET_IFNAME", "lo", log).verdict == "unconfirmed"


def test_two_ranks_confirm_every_value_and_say_their_own_hostid() -> None:
    processes = read_log(TWO_RANKS)
    assert list(processes) == ["vm:512 [0]", "vm:513 [0]"]
    profile = PROFILE | {"NCCL_SOCKET_IFNAME": "lo"}
    for process, log in processes.items():
        assert log.communicators == {"0x397bf090" if "512" in process else "0x3f5d1da0": 2}
        assert set(verdicts(log, profile).values()) == {"ok"}, process
        assert log.warn_lines == log.invalid == []
    assert [log.values("NCCL_HOSTID") for log in processes.values()] == [
        ["proof-host-0"],
        ["proof-host-1"],
    ]


def test_a_rank_that_applied_another_protocol_differs_by_its_own_line() -> None:
    # The real two-rank log, edited: rank 1 (pid 513) says Simple, as a rank does that set
    # NCCL_PROTO inside itself after start.
    edited = [
        line.replace(
            "NCCL_PROTO set by environment to LL", "NCCL_PROTO set by environment to Simple"
        )
        if line.startswith("vm:513:513 ")
        else line
        for line in TWO_RANKS
    ]
    processes = read_log(edited)
    assert judge("NCCL_PROTO", "LL", processes["vm:512 [0]"]).verdict == "ok"
    judgement = judge("NCCL_PROTO", "LL", processes["vm:513 [0]"])
    assert (judgement.verdict, judgement.detail, judgement.said) == (
        "differs", 'applied "Simple"', ("NCCL_PROTO set by environment to Simple",))  # fmt: skip


def test_values_are_read_as_nccl_writes_them() -> None:
    lines = [
        "h:7:7 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16.",  # an integer: a period
        "h:7:7 [0] NCCL INFO NCCL_PROTO set by environment to LL.",  # a string: kept as set
        "h:7:7 [0] NCCL INFO NCCL_NTHREADS set by environment to 100.",
        "h:7:7 [0] NCCL INFO Invalid NCCL_NTHREADS 100 (must be a multiple of 32)",
        "h:7:7 [0] NCCL INFO Invalid NCCL_NTHREADS 1024 (maximum 512).",
        "h:7:7 [0] NCCL INFO Invalid value 99999999999999999999 for NCCL_NCHANNELS_PER_NET_PEER, "
        "using default 2.",
    ]
    log = read_log(lines)["h:7 [0]"]
    assert applied(log) == {
        "NCCL_BUFFSIZE": ["16"],
        "NCCL_PROTO": ["LL."],
        "NCCL_NTHREADS": ["100"],
    }
    assert log.invalid == [
        "Invalid NCCL_NTHREADS 100 (must be a multiple of 32)",
        "Invalid NCCL_NTHREADS 1024 (maximum 512)",
        "Invalid NCCL_NCHANNELS_PER_NET_PEER 99999999999999999999 (overflow: NCCL keeps its "
        "default 2)",
    ]
    judgement = judge("NCCL_NTHREADS", "512", log)
    assert judgement.verdict == "differs"
    assert judgement.said == (
        "NCCL_NTHREADS set by environment to 100.",
        "Invalid NCCL_NTHREADS 100 (must be a multiple of 32)",
        "Invalid NCCL_NTHREADS 1024 (maximum 512)",
    )
    assert judge("NCCL_IB_HCA", "mlx5_0", log).verdict == "not-logged"


@pytest.mark.parametrize(
    "line",
    [
        # NCCL 2.28.9: src/debug.cc, a WARN has a timestamp by default
        '[2026-12-04 18:03:05] vm:1450:1450 [0] graph/tuning.cc:104 NCCL WARN Unrecognized '
        'element token "LL " when parsing "LL "',
        # NCCL 2.30: the function after the line
        '[2026-12-04 18:03:05] vm:1450:1450 [0] graph/tuning.cc:104 (parseList) NCCL WARN '
        'Unrecognized element token "LL " when parsing "LL "',
        # as journalctl prints it
        'Dec 04 18:03:05 vm python[1450]: [2026-12-04 18:03:05] vm:1450:1450 [0] '
        'graph/tuning.cc:104 NCCL WARN Unrecognized element token "LL " when parsing "LL "',
    ],
)  # fmt: skip
def test_warnings_are_read_with_their_timestamp_and_place(line: str) -> None:
    assert read_log([line])["vm:1450 [0]"].warn_lines == [
        'graph/tuning.cc:104 Unrecognized element token "LL " when parsing "LL "'
    ]


@pytest.mark.parametrize(
    "line",
    [
        "vm:1:1 [0] NCCL WARN no place",
        "vm:1:1 [0] a b c NCCL WARN too many words",
        "[0] graph/tuning.cc:104 NCCL WARN no origin",
        "vm:1:1 [0]graph/tuning.cc:104 NCCL WARN glued",
        "vm:1:1 [0] NCCL INFOx",
    ],
)
def test_lines_that_are_not_ncclss_are_no_process(line: str) -> None:
    assert parse_line(line) is None


INIT_START_230 = (
    "h:9:9 [0] NCCL INFO [Rank 0] ncclCommInitRankConfig comm 0xa1 rank 0 nranks 1 cudaDev 0 "
    "nvmlDev 0 busId 60 commId 0x1 - Init START"
)
SPLIT_COMPLETE_228 = (
    "h:9:9 [0] NCCL INFO ncclCommSplit comm 0xb2 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 "
    "parent 0xa1 splitCount 1 color 0 key 0 - Init COMPLETE"
)


def test_a_process_is_judged_on_all_its_communicators() -> None:
    reader = LogReader()
    reader.feed(INIT_START_230)
    log = reader.processes["h:9 [0]"]
    assert judge("NCCL_PROTO", "LL", log).verdict == "not-read"  # only a one-rank one so far
    assert judge("NCCL_NTHREADS", "512", log).verdict == "pending"  # not complete yet
    reader.feed(INIT_START_230.replace("START", "COMPLETE").replace("[Rank 0] ", ""))
    reader.feed(SPLIT_COMPLETE_228.replace("- Init COMPLETE", "- Init START"))
    assert log.communicators == {"0xa1": 1, "0xb2": 2}
    assert judge("NCCL_PROTO", "LL", log).verdict == "pending"  # the two-rank one is starting
    reader.feed("h:9:9 [0] NCCL INFO NCCL_PROTO set by environment to LL")
    reader.feed(SPLIT_COMPLETE_228)
    assert judge("NCCL_PROTO", "LL", log).verdict == "ok"
    # a second communicator of two ranks that completed without saying NCCL_PROTO
    reader.feed(SPLIT_COMPLETE_228.replace("0xb2", "0xc3"))
    judgement = judge("NCCL_PROTO", "LL", log)
    assert (judgement.verdict, judgement.detail) == (
        "unconfirmed", "reported for 1 of its 2 communicators that read it")  # fmt: skip


def test_older_init_lines_without_the_function_name() -> None:
    log = read_log(
        [
            "gpu:5:6 [1] NCCL INFO comm 0x55 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 2000 "
            "commId 0x9e - Init COMPLETE",
            # NCCL's other per-communicator lines are no init line
            "gpu:5:5 [1] NCCL INFO comm 0x55 rank 1 nRanks 8 nNodes 1 localRanks 8 localRank 1",
            "gpu:5:5 [1] NCCL INFO comm 0x55 rank 1 nranks 8 cudaDev 1 busId 2000 - Destroy "
            "COMPLETE",
        ]
    )["gpu:5 [1]"]
    assert (log.communicators, log.complete) == ({"0x55": 8}, True)


def test_every_name_nccl_logged_in_the_real_logs_is_known_as_logged() -> None:
    names = {
        key
        for log in [*read_log(ONE_RANK).values(), *read_log(TWO_RANKS).values()]
        for key in log.applied
    }
    assert names == {*PROFILE, "NCCL_SOCKET_IFNAME", "NCCL_HOSTID"}
    for name in names:
        var = catalog.lookup(name)
        assert var is not None and var.logged is not None, name
    proto = catalog.lookup("NCCL_PROTO")
    assert proto is not None and proto.logged is not None
    assert (proto.logged.site, proto.logged.min_ranks) == ("src/graph/tuning.cc:455", 2)


def test_every_logged_name_is_one_nccl_reads() -> None:
    logged = [var for var in catalog.catalog().values() if var.logged is not None]
    assert all(var.read_by_source for var in logged)
    periods = {var.name for var in logged if var.logged is not None and var.logged.period}
    assert {"NCCL_BUFFSIZE", "NCCL_COLLNET_ENABLE"} <= periods
    assert not periods & {"NCCL_PROTO", "NCCL_SOCKET_IFNAME", "NCCL_HOSTID", "NCCL_P2P_LEVEL"}


def test_each_communicator_keeps_the_last_value_its_own_thread_logged() -> None:
    """Two communicators initialised at once in two threads: each value NCCL reads per
    communicator belongs to the one its thread is initialising."""
    reader = LogReader()
    start = "h:9:{tid} [0] NCCL INFO ncclCommInitRankConfig comm {comm} rank 0 nranks 2 - Init "
    for tid, comm in (("10", "0xa1"), ("11", "0xb2")):
        reader.feed(start.format(tid=tid, comm=comm) + "START")
    for tid, value in (("11", "Simple"), ("10", "LL"), ("11", "LL128")):
        reader.feed(f"h:9:{tid} [0] NCCL INFO NCCL_PROTO set by environment to {value}")
    reader.feed("h:9:10 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.")
    for tid, comm in (("10", "0xa1"), ("11", "0xb2")):
        reader.feed(start.format(tid=tid, comm=comm) + "COMPLETE")
    log = reader.processes["h:9 [0]"]
    assert log.applied == {
        "NCCL_PROTO": {"0xa1": "LL", "0xb2": "LL128"},
        "NCCL_BUFFSIZE": {"": "4194304"},  # read once a process
    }
    judgement = judge("NCCL_PROTO", "LL", log)
    assert (judgement.verdict, judgement.value) == ("differs", "LL128")


def test_a_log_of_any_length_keeps_a_bounded_part() -> None:
    """Lines by the hundred thousand, every one new: what one process's log keeps stays within
    its bounds, the first of each kind kept, a kept value still brought up to date."""
    reader = LogReader()
    head = "h:9:9 [0] NCCL INFO "
    reader.feed(head + "NCCL_SOCKET_IFNAME set by environment to lo")
    known = sorted(catalog.catalog())  # every name NCCL reads: more than a log keeps
    for n in range(2_000):
        reader.feed(f"{head}ncclCommInitRankConfig comm 0x{n:x} rank 0 nranks 2 - Init START")
        reader.feed(f"{head}{known[n % len(known)]} set by environment to {n}")
        reader.feed(f"{head}NCCL_X{n} set by environment to {n}")  # a name NCCL never read
        reader.feed(f"h:9:9 [0] misc/x.cc:{n} NCCL WARN flood {n}")
        reader.feed(f"{head}Invalid NCCL_NTHREADS {n} (must be a multiple of 32)")
    reader.feed(head + "NCCL_SOCKET_IFNAME set by environment to " + "e" * (1 << 20))
    log = reader.processes["h:9 [0]"]
    assert len(log.communicators) == log_module.COMMUNICATORS_KEPT
    assert sum(map(len, log.applied.values())) == log_module.VALUES_KEPT
    unknown = [key for key in log.applied if catalog.lookup(key) is None]
    assert len(unknown) == log_module.UNKNOWN_KEPT
    assert log.warn_lines[0] == "misc/x.cc:0 flood 0"
    assert len(log.warn_lines) == len(log.invalid) == log_module.LINES_KEPT
    [ifname] = log.values("NCCL_SOCKET_IFNAME")
    assert ifname == "e" * log_module.VALUE_LIMIT + "..."


def test_a_reader_of_some_pids_keeps_their_lines_alone() -> None:
    reader = LogReader(pids={"513"})
    for line in TWO_RANKS:
        reader.feed(line)
    assert list(reader.processes) == ["vm:513 [0]"]
    assert reader.log_of(512) is None
    log = reader.log_of(513)
    assert log is not None and log.values("NCCL_HOSTID") == ["proof-host-1"]
