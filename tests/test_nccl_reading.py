"""NCCL's own reading of levels, integers and empty values, modelled independently
here from NCCL 2.30's C code, and checked through `nccl-launch run` and `convert`.

The models below are a direct transcription of the cited code, written apart from
nccl_launch/nccl/grammar.py so that the corpus compares two readings, not one with itself.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.nccl import rules
from nccl_launch.nccl.grammar import Undefined
from nccl_launch.profile.chain import read_chain
from nccl_launch.tune.candidates import Candidates
from tests.conftest import RunCli, WriteProfile
from tests.helpers import STANDIN, read_record

# src/graph/topo.cc topoPathTypeStr, up to PATH_SYS; paths.cc levelsOldToNew.
NAMES = ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"]
OLD_TO_NEW = ["LOC", "PIX", "PXB", "PHB", "SYS", "SYS"]
LONG_MAX = 2**63 - 1
SERVE = "python3 -m sglang.launch_server --model-path /m\n"


def c_strtol(text: str) -> int:
    """strtol(str, NULL, 0) on a string whose first character is a digit (no sign, no
    blanks): the longest prefix in the base the prefix picks; LONG_MAX on overflow."""
    value = c_digits(text, LONG_MAX)
    return LONG_MAX if value is None else value


def c_digits(text: str, limit: int) -> int | None:
    """The value of the longest prefix of digits in the base C picks (0x: 16, 0: 8, else 10),
    accumulated digit by digit as the C loop does; None once it passes `limit`."""
    if re.match(r"0[xX][0-9a-fA-F]", text):
        digits, base = re.match(r"0[xX]([0-9a-fA-F]+)", text).group(1), 16  # type: ignore[union-attr]
    elif text.startswith("0"):
        digits, base = re.match(r"[0-7]*", text).group(0), 8  # type: ignore[union-attr]
    else:
        digits, base = re.match(r"[0-9]*", text).group(0), 10  # type: ignore[union-attr]
    value = 0
    for digit in digits:
        value = value * base + int(digit, 16)
        if value > limit:
            return None
    return value


def nccl_level(text: str) -> str | type[Undefined] | None:
    """ncclGetLevel: exact name; `str[0] >= '0' && str[0] <= '9'`; `int oldLevel = strtol`,
    clamped to 5 above; a negative int indexes outside the table (Undefined); else unset."""
    if text in NAMES:
        return text
    if text[:1] and "0" <= text[0] <= "9":
        old = c_strtol(text) % 2**32  # long -> int: the low 32 bits, two's complement
        if old >= 2**31:
            return Undefined
        return OLD_TO_NEW[min(old, 5)]
    return None


def nccl_param(text: str) -> int | None:
    """ncclLoadParam: `if (str && strlen(str) > 0)` strtoll, errno keeps the default (None);
    an empty value keeps the default too."""
    if not text:
        return None
    match = re.match(r"[ \t\n\v\f\r]*([+-]?)(.*)", text, re.DOTALL)
    assert match is not None
    sign, rest = match.groups()
    magnitude = c_digits(rest, 2**63)
    if magnitude is None:
        return None
    value = -magnitude if sign == "-" else magnitude
    return value if -(2**63) <= value <= LONG_MAX else None


def level_read(raw: str) -> object:
    read = rules.meaning("NCCL_P2P_LEVEL", raw)
    return Undefined if isinstance(read, Undefined) else read


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        ("4294967296", "LOC"),  # 2^32: the int is 0
        ("4294967299", "PHB"),  # 2^32 + 3
        ("4294967301", "SYS"),  # 2^32 + 5
        ("2147483647", "SYS"),  # INT_MAX: clamped to 5
        ("2147483648", Undefined),  # 2^31: INT_MIN, a negative index
        ("99999999999999999999", Undefined),  # overflow: LONG_MAX, the int -1
        ("0x10", "SYS"),
        ("08", "LOC"),  # octal stops at the 8
        ("3abc", "PHB"),
        ("\u00b2", None),  # a superscript two is no ASCII digit: unset
        ("\u0663", None),
        ("", None),
        (" 3", None),  # the first character must be a digit
        ("sys", None),
    ],
)
def test_legacy_levels_follow_int_oldlevel_strtol(raw: str, read: object) -> None:
    assert level_read(raw) == read
    assert nccl_level(raw) == read


def test_undefined_levels_never_match_even_themselves() -> None:
    for other in ["2147483648", "LOC", "SYS", "0", "5"]:
        assert not rules.same_meaning("NCCL_P2P_LEVEL", "2147483648x", other)


@pytest.mark.parametrize("name", ["NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"])
@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(
        st.integers(0, 2**70).map(str),
        st.integers(0, 2**70).map(hex),
        st.integers(0, 2**70).map(lambda n: "0" + oct(n)[2:]),
        st.sampled_from(NAMES + [n.lower() for n in NAMES]),
        st.text(max_size=12),
    )
)
def test_level_corpus_agrees_with_the_c_model(name: str, raw: str) -> None:
    read = rules.meaning(name, raw)
    assert (Undefined if isinstance(read, Undefined) else read) == nccl_level(raw)


@pytest.mark.parametrize("name", ["NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MAX_NCHANNELS"])
@settings(max_examples=300, deadline=None)
@given(
    raw=st.one_of(
        st.just(""),
        st.integers(-(2**65), 2**65).map(str),
        st.integers(0, 2**65).map(hex),
        st.integers(0, 2**65).map(lambda n: "0" + oct(n)[2:]),
        st.text(alphabet="0123456789xXabcdefMGK+- \t", max_size=24),
    )
)
def test_integer_corpus_agrees_with_the_c_model(name: str, raw: str) -> None:
    assert rules.meaning(name, raw) == nccl_param(raw)


def test_profile_refuses_unicode_digits_as_levels(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    write_profile("p", PROFILE.format(level="\u00b2"))
    result = run_cli("run", "--dry-run", "p")
    assert result.returncode == 2
    assert "(NCCL treats '\u00b2' as unset); valid: one of LOC" in result.stderr
    assert "P2P_LEVEL" in result.stderr and "Traceback" not in result.stderr


PROFILE = """
schema = 1
name = "p"
version = 1

