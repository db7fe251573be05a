"""NCCL_PROTO / NCCL_ALGO compared by the enable table NCCL's parseList builds.

The reference model below is written from tuning.cc's C code (parseList and the enable block of
ncclTopoTuneModel, cited in docs/explanation.md), walking the string with a strtok_r of its own
and comparing pointers as the C code does; it shares no code with nccl_launch.nccl.selection.
"""

from __future__ import annotations

import itertools
import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.nccl.rules import RULES
from nccl_launch.nccl.selection import FUNCTIONS, Rejected, SelectionRule
from tests.conftest import RunCli, WriteProfile

PROTO = RULES["PROTO"]
ALGO = RULES["ALGO"]
assert isinstance(PROTO, SelectionRule) and isinstance(ALGO, SelectionRule)
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
CORPUS = 300  # generated values per variable


# --- the reference model: tuning.cc's C, step by step ------------------------------------


def _strtok(buf: str, pos: int, delims: str) -> tuple[int | None, str, int]:
    """glibc strtok_r: skip leading delimiters, cut at the next one; (start, token, next)."""
    while pos < len(buf) and buf[pos] in delims:
        pos += 1
    if pos >= len(buf):
        return None, "", pos
    end = pos
    while end < len(buf) and buf[end] not in delims:
        end += 1
    return pos, buf[pos:end], min(end + 1, len(buf))


def _fold(text: str) -> str:
    """tolower() of the C locale: only A-Z change."""
    return "".join(chr(ord(char) + 32) if "A" <= char <= "Z" else char for char in text)


def _strcasecmp_equal(left: str, right: str) -> bool:
    return _fold(left) == _fold(right)


def c_parse_list(text: str, elems: tuple[str, ...], table: list[int]) -> str:
    """parseList(str, ncclFuncStr, NCCL_NUM_FUNCTIONS, elems, nelems, list): 'ok', 'invalid'
    (ncclInvalidUsage) or 'crash' (elemList is NULL when read)."""
    full_at, full, full_next = _strtok(text, 0, ";")
    while full_at is not None:
        sub_at, prefix, sub_next = _strtok(full, 0, ":")
        elem_at, elem_list, _ = (
            _strtok(full, sub_next, ":") if sub_at is not None else (None, "", 0)
        )
        prefix_or_null: str | None = prefix if sub_at is not None else None
        if elem_at is None:
            if full_at != 0:  # fullToken != fullStr
                return "invalid"
            if prefix_or_null is None:
                return "crash"
            elem_list, prefix_or_null = prefix_or_null, None
        unset, set_ = (1, 0) if elem_list[0] == "^" else (0, 1)
        if elem_list[0] == "^":
            elem_list = elem_list[1:]
        found_prefix = False
        for p, func in enumerate(FUNCTIONS):
            if prefix_or_null is not None and not _strcasecmp_equal(prefix_or_null, func):
                continue
            found_prefix = True
            for e in range(len(elems)):
                table[p * len(elems) + e] = unset
            elem_at2, elem, elem_next = _strtok(elem_list, 0, ",")
            while elem_at2 is not None:
                matches = [e for e in range(len(elems)) if _strcasecmp_equal(elem, elems[e])]
                if not matches:
                    return "invalid"
                table[p * len(elems) + matches[0]] = set_
                elem_at2, elem, elem_next = _strtok(elem_list, elem_next, ",")
        if not found_prefix:
            return "invalid"
        full_at, full, full_next = _strtok(text, full_next, ";")
    return "ok"


def c_table(text: str, elems: tuple[str, ...]) -> tuple[str, list[int]]:
    """ncclTopoTuneModel's enable block: every cell 1, LL128 2, then parseList."""
    table = [2 if name == "LL128" else 1 for _ in FUNCTIONS for name in elems]
    return c_parse_list(text, elems, table), table


def agrees(rule: SelectionRule, elems: tuple[str, ...], text: str) -> None:
    status, cells = c_table(text, elems)
    read = rule.table(text)
    if status == "ok":
        assert not isinstance(read, Rejected), (text, read)
        assert [state for _, _, state in read] == cells, text
    else:
        assert isinstance(read, Rejected), (text, read)
        assert read.crash == (status == "crash"), text


