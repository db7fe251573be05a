"""Credentials kept out of what people read: values of credential-looking names, passwords in
URLs, the values of credential flags in an argv. What is meant for the server keeps the real
values (`show`'s export formats and its JSON)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from nccl_launch.sglang.facts import CREDENTIAL_FLAGS, NAMED_LIKE_CREDENTIALS, abbreviates

MASK = "***"
# A word of a name (split at `_` or `-`) that ends in one of these names a credential:
# HF_TOKEN, OPENAI_API_KEY, APIKEY, DB_PASSWORD, --hf-token, --api-key. Ends, not contains,
# so that TOKENIZERS_PARALLELISM and --speculative-num-draft-tokens stay readable.
SECRET_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "KEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "PRIVATE",
)
# NCCL's variables tune a transport; none holds a credential (NCCL_IB_PKEY is a partition).
_NEVER = "NCCL_"
_WORDS = re.compile(r"[^A-Za-z0-9]+")
_SPACES = re.compile(r"(\s+)")  # kept, as a group, between the words split at them
# scheme://user:password@host: the authority runs to the first `/`, `?`, `#` or space, and
# the user info to its last `@`, so a password holding `@` or `:` is masked whole. Matched
# from the literal `://` (not from the scheme), so a long word takes linear time.
_URL = re.compile(r"://(?P<authority>[^/?#\s]*)")
# libpq's keyword DSN (`host=db password=x`) and the like.
_PASSWORD_PAIR = re.compile(r"(?i)\b(password|passwd)=([^\s&;]+)")


def is_secret(name: str) -> bool:
    """Whether a variable or flag name looks like it holds a credential (NCCL_* never does)."""
    if name.startswith(_NEVER):
        return False
    words = _WORDS.split(name.upper())
    return any(word.endswith(SECRET_WORDS) for word in words if word)


def _password_of(authority: str) -> str | None:
    """The password of a URL's `user:password@host`, None without one."""
    user_info, at, _ = authority.rpartition("@")
    _, colon, password = user_info.partition(":")
    return password if at and colon else None


def _mask_authority(match: re.Match[str]) -> str:
    password = _password_of(match["authority"])
    if password is None:
        return match[0]
    user_info, _, host = match["authority"].rpartition("@")
    return f"://{user_info.partition(':')[0]}:{MASK}@{host}"


def _passwords(text: str) -> set[str]:
    """What `mask_credentials` hides in `text`: each URL's password, each `password=` value."""
    found = {match[2] for match in _PASSWORD_PAIR.finditer(text)}
    for match in _URL.finditer(text):
        password = _password_of(match["authority"])
        if password is not None:
            found.add(password)
    return found


def mask_credentials(text: str) -> str:
    """`text` with the password of each URL (`postgres://u:***@db/x`) and each `password=`
    pair masked."""
    return _PASSWORD_PAIR.sub(rf"\1={MASK}", _URL.sub(_mask_authority, text))


def mask_value(name: str, value: str) -> str:
    """A variable's value as people see it: masked whole for a secret name, else masked as a
    command line (`EXTRA_ARGS="--api-key sk-1 --tp 8"`) with the passwords in it masked."""
    if name.startswith(_NEVER):
        return value
    return MASK if is_secret(name) else mask_command_line(value)


def _secret_flag(word: str) -> bool:
    """`--api-key`, `--token=X`, `--admin-api` (SGLang reads a prefix of its flags); not
    `--api-key:`, which names the flag in a message, nor a flag of SGLang's only named like
    a credential (`--speculative-token-map`)."""
    option = word.split("=", 1)[0]
    name = option.lstrip("-")
    if not word.startswith("-") or name.endswith(":") or option in NAMED_LIKE_CREDENTIALS:
        return False
    return is_secret(name) or abbreviates(option, CREDENTIAL_FLAGS)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """An argv as people see it: the value of `--api-key X` or `--token=X` masked, and the
    passwords in every word. A word after a credential flag is its value unless it is
    another `--option`."""
    masked: list[str] = []
    for index, word in enumerate(argv):
        previous = argv[index - 1] if index else ""
        if _secret_flag(word) and "=" in word:
            masked.append(f"{word.split('=', 1)[0]}={MASK}")
        elif _secret_flag(previous) and "=" not in previous and not word.startswith("--"):
            masked.append(MASK)
        else:
            masked.append(mask_credentials(word))
    return masked


def masked_values(argv: Sequence[str]) -> set[str]:
    """What `mask_argv` hides of `argv`: the value of each credential flag (`--api-key X`,
    `--admin-api=X`), each `password=X`, each URL's password."""
    hidden = set()
    for word, masked in zip(argv, mask_argv(argv), strict=True):
        if masked == MASK:
            hidden.add(word)
        elif _secret_flag(word) and "=" in word:
            hidden.add(word.split("=", 1)[1])
        else:
            hidden |= _passwords(word)
    return hidden


def mask_words(text: str) -> str:
    """A text of argv words (SGLang's message about an argv, a log line) as people see it:
    its words, between runs of any whitespace, masked as `mask_argv` masks an argv."""
    parts = _SPACES.split(text)
    parts[::2] = mask_argv(parts[::2])
    return "".join(parts)


def mask_command_line(text: str) -> str:
    """A text that may be a shell line (an entrypoint, a variable's value) as people see it:
    when a credential flag is among its shell words, masked as `mask_argv` masks them and
    quoted again (`--api-key 'sk 1'` is one value); else masked as `mask_words` masks it."""
    try:
        words = shlex.split(text)
    except ValueError:  # not a shell line: `can't`
        return mask_words(text)
    masked = mask_argv(words)
    if masked == [mask_credentials(word) for word in words]:
        return mask_words(text)
    return shlex.join(masked)


def holds_secret(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """A credential-looking variable or flag (`HF_TOKEN`, `--api-key`), or a password in a
    value (`postgres://u:pw@db`): whatever people would see masked."""
    return list(argv) != mask_argv(argv) or any(
        mask_value(key, value) != value for key, value in env.items()
    )
