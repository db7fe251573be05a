"""A server's URL masks itself (`Url`): every way it is turned into text shows its password
and secret query values masked, as the one rule of every output words them; `unmasked` alone
gives it as it was given."""

from __future__ import annotations

from nccl_launch.secrets.url import Url

GIVEN = "http://app:pw-Zq8url@127.0.0.1:1/?token=tok-Zq8url&model=m"
SHOWN = "http://***@127.0.0.1:1/?token=***&model=m"


def test_a_url_shows_itself_masked_in_every_text() -> None:
    url = Url(GIVEN)
    assert str(url) == SHOWN
    assert repr(url) == f"Url({SHOWN!r})"
    assert f"{url}/v1/completions" == f"{SHOWN}/v1/completions"
    assert f"{url:>60}" == f"{SHOWN:>60}"
    assert f"{url!r}" == repr(url)
    assert repr([url]) == f"[Url({SHOWN!r})]"
    assert url.unmasked() == GIVEN


def test_a_url_escapes_its_control_characters() -> None:
    assert str(Url("http://h:1/\x1b[31m")) == "http://h:1/\\x1b[31m"