# --- the corpus ----------------------------------------------------------------------------


def pieces(names: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Strings built from what parseList reacts to: names in any case, functions, separators,
    '^', spaces, and a few wrong words."""
    word = st.sampled_from(names + FUNCTIONS + ("Fast", "SendRecv", "", " ", "ll 128"))
    cased = st.tuples(word, st.sampled_from(["same", "upper", "lower"])).map(
        lambda pair: {"same": pair[0], "upper": pair[0].upper(), "lower": pair[0].lower()}[pair[1]]
    )
    part = st.one_of(cased, st.sampled_from([",", ";", ":", "^", ",,", ";;", "::"]))
    return st.lists(part, max_size=10).map("".join)


@pytest.mark.parametrize(("rule", "elems"), [(PROTO, PROTOCOLS), (ALGO, ALGORITHMS)])
def test_corpus_agrees_with_the_model_of_the_c_code(
    rule: SelectionRule, elems: tuple[str, ...]
) -> None:
    seen: set[str] = set()

    @settings(max_examples=CORPUS, database=None, deadline=None)
    @given(st.one_of(pieces(elems), st.text(max_size=12)))
    def check(text: str) -> None:
        seen.add(text)
        agrees(rule, elems, text)  # every string yields NCCL's table or is rejected as NCCL does

    check()
    assert len(seen) >= 200


@pytest.mark.parametrize(("rule", "elems"), [(PROTO, PROTOCOLS), (ALGO, ALGORITHMS)])
def test_order_duplicates_and_empty_tokens_never_matter(
    rule: SelectionRule, elems: tuple[str, ...]
) -> None:
    seen: set[str] = set()

    @settings(max_examples=CORPUS, database=None, deadline=None)
    @given(
        st.lists(st.sampled_from(elems), min_size=1, max_size=6),
        st.randoms(use_true_random=False),
        st.sampled_from(["", "^", "AllReduce:", "broadcast:^"]),
    )
    def check(chosen: list[str], random: object, head: str) -> None:
        plain = head + ",".join(chosen)
        shuffled = list(chosen) + random.sample(chosen, k=len(chosen))  # type: ignore[attr-defined]
        random.shuffle(shuffled)  # type: ignore[attr-defined]
        spaced = head + ",," + ",,,".join(name.swapcase() for name in shuffled) + ",;;"
        seen.add(spaced)
        expected = rule.table(plain)
        assert not isinstance(expected, Rejected)
        assert rule.table(spaced) == expected
        assert rule.meaning(spaced) == rule.meaning(plain)
        agrees(rule, elems, spaced)

    check()
    assert len(seen) >= 200


@pytest.mark.parametrize(("rule", "elems"), [(PROTO, PROTOCOLS), (ALGO, ALGORITHMS)])
def test_a_caret_equals_the_complement(rule: SelectionRule, elems: tuple[str, ...]) -> None:
    seen: set[str] = set()

    @settings(max_examples=CORPUS, database=None, deadline=None)
    @given(st.sets(st.sampled_from(elems)), st.sampled_from(["", "AllReduce:", "REDUCE:"]))
    def check(excluded: set[str], head: str) -> None:
        rest = [name for name in elems if name not in excluded]
        caret = head + "^" + ",".join(sorted(excluded))
        seen.add(caret)
        if rest:  # with nothing left the plain list is empty, which means "keep the defaults"
            assert rule.meaning(caret) == rule.meaning(head + ",".join(rest))
        agrees(rule, elems, caret)

    check()


def test_a_leading_semicolon_makes_the_first_entry_a_later_one() -> None:
    # parseList compares fullToken with fullStr: only a string's very first entry may omit func:.
    assert not isinstance(PROTO.meaning("LL;"), Rejected)
    assert isinstance(PROTO.meaning(";LL"), Rejected)
    assert not isinstance(PROTO.meaning(";AllReduce:LL"), Rejected)


def test_empty_strings_and_bare_separators_keep_the_defaults() -> None:
    for text in ("", ";", ";;;"):
        assert PROTO.meaning(text) is None  # same table as unset
    assert PROTO.meaning("LL,LL128,Simple") is not None  # LL128 forced on, not the default


def test_a_colon_only_first_entry_crashes_nccl() -> None:
    read = PROTO.meaning(":")
    assert isinstance(read, Rejected) and read.crash
    later = PROTO.meaning("AllReduce:LL;:")
    assert isinstance(later, Rejected) and not later.crash


def test_rejected_strings_never_match_even_themselves() -> None:
    assert PROTO.meaning("LL, Simple") != PROTO.meaning("LL, Simple")


# --- through the console script -------------------------------------------------------------

MATCHES = [
    ("PROTO", "^LL128", "LL,Simple"),
    ("PROTO", "^LL128", "Simple,LL"),
    ("PROTO", "LL,Simple", "^LL128"),
    ("PROTO", "^LL", "LL128,Simple"),
    ("ALGO", "^Ring", "Tree,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT"),
    ("PROTO", "LL,Simple", "LL,,Simple"),
    ("PROTO", "LL", "LL;"),
    ("PROTO", "AllReduce:LL", "allreduce:LL:Simple"),
]
DRIFTS = [
    ("PROTO", "LL", "LL128", None),
    ("PROTO", "^LL128", "LL", None),
    ("PROTO", "AllReduce:LL", "LL", None),
    ("PROTO", "LL,LL128,Simple", "", "NCCL treats it as unset"),
    ("PROTO", "LL", ";LL", "NCCL rejects it: init fails with ncclInvalidUsage"),
    ("PROTO", "LL,Simple", "LL, Simple", "NCCL rejects it: init fails with ncclInvalidUsage"),
    ("ALGO", "Ring,Tree", "Ring, Tree", "NCCL rejects it: init fails with ncclInvalidUsage"),
    ("ALGO", "Ring", "Rnig", "NCCL rejects it: init fails with ncclInvalidUsage"),
    ("PROTO", "LL", "Reduce:Fast", "NCCL rejects it: init fails with ncclInvalidUsage"),
    ("PROTO", "LL", ":", "NCCL crashes reading it"),
]


def _run(
    write_profile: WriteProfile, run_cli: RunCli, key: str, declared: str, inherited: str
) -> tuple[int, str]:
    write_profile(
        "sel", f'schema = 1\nname = "sel"\nversion = 1\n\n[nccl]\n{key} = {json.dumps(declared)}\n'
    )
    result = run_cli(
        "run", "sel", "--", sys.executable, "-c", "pass", env={f"NCCL_{key}": inherited}
    )
    return result.returncode, result.stderr


@pytest.mark.parametrize(("key", "declared", "inherited"), MATCHES)
def test_run_accepts_a_spelling_nccl_reads_the_same(
    write_profile: WriteProfile, nccl_launch: RunCli, key: str, declared: str, inherited: str
) -> None:
    code, stderr = _run(write_profile, nccl_launch, key, declared, inherited)
    assert code == 0, stderr


@pytest.mark.parametrize(("key", "declared", "inherited", "note"), DRIFTS)
def test_run_refuses_a_spelling_nccl_reads_otherwise(
    write_profile: WriteProfile,
    run_cli: RunCli,
    key: str,
    declared: str,
    inherited: str,
    note: str | None,
) -> None:
    code, stderr = _run(write_profile, run_cli, key, declared, inherited)
    assert code == 1, stderr
    assert f"NCCL_{key}" in stderr
    if note:
        assert note in stderr, stderr
    assert "Traceback" not in stderr


def test_every_pair_of_the_issue_in_both_directions() -> None:
    for key, left, right in MATCHES:
        rule = RULES[key]
        assert rule.meaning(left) == rule.meaning(right), (left, right)
    for left, right in itertools.combinations(["LL", "LL128", "Simple", "^LL", "AllReduce:LL"], 2):
        assert PROTO.meaning(left) != PROTO.meaning(right), (left, right)
