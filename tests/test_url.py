"""A server's URL masks itself (`Url`): every way it is turned into text shows its password
and secret query values masked, as the one rule of every output words them; `unmasked` alone
gives it as it was given."""

from __future__ import annotations

import json

import pytest

from nccl_launch.bench import measure
from nccl_launch.bench.result import BenchReport, Method
from nccl_launch.live import url as live_url
from nccl_launch.profile.search import shipped_dir
from nccl_launch.secrets.url import Url
from tests.conftest import RunCli

GIVEN = "http://app:pw-Zq8url@127.0.0.1:1/?token=tok-Zq8url&model=m"
SHOWN = "http://***@127.0.0.1:1/?token=***&model=m"
SECRETS = ("pw-Zq8url", "tok-Zq8url")


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


def report(url: Url) -> BenchReport:
    return BenchReport.model_validate(
        {
            "status": "refused",
            "profile": "p@1",
            "digest": "sha256:x",
            "profile_path": "/p.toml",
            "url": url,
            "host": "h",
            "time": "2026-12-01T06:00:00+00:00",
            "method": Method(max_tokens=1, runs=1, warmup=0, prompt="p"),
        }
    )


def test_a_report_holds_the_url_and_writes_it_masked() -> None:
    given = report(Url(GIVEN))
    assert given.url.unmasked() == GIVEN
    assert given.model_dump()["url"] == SHOWN
    assert json.loads(given.model_dump_json())["url"] == SHOWN
    assert not any(secret in given.model_dump_json() + repr(given) for secret in SECRETS)


def test_a_url_read_back_from_a_history_line_shows_as_it_was_written() -> None:
    """A history line holds the URL masked: read back, it is shown the same, masked once."""
    read = BenchReport.model_validate_json(report(Url(GIVEN)).model_dump_json())
    assert str(read.url) == SHOWN
    assert read.model_dump_json() == report(Url(GIVEN)).model_dump_json()


def test_a_bugs_traceback_shows_the_url_it_holds_masked(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug after a check that let a secret through (none does: this one is planted) quotes
    the URL it holds: `--debug`'s traceback and the message show the mask."""

    def broken(loaded: object, url: Url, *rest: object) -> None:
        raise RuntimeError(f"cannot measure {[url]!r}")

    monkeypatch.setattr(live_url, "checked_url", Url)
    monkeypatch.setattr(measure, "measure_decode", broken)
    shipped = shipped_dir()
    assert shipped is not None
    profile = shipped / "rtx6000bw-pcie-tp8.toml"
    result = run_cli("--debug", "bench", str(profile), "--url", GIVEN)
    assert result.returncode == 4, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert not any(secret in result.stderr for secret in SECRETS), result.stderr
    assert result.stderr.count(f"cannot measure [Url({SHOWN!r})]") == 2, result.stderr
