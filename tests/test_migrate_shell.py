"""The shell reader `convert` uses: words, quotes, variables, operators, redirections."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccl_launch.findings import Refused, lines
from nccl_launch.migrate.inputs import read_input
from nccl_launch.migrate.shell.expansion import arguments, expand
from nccl_launch.migrate.shell.refused import ShellError
from nccl_launch.migrate.shell.script import read_script
from nccl_launch.migrate.shell.syntax import parse
from nccl_launch.migrate.start import build_profile


def words(text: str, variables: dict[str, str] | None = None) -> list[list[str]]:
    found = variables or {}
    return [
        [expand(w, found.get, c.line) for w in c.words]
        for c in parse(text)
        if c.words and not c.piped
    ]


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
        ("a \u0663>log", [["a", "\u0663"]]),  # an Arabic-Indic 3 is a word, not a descriptor
        ("a &> all.log", [["a"]]),
        ("a < input", [["a"]]),
        ("a --port 8000 >log", [["a", "--port", "8000"]]),
        ("a | tee log", [["a"]]),
        ("a &\nb", [["a"], ["b"]]),
        ("x=\"$A-$B\" '$A' ${A}x ${C:-dflt} ${A:-dflt}", [["x=1-2", "$A", "1x", "dflt", "1"]]),
        ('"a\\"b" "c\\$d" "e\\\\f"', [['a"b', "c$d", "e\\f"]]),
        ("a > \"my log\" b 2> 'err log'", [["a", "b"]]),
        ('cat <<EOF > out\nexport X=1\n$(bad) `bad` "\nEOF\nb', [["cat"], ["b"]]),
        ("cat <<-'E O' && c\n\tx\n\tE O\nb", [["cat"], ["c"], ["b"]]),
        ('cat <<"A" <<B\n1\nA\n2\nB\nb', [["cat"], ["b"]]),
        ("f() {\n  a $(x)\n  if y; then { z; }; fi\n}\nb", [["b"]]),
        ("function g { a; }; b", [["b"]]),
        (
            "echo $((1 + 2 * 3)) $((7 / -2)) $(( -7 % 3 )) $((A * (B + 1)))",
            [["echo", "7", "-3", "-1", "3"]],
        ),
        ("a $((9223372036854775807 + 1))", [["a", "-9223372036854775808"]]),
        ('a "$((A+B))x" "${A}$((${B} * 2))"', [["a", "3x", "14"]]),
        ('a ${U:-${V:-$A}}x "${U-\'$B\'}" ${U:-"}"} ${A:-$(b)}', [["a", "1x", "'2'", "}", "1"]]),
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
        ("a\nb $((2 ** 2))", "line 2: $((2 ** 2)): only + - * / % ( ), decimal numbers and"),
        ("a $((1 / (3 - 3)))", "line 1: $((1 / (3 - 3))): division by 0"),
        ("a $((C))", "line 1: $((C)): $C is not set in the script"),
        ("a $((010))", "line 1: $((010)): '010' is not a decimal 64-bit number"),
        ("a $(( (" * 40 + "1" + ")" * 40 + "))", "line 1: $(("),
        ("a $((1 + 2)", "line 1: $(( without its closing ))"),
        ("a $(b", "line 1: $( without its closing )"),
        ("a ${A:-'}", "line 1: ${ without its closing }"),
        ("a ${U:-$(b)}", "line 1: command substitution is not supported"),
        ("a ${U:-" * 40 + "x" + "}" * 40, "line 1: a default word with more than 32 ${...} in"),
        ("f() (a)", "line 1: function f: only a { ... } body is supported"),
        ("f() { a", "line 1: function without its closing }"),
        ("a && && b", "line 1: `&&` without a command before it"),
    ],
)
def test_what_it_refuses_names_the_line(text: str, message: str) -> None:
    with pytest.raises(ShellError) as refused:
        words(text)
    [finding] = refused.value.findings
    assert re.match(re.escape(message), finding.text())
    assert (finding.where, finding.cause) == (message.partition(": ")[0], "profile")


def test_assignments_are_recognised_only_unquoted() -> None:
    [command] = parse("A=1 'B=2' C=\"x y\" run")
    assert [w.assignment() is not None for w in command.words] == [True, False, True, False]
    assignment = command.words[2].assignment()
    assert assignment is not None
    name, value, appends = assignment
    assert (name, expand(value, lambda _: None, 1), appends) == ("C", "x y", False)


@settings(max_examples=500, deadline=1000)
@given(st.text(alphabet=" \t\n;&|<>'\"\\$#{}()=-:`abAB012", max_size=40))
def test_any_text_is_read_or_refused_never_hangs(text: str) -> None:
    try:
        for command in parse(text):
            for word in command.words:
                expand(word, lambda name: "v", command.line)
    except ShellError as error:
        assert re.fullmatch(r"line [0-9]+", error.findings[0].where)


def test_reserved_words_and_parentheses_stand_alone_for_the_reader() -> None:
    commands = list(parse("if a; then b; fi\n( c )\nx=1 && d || e | f &"))
    assert [(c.keyword, c.joiner, c.background) for c in commands] == [
        ("if", "", False), ("", "", False), ("then", "", False), ("", "", False),
        ("fi", "", False), ("(", "", False), ("", "", False), (")", "", False),
        ("", "", False), ("", "&&", False), ("", "||", False), ("", "|", True),
    ]  # fmt: skip
    assert [c.function for c in parse("f() { a; }\nfunction g {\n b\n}\n")] == ["f", "g"]


def test_parsing_stops_where_the_reader_stops() -> None:
    """Commands come one at a time: what follows an `exit` is never read, as in bash."""
    commands = parse('a\nexit 0\necho "unterminated\n')
    assert [expand(w, lambda _: None, 1) for w in next(commands).words] == ["a"]
    assert [expand(w, lambda _: None, 1) for w in next(commands).words] == ["exit", "0"]


def test_time_is_linear_in_the_text() -> None:
    """Multi-MB words and blanks; the old reader grew a word a character at a time."""
    word = "w" * 5_000_000
    [command] = parse(f"run {word}\n")
    assert expand(command.words[1], lambda _: None, 1) == word
    blanks = " " * 5_000_000
    [command] = parse(f"{blanks}run{blanks}x{blanks}\n")
    assert len(command.words) == 2
    quoted = "'q'\\x" * 200_000  # 400,000 segments in one word
    [command] = parse(f'run {quoted} "{word}"')
    assert expand(command.words[1], lambda _: None, 1) == "qx" * 200_000
    _, run = parse(f"cat <<EOF\n{blanks}\n{word}\nEOF\nrun")
    assert expand(run.words[0], lambda _: None, 1) == "run"
    for text in ("[" * 2_000_000, "{," * 1_000_000, "{" * 2_000_000 + "}"):  # no glob, no braces
        [command] = parse(f"run {text}\n")
        assert arguments(command.words[1], lambda _: None, 1) == [text]


@settings(max_examples=500, deadline=1000)
@given(
    st.text(
        alphabet=" \t\r\n;&|<>'\"\\$#{}()=-:`abAB012*?[],\udce9",
        max_size=60,
    ).map(lambda text: text + "\npython3 -m sglang.launch_server --model-path /m\n")
)
def test_any_script_is_converted_or_refused_with_a_message(text: str) -> None:
    try:
        read_script(text, {"A": "1"})
    except Refused as error:
        assert error.findings[0].code and error.findings[0].message


def test_a_refusal_in_a_sourced_file_is_a_finding_within_the_line_that_sources_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.sh").write_text("X=1\nif true; then :; fi\n")
    Path("start.sh").write_text(". ./a.sh\npython3 -m sglang.launch_server --model-path /m\n")
    with pytest.raises(Refused) as refused:
        read_input("start.sh", None, {})
    [finding] = refused.value.findings
    assert (finding.code, finding.cause, finding.where) == (
        "control-flow",
        "profile",
        "start.sh: line 1: a.sh: line 2",
    )
    assert lines([finding]) == [
        "nccl-launch: start.sh: line 1: a.sh: line 2: `if` is not followed; convert the branch "
        "that runs, or write the profile by hand"
    ]


def test_every_unknown_nccl_name_read_is_a_finding_of_the_file_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("x.env").write_text("NCCL_NOPE=1\nNCCL_ALSO_NOPE=2\n")
    with pytest.raises(Refused) as refused:
        build_profile(read_input("x.env", None, {}), "x", "x.env", "converted")
    assert [(f.code, f.file, f.where) for f in refused.value.findings] == [
        ("unknown-nccl-variable", "x.env", "line 1"),
        ("unknown-nccl-variable", "x.env", "line 2"),
    ]
    assert refused.value.exit_code == 2


def test_what_a_script_leaves_out_is_said_as_warnings_with_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("start.sh").write_text(
        "NCCL_X=1\nmyjob &\npython3 -m sglang.launch_server --model-path /m\n"
    )
    start = read_input("start.sh", None, {})
    assert [(note.code, note.where, note.severity) for note in start.notes] == [
        ("in-subshell", "line 2", "warning"),
        ("bare-name", "line 3", "warning"),
        ("not-exported", "line 1", "warning"),
    ]
    assert lines(start.notes[:1]) == [
        "nccl-launch: warning: line 2: ignored `myjob &` (it runs in a subshell)"
    ]
