"""Shell completion: of PROFILE (each NAME and NAME@VERSION), and bash's that survives `@`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import click
from click.exceptions import Exit
from click.shell_completion import (
    BashComplete,
    CompletionItem,
    add_completion_class,
    split_arg_string,
)

from nccl_launch.digits import is_ascii_digits
from nccl_launch.escaping import not_utf8
from nccl_launch.findings import Finding, Refused

COMPLETE_VAR = "_NCCL_LAUNCH_COMPLETE"
REQUESTS = [
    f"{shell}_{action}" for shell in ("bash", "zsh", "fish") for action in ("source", "complete")
]

# Bash's default: '@' and ':' end a word for completion, so `tuned@` reaches click as two words.
DEFAULT_WORDBREAKS = " \t\n\"'@><=;|&(:"
# Readline's special prefixes in bash (for $VAR and @host): word breaks that bash then keeps at
# the start of the text it replaces (`@` of `tuned@`), where after ':' or '=' it replaces less.
SPECIAL_PREFIXES = "$@"


def check_request(environ: Mapping[str, str]) -> None:
    """Refused, one line, unless `environ` holds a request the completion scripts make:
    a shell and an action click knows, and for `complete` the variables it reads (click would
    fail on their absence with a KeyError, an internal error, or exit 1 without a word).
    A line holding a byte that is not UTF-8 ends the request with nothing offered (Exit 0):
    no profile name holds one, and click could not write a word holding one back."""
    request = environ.get(COMPLETE_VAR, "")
    if not request:  # click runs the command as if it were unset
        return
    if request not in REQUESTS:
        valid = f"valid: {', '.join(REQUESTS)}"
        raise Refused(Finding("completion-request", f"{COMPLETE_VAR}={request!r}", valid))
    if request.endswith("_source"):
        return
    missing = [name for name in ("COMP_WORDS", "COMP_CWORD") if name not in environ]
    if missing:
        said = f"{' and '.join(missing)} not set"
        where = f"{COMPLETE_VAR}={request}"
        raise Refused(Finding("completion-unset", where, said, "the completion script sets them"))
    word = environ["COMP_CWORD"]  # bash and zsh: the index of the word; fish: the word
    if request != "fish_complete" and not is_ascii_digits(word):
        said = "the index of the word completed, as in 2"
        raise Refused(Finding("completion-word", f"COMP_CWORD={word!r}", said))
    if request == "fish_complete" and word and not split_arg_string(word):
        said = "the word completed, or nothing"
        raise Refused(Finding("completion-word", f"COMP_CWORD={word!r}", said))
    line = [environ.get(name, "") for name in ("COMP_WORDS", "COMP_CWORD", "COMP_LINE")]
    if not_utf8("".join(line)) is not None:  # the shell's bytes, kept with surrogateescape
        raise Exit(0)


def replaced_part(value: str, word: str, breaks: str) -> str:
    """What bash should put in place of the part of `word` from its last word-break character
    for the completion `value` (`@1` for `tuned@1` when `word` is `tuned@`: bash keeps `tuned`)."""
    last = max((word.rfind(char) for char in breaks), default=-1)
    cut = last if last >= 0 and word[last] in SPECIAL_PREFIXES else last + 1
    # click completes `--from=tu` as `tuned`: the longest end of word[:cut] that value starts
    # with is what value repeats of the text bash keeps.
    kept = next(word[start:cut] for start in range(cut + 1) if value.startswith(word[start:cut]))
    return value[len(kept) :]


class LineBashComplete(BashComplete):
    """click's bash completion, given the line up to the cursor as well as COMP_WORDS: bash
    splits words at COMP_WORDBREAKS, so COMP_WORDS cannot tell `tuned@` from `tuned @`."""

    source_template = BashComplete.source_template.replace(
        "COMP_CWORD=$COMP_CWORD",
        'COMP_CWORD=$COMP_CWORD COMP_LINE="${COMP_LINE:0:COMP_POINT}" '
        'COMP_WORDBREAKS="$COMP_WORDBREAKS"',
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.word = ""

    def get_completion_args(self) -> tuple[list[str], str]:
        line = os.environ.get("COMP_LINE")
        if line is None:  # click's protocol alone: COMP_WORDS and COMP_CWORD
            args, self.word = super().get_completion_args()
            return args, self.word
        words = split_arg_string(line)
        self.word = words.pop() if words and line[-1:] not in ("", " ", "\t") else ""
        return words[1:], self.word

    def format_completion(self, item: CompletionItem) -> str:
        breaks = os.environ.get("COMP_WORDBREAKS", DEFAULT_WORDBREAKS)
        if item.type == "plain" and os.environ.get("COMP_LINE") is not None:
            value = replaced_part(str(item.value), self.word, breaks)
            item = CompletionItem(value, help=item.help)
        return super().format_completion(item)


add_completion_class(LineBashComplete)


def complete_profiles(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """What a PROFILE can be: each NAME and NAME@VERSION on the search path that starts with
    `incomplete`, and a file path (the shell completes it: bash only when no name matches)."""
    from nccl_launch.profile.search import (
        declared_identity,
        is_reference,
        profile_files,
        search_path,
    )

    files = profile_files([folder for folder, _ in search_path()])
    found = [declared_identity(path) for path in files]  # an unusable file is skipped
    # Only what a profile could be named: bash evaluates what it is offered (`x;touch y`).
    identities = [item for item in found if isinstance(item, tuple) and is_reference(*item)]
    refs = {name for name, _ in identities} | {f"{name}@{version}" for name, version in identities}
    matching = sorted(ref for ref in refs if ref.startswith(incomplete))
    # First: bash's script forgets the names it was given before a file item.
    return [CompletionItem(incomplete, type="file"), *map(CompletionItem, matching)]
