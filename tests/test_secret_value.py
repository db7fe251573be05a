"""A value that may be secret masks itself (`Secret`): every way of making text of it gives
what people see; only `reveal` gives the value."""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
import pytest
from pydantic import BaseModel

from nccl_launch import cli
from nccl_launch.profile import overview
from nccl_launch.secrets.masking import masked_json
from nccl_launch.secrets.secret import Secret
from nccl_launch.secrets.values import secret_value, secret_words, secrets_of

VALUE = "hf_the-value-itself"


class Holder(BaseModel):
    value: str | Secret | None
    values: list[str | Secret] = []


def test_every_text_of_a_secret_is_the_mask_and_reveal_is_the_value() -> None:
    secret = Secret(VALUE)
    said = [str(secret), repr(secret), f"{secret}", f"{secret!r}", f"{secret:>12}"]
    said += [format(secret), "{}".format(secret), "%s" % (secret,), str([secret])]  # noqa: UP031, UP032
    assert all(VALUE not in text for text in said), said
    assert said[:3] == ["***", "Secret('***')", "***"]
    assert said[4] == "         ***"
    assert secret.reveal() == VALUE


def test_a_secret_partly_masked_shows_its_masked_form() -> None:
    secret = Secret("--api-key sk-1 --tp 8", "--api-key *** --tp 8")
    assert f"EXTRA_ARGS={secret}" == "EXTRA_ARGS=--api-key *** --tp 8"
    assert "sk-1" not in repr(secret)


def test_a_report_dumps_and_writes_a_secret_masked() -> None:
    holder = Holder(value=Secret(VALUE), values=["plain", Secret(VALUE, "m***")])
    assert holder.value == Secret(VALUE)  # kept as it is in the report
    assert holder.model_dump() == {"value": "***", "values": ["plain", "m***"]}
    assert json.loads(holder.model_dump_json()) == {"value": "***", "values": ["plain", "m***"]}
    assert json.loads(masked_json(holder)) == {"value": "***", "values": ["plain", "m***"]}
    assert VALUE not in repr(holder)
    assert Holder(value="plain").model_dump() == {"value": "plain", "values": []}


def test_json_of_a_secret_alone_fails_closed() -> None:
    with pytest.raises(TypeError):
        json.dumps({"value": Secret(VALUE)})


def test_a_bugs_traceback_with_debug_shows_the_mask(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = Secret(VALUE)

    def broken(ref: str) -> None:
        raise ValueError(f"planted with {secret}", secret)

    monkeypatch.setattr(overview, "load_profile", broken)
    assert cli.main(["--debug", "validate", "anything"]) == 4
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "ValueError: ('planted with ***', Secret('***'))" in err
    assert VALUE not in err


def test_a_variables_value_is_wrapped_once_where_masking_would_hide_it() -> None:
    assert secret_value("HF_TOKEN", VALUE) == Secret(VALUE)
    assert secret_value("SITE", "plain", held=True) == Secret("plain")  # an env file's
    partly = secret_value("EXTRA_ARGS", "--api-key sk-1 --tp 8")
    assert isinstance(partly, Secret)
    assert str(partly) == "--api-key '***' --tp 8"
    assert secret_value("NCCL_PROTO", "Simple") == "Simple"


def test_an_argv_wraps_the_words_masking_hides() -> None:
    words = secret_words(["serve", "--api-key", "sk-1", "--token=t0k", "${API_KEY}"])
    assert words == [
        "serve",
        "--api-key",
        Secret("sk-1"),
        Secret("--token=t0k", "--token=***"),
        "${API_KEY}",
    ]
    assert [str(word) for word in words] == [
        "serve",
        "--api-key",
        "***",
        "--token=***",
        "${API_KEY}",
    ]


class Loose(BaseModel):
    anything: Any
    table: dict[str, Any] = {}


def test_a_secret_where_no_type_names_it_is_dumped_masked() -> None:
    loose = Loose(anything=Secret(VALUE), table={"nested": [Secret(VALUE, "m***")]})
    assert loose.model_dump() == {"anything": "***", "table": {"nested": ["m***"]}}
    assert VALUE not in loose.model_dump_json()
    assert VALUE not in masked_json(loose)
    assert pydantic_core.to_json([Secret(VALUE)]) == b'["***"]'


def test_a_servers_answer_quoted_where_no_type_names_it_is_dumped_masked() -> None:
    """What a server wrote (preflight's answer) travels quoted (`Secrets.quoting_texts`): a
    report typed `Any` dumps each text as `Quoted.shown`, its keys and numbers as they are."""
    secrets = secrets_of(["--api-key", VALUE], {})
    answer = {"error": f"unrecognized arguments: {VALUE}", "parsed": {"api_key": VALUE, "tp": 8}}
    loose = Loose(anything=None, table=secrets.quoting_texts(answer))
    dumped = {"error": "unrecognized arguments: ***", "parsed": {"api_key": "***", "tp": 8}}
    assert loose.model_dump() == {"anything": None, "table": dumped}
    assert VALUE not in loose.model_dump_json()


def test_a_command_line_read_from_proc_holds_its_credential_as_a_secret() -> None:
    """What /proc says of a process travels with what masking hides wrapped (`command_words`):
    a snapshot, a traceback or a title shows the mask, and only `reveal` the value."""
    import subprocess
    import sys

    import psutil

    from nccl_launch.live.processes import command_words

    argv = [sys.executable, "-c", "import sys; sys.stdin.read()", "--api-key", VALUE]
    with subprocess.Popen(argv, stdin=subprocess.PIPE) as child:
        try:
            words = command_words(psutil.Process(child.pid))
        finally:
            child.communicate(b"")
    assert VALUE not in repr(words)
    assert [str(word) for word in words[-2:]] == ["--api-key", "***"]
    assert isinstance(words[-1], Secret) and words[-1].reveal() == VALUE
