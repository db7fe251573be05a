"""The shell reader `convert` uses: words, quotes, variables, operators, redirections."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.migrate.shell import ShellError, parse


def words(text: str, variables: dict[str, str] | None = None) -> list[list[str]]:
    found = variables or {}
    return [[w.expand(found.get, c.line) for w in c.words] for c in parse(text) if not c.piped]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a b  c", [["a", "b", "c"]]),
        ("a 'b c' \"d e\"", [["a", "b c", "d e"]]),
        ("a b\\ c", [["a", "b c"]]),
        ("a \\\n  b", [["a", "b"]]),
        ("a # comment\nb", [["a"], ["b"]]),
        ("a#not-a-comment", [["a#not-a-comment"]]),
        ("a; b && c || d", [["a"], ["b"], ["c"], ["d"]]),
        ("a > log 2>&1", [["a"]]),
        ("a 2>err.log >>out.log", [["a"]]),
        ("a &> all.log", [["a"]]),
        ("a < input", [["a"]]),
        ("a --port 8000 >log", [["a", "--port", "8000"]]),
        ("a | tee log", [["a"]]),
        ("a &\nb", [["a"], ["b"]]),
        ("x=\"$A-$B\" '$A' ${A}x ${C:-dflt} ${A:-dflt}", [["x=1-2", "$A", "1x", "dflt", "1"]]),
        ('"a\\"b" "c\\$d" "e\\\\f"', [['a"b', "c$d", "e\\f"]]),
    ],
)
def test_words_as_a_posix_shell_splits_them(text: str, expected: list[list[str]]) -> None:
    assert words(text, {"A": "1", "B": "2"}) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("echo $(hostname)", "line 1: command substitution is not supported"),
        ("a\necho `date`", "line 2: command substitution is not supported"),
        ('a "unterminated', 'line 1: unterminated "'),
        ("a >", "line 1: redirection without a target"),
        ("echo $UNSET", "line 1: $UNSET is not set in the script"),
        ("echo $1", "line 1: only $NAME, ${NAME} and ${NAME:-default} expand"),
    ],
)
def test_what_it_refuses_names_the_line(text: str, message: str) -> None:
    with pytest.raises(
        ShellError, match="^" + message.replace("$", r"\$").replace("{", r"\{").replace("}", r"\}")
    ):
        words(text)


def test_assignments_are_recognised_only_unquoted() -> None:
    [command] = parse("A=1 'B=2' C=\"x y\" run")
    assert [w.assignment() is not None for w in command.words] == [True, False, True, False]
    assignment = command.words[2].assignment()
    assert assignment is not None
    name, value = assignment
    assert (name, value.expand(lambda _: None, 1)) == ("C", "x y")


@settings(max_examples=500, deadline=1000)
@given(st.text(alphabet=" \t\n;&|<>'\"\\$#{}()=-:`abAB012", max_size=40))
def test_any_text_is_read_or_refused_never_hangs(text: str) -> None:
    try:
        for command in parse(text):
            for word in command.words:
                word.expand(lambda name: "v", command.line)
    except ShellError as error:
        assert str(error).startswith("line ")
