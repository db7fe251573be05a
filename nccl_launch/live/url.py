"""The server's `--url`: checked before any request, and shown with its secrets masked and its
control characters escaped (a URL, a server's answer and a history line are read in logs)."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from nccl_launch.errors import UsageError
from nccl_launch.escaping import escaped
from nccl_launch.kinds import address
from nccl_launch.secrets.masking import mask_credentials
from nccl_launch.serving.table import ServerTable as Server

URL_LIMIT = 4096  # far beyond any server's base URL; a longer one is a mistake or an attack
SHOWN_LIMIT = 200  # of a URL refused for its length
EXAMPLE = "valid: http://127.0.0.1:30000"
# A server listening on every address is reached on the loopback one of its family.
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - read, not bound


def masked_url(url: str) -> str:
    """`url` as people see it: masked by the one rule of every output (its user info whole,
    the values of secret-looking names such as `token=`), controls escaped."""
    return escaped(mask_credentials(url))


class Address(NamedTuple):
    host: str
    port: int


def url_address(url: str) -> Address:
    """The host and port of `url`, an http(s) URL; anything else is a usage error that shows
    the URL masked."""
    if len(url) > URL_LIMIT:
        raise UsageError(
            f"--url {masked_url(url)[:SHOWN_LIMIT]}...: longer than {URL_LIMIT} characters"
        )
    if not url.isprintable() or " " in url:
        raise UsageError(
            f"--url {masked_url(url)}: holds a space, a control character or a byte that is not "
            f"UTF-8; {EXAMPLE}"
        )
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise UsageError(f"--url {masked_url(url)}: not a valid URL ({error}); {EXAMPLE}") from None
    if "@" in url:  # an HTTP client would send it as Basic auth, in place of the key's header
        raise UsageError(
            f"--url {masked_url(url)}: holds user info (USER:PASSWORD@), which the server does not "
            f"read; bench sends the API key the server was started with itself; "
            f"{EXAMPLE}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--url {masked_url(url)}: not an http:// or https:// URL with a host; {EXAMPLE}"
        )
    try:
        given = parts.port
    except ValueError:
        given = 0
    if given == 0:  # out of range, not a number, or 0 (which no server listens on)
        raise UsageError(f"--url {masked_url(url)}: not a valid port; {EXAMPLE}")
    if url.partition("://")[2][len(parts.netloc) :] not in ("", "/"):
        raise UsageError(
            f"--url {masked_url(url)}: holds a path, query or fragment; give only "
            f"http(s)://HOST[:PORT]; {EXAMPLE}"
        )
    return Address(parts.hostname, given or (443 if parts.scheme == "https" else 80))


def server_url(server: Server) -> str:
    """The base URL a client on this host reaches the profile's `[server]` at: its `host` and
    `port` (its kind's defaults when unset), a wildcard host read as the loopback address."""
    host, port = address(server)
    host = WILDCARDS.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
