"""The server's `--url`: checked before any request, and shown with its secrets masked and its
control characters escaped (a URL, a server's answer and a history line are read in logs)."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

from nccl_launch.findings import Finding, Refused
from nccl_launch.kinds import address
from nccl_launch.secrets.url import Url
from nccl_launch.serving.table import ServerTable as Server

URL_LIMIT = 4096  # far beyond any server's base URL; a longer one is a mistake or an attack
SHOWN_LIMIT = 200  # of a URL refused for its length
EXAMPLE = "valid: http://127.0.0.1:30000"
# A server listening on every address is reached on the loopback one of its family.
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - read, not bound


class Address(NamedTuple):
    host: str
    port: int


def _bad_url(code: str, url: Url, message: str, fix: str = EXAMPLE) -> Refused:
    """A `--url` that is not an http(s) URL of a server, shown masked: the command line's."""
    return Refused(Finding(code, f"--url {url}", message, fix))


def checked_url(given: str) -> Url:
    """`given`, a `--url`, wrapped once as it enters: an http(s) URL of a server (its host,
    an optional port, nothing after); anything else is a usage error that shows it masked."""
    url = Url(given)
    if len(given) > URL_LIMIT:
        where = f"--url {str(url)[:SHOWN_LIMIT]}..."
        raise Refused(Finding("url-length", where, f"longer than {URL_LIMIT} characters"))
    if not given.isprintable() or " " in given:
        unprintable = "holds a space, a control character or a byte that is not UTF-8"
        raise _bad_url("url-characters", url, unprintable)
    try:
        parts = urlsplit(given)
    except ValueError as error:
        raise _bad_url("invalid-url", url, f"not a valid URL ({error})") from None
    if "@" in given:  # an HTTP client would send it as Basic auth, in place of the key's header
        user = "holds user info (USER:PASSWORD@), which the server does not read"
        fix = f"bench sends the API key the server was started with itself; {EXAMPLE}"
        raise _bad_url("url-user-info", url, user, fix)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad_url("url-scheme", url, "not an http:// or https:// URL with a host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # out of range, not a number, or 0 (which no server listens on)
        raise _bad_url("url-port", url, "not a valid port")
    if given.partition("://")[2][len(parts.netloc) :] not in ("", "/"):
        fix = f"give only http(s)://HOST[:PORT]; {EXAMPLE}"
        raise _bad_url("url-path", url, "holds a path, query or fragment", fix)
    return url


def url_address(url: Url) -> Address:
    """The host and port a connection to `url` (checked, or a profile's server's) lands on."""
    parts = urlsplit(url.unmasked())
    return Address(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


def server_url(server: Server) -> Url:
    """The base URL a client on this host reaches the profile's `[server]` at: its `host` and
    `port` (its kind's defaults when unset), a wildcard host read as the loopback address."""
    host, port = address(server)
    host = WILDCARDS.get(host, host)
    return Url(f"http://{f'[{host}]' if ':' in host else host}:{port}")
