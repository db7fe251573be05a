"""files/toml_text.py: TOML's nesting bounded before tomllib reads it, counted as tomllib
reads the text (strings, comments and quoted keys are no level)."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from nccl_launch.files.toml_text import MAX_NESTING, TooDeep, check_nesting, parse_toml
from tests.conftest import RunCli, WriteProfile

# The forms a level is reached in, each as the text of something at level `depth`.
DEPTH = MAX_NESTING


def dotted(depth: int) -> str:
    return "a" + ".a" * (depth - 1) + " = 1\n"


def header(depth: int) -> str:
    return "[" + ".".join(["t"] * depth) + "]\n"


def tables_array(depth: int) -> str:  # [[a]]: the list and its element
    return "[[" + ".".join(["t"] * (depth - 1)) + "]]\n"


def arrays(depth: int) -> str:  # the innermost item at `depth`
    return "a = " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"


def inline_tables(depth: int) -> str:
    return "a = " + "{a = " * (depth - 1) + "1" + "}" * (depth - 1) + "\n"


def mixed(depth: int) -> str:
    """[t] 1, x.y 2 3, its items 4, {k.l 5 6, [[ 7 8: the rest on the third line."""
    rest = depth - 8
    return (
        "[t]\nx.y = [ # [[[\n  {k.l = [['''{{{''', "
        + "[" * rest
        + '"]]]"'
        + "]" * rest
        + "]]},\n]\n"
    )


FORMS = [(dotted, 1), (header, 1), (tables_array, 1), (arrays, 1), (inline_tables, 1), (mixed, 3)]


@pytest.mark.parametrize(("form", "line"), FORMS)
def test_the_limit_is_exact_in_every_form(form: Any, line: int) -> None:
    assert parse_toml(form(DEPTH)) == tomllib.loads(form(DEPTH))
    assert depth(tomllib.loads(form(DEPTH))) == DEPTH
    with pytest.raises(TooDeep) as raised:
        check_nesting('# a comment\nname = "x"\n\n' + form(DEPTH + 1))
    assert raised.value.line == 3 + line


TEXTS_OF_NO_LEVEL = [
    'url = "http://a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s/[[[[[[[[[[[[[[[[[[{{{{{{{{{{{{{{{{{{"',
    "url = 'a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t[[[[[[[[[[[[[[[[[[[[[['",
    '"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s" = 1',
    "'a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s' = 1",
    "[\"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s\".'t.u.v.w.x.y.z.a.b.c.d.e.f.g.h.i.j']",
    "# a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s = [[[[[[[[[[[[[[[[[[[[[[",
    'a = """\n.[[[[[[[[[[[[[[[[[[[\n[[[[[ "" \\""" [[[[[[[[[ \n"""""',
    "a = '''\n.[[[[[[[[[[[[[[[[[[[\n[[[[[[[[[[[[[[[ ''[[[[[[\n'''''",
    'a = "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["',
    "a = 1979-05-27T07:32:00.999+07:00 # [[[[[[[[[[[[[[[[[[[[[[",
    "a = [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5]",
]


@pytest.mark.parametrize("text", TEXTS_OF_NO_LEVEL)
def test_a_dot_or_bracket_in_a_string_or_comment_is_no_level(text: str) -> None:
    assert parse_toml(text) == tomllib.loads(text)


def test_an_unterminated_string_is_left_to_tomllib() -> None:
    """The scan stops at a quote that opens no string; tomllib refuses the text there, in
    time linear in the text however many such quotes follow."""
    for text in ('a = """' + '\\"""' * 100_000, 'a = "' + '\\"' * 100_000, "a = '''x''"):
        check_nesting(text)
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(text)


def depth(value: object) -> int:
    """The level of the deepest thing in `value`, `value` being level 0."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return max((1 + depth(item) for item in value), default=0)
    return 0


TRICKY = st.text(st.sampled_from(list("ab.[]{}\"'#=,\\ \n\t")), max_size=12)
SCALARS = st.one_of(TRICKY, st.integers(), st.floats(allow_nan=False), st.booleans())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
    max_leaves=40,
)
DOCUMENTS = st.dictionaries(TRICKY, VALUES, max_size=4)


@given(DOCUMENTS, st.booleans())
def test_the_scan_counts_no_level_the_data_lacks(data: dict[str, Any], multiline: bool) -> None:
    """Whatever keys and strings hold, the levels the scan counts are levels of the data: it
    refuses only data deeper than the limit (and reads as tomllib what it lets through)."""
    text = tomli_w.dumps(data, multiline_strings=multiline)
    try:
        check_nesting(text)
    except TooDeep:
        assert depth(data) > MAX_NESTING
    else:
        assert tomllib.loads(text) == data


PART = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{1,3}", fullmatch=True),
    TRICKY.map(lambda text: json.dumps(text, ensure_ascii=False)),  # a basic string
    TRICKY.filter(lambda text: "'" not in text and "\n" not in text).map("'{}'".format),
)
SPACE = st.sampled_from(["", " ", "\t"])


@given(st.lists(st.tuples(SPACE, PART, SPACE), min_size=1, max_size=24), st.booleans())
def test_each_part_of_a_dotted_key_is_a_level(parts: list[Any], in_header: bool) -> None:
    key = ".".join(before + part + after for before, part, after in parts)
    text = f"[{key}]\n" if in_header else f"{key} = 1\n"
    if len(parts) > MAX_NESTING:
        with pytest.raises(TooDeep):
            check_nesting(text)
    else:
        assert parse_toml(text) == tomllib.loads(text)


def chain(steps: list[str | None], leaf: object) -> object:
    """`leaf` wrapped once per step: in a table under that key, or (None) in an array."""
    for step in reversed(steps):
        leaf = [leaf] if step is None else {step: leaf}
    return leaf


@given(st.lists(st.none() | TRICKY, min_size=2 * MAX_NESTING + 2, max_size=60), SCALARS)
def test_deep_data_is_refused_however_it_is_written(steps: list[str | None], leaf: Any) -> None:
    """An array of tables' element is a level no key spells (`[[a]]` then `[a.b]`: b is at
    3), so the scan may count fewer levels than the data has, but never half as many."""
    data = {"top": chain(steps, leaf)}
    with pytest.raises(TooDeep):
        check_nesting(tomli_w.dumps(data))


def test_a_profile_nested_too_deep_is_one_line_naming_file_line_and_limit(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """20,000 parts of one dotted key once cost tomllib seconds and gigabytes."""
    path = write_profile(
        "deep", 'schema = 1\nname = "deep"\nversion = 1\n[nccl]\n' + dotted(20_000)
    )
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert result.stderr == (
        f"{path}: line 5: nested deeper than {MAX_NESTING} levels (each part of a dotted key or "
        "[table] name is one, each array and inline table too)\n"
    )
