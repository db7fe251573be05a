"""The server's `--url`: checked before any request, and shown with its secrets masked and its
control characters escaped (a URL, a server's answer and a history line are read in logs)."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from nccl_launch.escaping import escaped
from nccl_launch.findings import Finding, Refused
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


def _bad_url(code: str, url: str, message: str, fix: str = EXAMPLE) -> Refused:
    """A `--url` that is not an http(s) URL of a server, shown masked: the command line's."""
    return Refused(Finding(code, f"--url {masked_url(url)}", message, fix))


def url_address(url: str) -> Address:
    """The host and port of `url`, an http(s) URL; anything else is a usage error that shows
    the URL masked."""
    if len(url) > URL_LIMIT:
        where = f"--url {masked_url(url)[:SHOWN_LIMIT]}..."
        raise Refused(Finding("url-length", where, f"longer than {URL_LIMIT} characters"))
    if not url.isprintable() or " " in url:
        unprintable = "holds a space, a control character or a byte that is not UTF-8"
        raise _bad_url("url-characters", url, unprintable)
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise _bad_url("invalid-url", url, f"not a valid URL ({error})") from None
    if "@" in url:  # an HTTP client would send it as Basic auth, in place of the key's header
        user = "holds user info (USER:PASSWORD@), which the server does not read"
        fix = f"bench sends the API key the server was started with itself; {EXAMPLE}"
        raise _bad_url("url-user-info", url, user, fix)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad_url("url-scheme", url, "not an http:// or https:// URL with a host")
    try:
        given = parts.port
    except ValueError:
        given = 0
    if given == 0:  # out of range, not a number, or 0 (which no server listens on)
        raise _bad_url("url-port", url, "not a valid port")
    if url.partition("://")[2][len(parts.netloc) :] not in ("", "/"):
        fix = f"give only http(s)://HOST[:PORT]; {EXAMPLE}"
        raise _bad_url("url-path", url, "holds a path, query or fragment", fix)
    return Address(parts.hostname, given or (443 if parts.scheme == "https" else 80))


def server_url(server: Server) -> str:
    """The base URL a client on this host reaches the profile's `[server]` at: its `host` and
    `port` (its kind's defaults when unset), a wildcard host read as the loopback address."""
    host, port = address(server)
    host = WILDCARDS.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