[nccl]
P2P_LEVEL = "{level}"
BUFFSIZE = 8

[server]
model_path = "/m"
"""


@pytest.mark.parametrize(
    ("variable", "profile_level", "raw", "code", "note"),
    [
        ("NCCL_P2P_LEVEL", "LOC", "4294967296", 0, None),
        ("NCCL_P2P_LEVEL", "PHB", "4294967299", 0, None),
        ("NCCL_P2P_LEVEL", "SYS", "4294967296", 1, None),  # was a false match
        ("NCCL_P2P_LEVEL", "SYS", "2147483648", 1, "outside its table: undefined behaviour"),
        ("NCCL_P2P_LEVEL", "LOC", "\u00b2", 1, "NCCL treats it as unset"),  # was LOC
        ("NCCL_BUFFSIZE", "LOC", "010", 0, None),
        ("NCCL_BUFFSIZE", "LOC", "", 1, "empty: NCCL keeps its default"),
    ],
)
def test_run_judges_drift_by_nccls_reading(
    variable: str, profile_level: str, raw: str, code: int, note: str | None,
    write_profile: WriteProfile, run_cli: RunCli,
) -> None:  # fmt: skip
    write_profile("p", PROFILE.format(level=profile_level))
    result = run_cli("run", "--dry-run", "p", env={variable: raw})
    assert result.returncode == code, result.stderr
    if note:
        assert note in result.stderr
        assert "NCCL reads 0" not in result.stderr


def test_convert_keeps_what_nccl_read_and_run_passes_it_on(
    nccl_launch: RunCli, tmp_path: Path
) -> None:
    Path("s.sh").write_text(
        "export NCCL_BUFFSIZE=010\nexport NCCL_NTHREADS=0x200\nexport NCCL_MAX_NCHANNELS=016\n"
        "python3 -m sglang.launch_server --model-path /m\n"
    )
    converted = nccl_launch("convert", "s.sh", "--name", "s")
    assert converted.returncode == 0, converted.stderr
    for note in ["NCCL_BUFFSIZE=010: NCCL reads 8; stored 8",
                 "NCCL_NTHREADS=0x200: NCCL reads 512; stored 512",
                 "NCCL_MAX_NCHANNELS=016: NCCL reads 14; stored 14"]:  # fmt: skip
        assert note in converted.stderr
    profile = tomllib.loads(Path("profiles/s.toml").read_text())
    assert profile["nccl"] == {"BUFFSIZE": 8, "NTHREADS": 512, "MAX_NCHANNELS": 14}
    assert "NCCL_BUFFSIZE=010: NCCL reads 8" in profile["provenance"]["notes"]

    out = tmp_path / "record.json"
    env = {"PYTHONPATH": str(STANDIN), "STANDIN_RECORD": str(out)}
    launched = nccl_launch("run", "s", env=env)
    assert launched.returncode == 0, launched.stderr
    child = read_record(out)["env"]
    assert [nccl_param(child[f"NCCL_{k}"]) for k in ["BUFFSIZE", "NTHREADS", "MAX_NCHANNELS"]] == [
        8, 512, 14,
    ]  # fmt: skip


def test_convert_drops_an_empty_integer_with_a_note(run_cli: RunCli) -> None:
    Path("e.sh").write_text(
        "export NCCL_BUFFSIZE=\npython3 -m sglang.launch_server --model-path /m\n"
    )
    converted = run_cli("convert", "e.sh")
    assert converted.returncode == 0, converted.stderr
    assert "NCCL_BUFFSIZE=: empty: NCCL keeps its default; not stored" in converted.stderr
    assert "nccl" not in tomllib.loads(Path("profiles/e.toml").read_text())


@pytest.mark.parametrize(
    ("variable", "raw", "note"),
    [
        ("NCCL_BUFFSIZE", "010", None),  # 8: what the profile says
        ("NCCL_BUFFSIZE", "0x10", "NCCL reads 16"),
        ("NCCL_P2P_LEVEL", "3", "NCCL reads PHB"),
    ],
)
def test_run_and_convert_word_nccls_reading_alike(
    variable: str, raw: str, note: str | None, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """One reading, one wording: the note `run` gives a value that drifts is the one
    `convert` gives when it stores what NCCL read."""
    write_profile("p", PROFILE.format(level="SYS"))
    ran = run_cli("run", "--dry-run", "p", env={variable: raw})
    Path("s.sh").write_text(
        f"export {variable}={raw}\npython3 -m sglang.launch_server --model-path /m\n"
    )
    converted = run_cli("convert", "s.sh", "--name", "s")
    assert converted.returncode == 0, converted.stderr
    if note is None:
        assert ran.returncode == 0, ran.stderr
        assert f"{variable}={raw}: NCCL reads 8; stored 8" in converted.stderr
    else:
        assert ran.returncode == 1, ran.stderr
        assert f"; {note})" in ran.stderr
        assert f"{variable}={raw}: {note}; stored" in converted.stderr


def test_tune_writes_its_values_as_convert_does(write_profile: WriteProfile) -> None:
    """A tune candidate (and so the version `tune --write` writes) keeps NCCL's canonical
    values typed the way `convert` types them: a size in its binary unit, a switch as a
    bool, a count as an integer."""
    path = write_profile("q", PROFILE.format(level="SYS"))
    values = {"BUFFSIZE": "8388608", "MAX_NCHANNELS": "16", "P2P_DISABLE": "1", "PROTO": "LL128"}
    candidate = Candidates(read_chain(path)).get(dict(values))
    assert candidate.data["nccl"] == {
        "P2P_LEVEL": "SYS", "BUFFSIZE": "8MiB", "MAX_NCHANNELS": 16, "P2P_DISABLE": True,
        "PROTO": "LL128",
    }  # fmt: skip
    for name, value in values.items():
        assert rules.canonical(f"NCCL_{name}", candidate.data["nccl"][name]) == value
