"""The env merge and the drift report, on plain dicts: no files, no processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nccl_launch.env.drift import DriftEntry, DriftReport
from nccl_launch.env.merge import (
    CALLING_ENV,
    EnvLayer,
    MergeResult,
    inherited_environment,
    merge_environment,
)
from nccl_launch.profile.model import Policy, Profile
from nccl_launch.profile.plan import build_plan, digest
from nccl_launch.render.drift import drift_lines, fix_lines
from nccl_launch.secrets.secret import Secret

CALLING = ["(calling", "environment)"]
FILE = Path("profiles/tuned.toml")
TUNED = {
    "PROTO": "LL",
    "ALGO": "Ring",
    "P2P_LEVEL": "SYS",
    "MAX_NCHANNELS": 16,
    "BUFFSIZE": "16MiB",
    "NTHREADS": 512,
}


def profile(**fields: Any) -> Profile:
    data = {"schema": 1, "name": "tuned", "version": 3, "nccl": TUNED, **fields}
    return Profile.model_validate(data)


def merge(
    calling: dict[str, str], layers: list[EnvLayer] | None = None, **fields: Any
) -> MergeResult:
    resolved = profile(**fields)
    return merge_environment(
        inherited_environment(calling, layers or []),
        build_plan(resolved),
        resolved.policy,
        {},
        profile_file=FILE,
    )


def test_declared_values_reach_the_child_canonically_with_markers() -> None:
    result = merge({"PATH": "/usr/bin", "HOME": "/root"})
    assert result.env["NCCL_BUFFSIZE"] == "16777216"
    assert result.env["NCCL_PROTO"] == "LL"
    assert result.env["PATH"] == "/usr/bin"
    assert result.env["NCCL_LAUNCH_PROFILE"] == "tuned@3"
    assert result.env["NCCL_LAUNCH_DIGEST"].startswith("sha256:")
    assert result.env["SPT_NOENV"] == "1"
    assert result.sources["PATH"] == CALLING_ENV
    assert result.sources["NCCL_PROTO"] == "tuned@3"
    assert result.report.drifted == []


def test_same_meaning_is_a_match_not_drift() -> None:
    result = merge({"NCCL_BUFFSIZE": "0x1000000", "NCCL_PROTO": "ll", "NCCL_P2P_LEVEL": "4"})
    assert result.report.drifted == []
    assert sorted(result.report.matched) == ["NCCL_BUFFSIZE", "NCCL_P2P_LEVEL", "NCCL_PROTO"]
    assert result.env["NCCL_BUFFSIZE"] == "16777216"


def test_conflicting_value_is_drift_with_its_source() -> None:
    result = merge({"NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "16MiB"})
    by_key = {entry.key: entry for entry in result.report.drifted}
    assert by_key["NCCL_PROTO"].kind == "changed"
    assert by_key["NCCL_PROTO"].actual == "Simple"
    assert by_key["NCCL_PROTO"].source == CALLING_ENV
    assert by_key["NCCL_BUFFSIZE"].note == "NCCL reads 16"


def test_conflict_policy_warn_tolerates_and_profile_wins() -> None:
    result = merge({"NCCL_PROTO": "Simple"}, policy={"conflict": "warn"})
    assert result.report.drifted == []
    assert result.report.entries[0].tolerated
    assert result.env["NCCL_PROTO"] == "LL"


def test_undeclared_nccl_refused_by_default_with_did_you_mean() -> None:
    result = merge({"NCCL_PROTOCOL": "LL", "NCCL_IB_HCA": "mlx5_0"})
    by_key = {entry.key: entry for entry in result.report.drifted}
    assert by_key["NCCL_PROTOCOL"].kind == "undeclared"
    assert "did you mean NCCL_PROTO?" in (by_key["NCCL_PROTOCOL"].note or "")
    assert by_key["NCCL_IB_HCA"].note == "undeclared"


def test_undeclared_policy_warn_keeps_and_strip_removes() -> None:
    kept = merge({"NCCL_IB_HCA": "mlx5_0"}, policy={"undeclared_nccl": "warn"})
    assert kept.report.drifted == []
    assert kept.env["NCCL_IB_HCA"] == "mlx5_0"
    stripped = merge({"NCCL_IB_HCA": "mlx5_0"}, policy={"undeclared_nccl": "strip"})
    assert stripped.report.drifted == []
    assert "NCCL_IB_HCA" not in stripped.env
    assert stripped.report.entries[0].reason == "stripped"
    assert "removed from the child; tolerated)" in refusal(stripped.report)


def test_server_owned_keys_are_tolerated_and_kept() -> None:
    result = merge({"NCCL_CUMEM_ENABLE": "0"})
    assert result.report.drifted == []
    assert result.report.entries[0].reason == "server-owned"
    assert "(calling environment; server-owned; tolerated)" in refusal(result.report)
    assert result.env["NCCL_CUMEM_ENABLE"] == "0"


def test_launcher_variables_are_never_drift() -> None:
    result = merge({"NCCL_LAUNCH_PROFILE": "old@1", "NCCL_LAUNCH_PATH": "/x", "SPT_NOENV": "0"})
    assert result.report.entries == []
    assert result.env["NCCL_LAUNCH_PROFILE"] == "tuned@3"
    assert result.env["NCCL_LAUNCH_PATH"] == "/x"


def test_env_files_apply_over_the_calling_env_and_are_named_as_source() -> None:
    layers = [
        EnvLayer("a.env", {"HF_HOME": "/cache", "NCCL_PROTO": "Simple"}),
        EnvLayer("b.env", {"HF_HOME": "/fast-cache"}),
    ]
    result = merge({"HF_HOME": "/home/cache"}, layers)
    assert result.env["HF_HOME"] == "/fast-cache"
    assert result.sources["HF_HOME"] == "env file b.env"
    assert result.report.drifted[0].source == "env file a.env"


def test_env_table_conflicts_are_compared_literally() -> None:
    result = merge({"CUDA_VISIBLE_DEVICES": "1,0"}, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert [entry.key for entry in result.report.drifted] == ["CUDA_VISIBLE_DEVICES"]


def test_origins_name_the_declaring_file() -> None:
    resolved = profile()
    origins = {"NCCL_PROTO": "profiles/tuned.toml"}
    result = merge_environment(
        inherited_environment({}, []),
        build_plan(resolved),
        resolved.policy,
        origins,
        profile_file=FILE,
    )
    assert result.sources["NCCL_PROTO"] == "profiles/tuned.toml"
    assert result.sources["NCCL_ALGO"] == "tuned@3"


def test_merge_does_not_modify_its_inputs() -> None:
    calling = {"NCCL_IB_HCA": "x"}
    resolved = profile(policy={"undeclared_nccl": "strip"})
    merge_environment(
        inherited_environment(calling, []),
        build_plan(resolved),
        Policy(undeclared_nccl="strip"),
        {},
        profile_file=FILE,
    )
    assert calling == {"NCCL_IB_HCA": "x"}


def refusal(report: DriftReport) -> str:
    return "\n".join(["refusing to start", *drift_lines(report.entries), report.summary()])


def test_refusal_text_is_the_design_diff() -> None:
    result = merge({"NCCL_PROTO": "Simple", "NCCL_PROTOCOL": "LL", "API_TOKEN": "hunter2"})
    text = "\n".join(
        ["refusing to start", *drift_lines(result.report.entries), result.report.summary()]
    )
    lines = text.splitlines()
    assert lines[0] == "refusing to start"
    assert lines[1].split() == ["~", "NCCL_PROTO", '"LL"', "->", '"Simple"', *CALLING]
    assert lines[2].startswith("  + NCCL_PROTOCOL")
    assert "did you mean NCCL_PROTO?" in lines[2]
    assert lines[-1] == "2 drift (1 changed, 1 undeclared), 0 match"
    assert "hunter2" not in text


def test_secrets_are_masked_in_reports() -> None:
    result = merge({"HF_TOKEN": "hf_secret"}, env={"HF_TOKEN": "hf_other"})
    text = "\n".join(
        ["refusing to start", *drift_lines(result.report.entries), result.report.summary()]
    )
    assert "hf_secret" not in text
    assert "hf_other" not in text
    assert '"***" -> "***"' in text
    dumped = result.report.model_dump_json()
    assert "hf_secret" not in dumped
    assert "hf_other" not in dumped
    assert result.report.entries[0].actual == Secret("hf_secret")  # masked on output only


def test_digest_depends_on_env_and_argv_only() -> None:
    base = build_plan(profile())
    renamed = build_plan(profile(description="same values, new words"))
    assert base.digest == renamed.digest
    assert base.digest == digest(base.env, base.argv)
    changed = build_plan(profile(nccl={**TUNED, "NTHREADS": 256}))
    assert changed.digest != base.digest
    spelled = build_plan(profile(nccl={**TUNED, "BUFFSIZE": 16777216}))
    assert spelled.digest == base.digest


def test_nccl_conf_values_the_environment_lacks_count_as_inherited() -> None:
    from nccl_launch.nccl.conf import parse

    conf = parse("NCCL_PROTO=Simple\nNCCL_IB_HCA=mlx5_0\nNCCL_CUMEM_ENABLE=1\n", "/etc/nccl.conf")
    resolved = profile()
    result = merge_environment(
        inherited_environment({}, []),
        build_plan(resolved),
        resolved.policy,
        {},
        conf,
        profile_file=FILE,
    )
    by_key = {entry.key: entry for entry in result.report.entries}
    assert "NCCL_PROTO" not in by_key  # declared: the environment wins over the file
    assert by_key["NCCL_IB_HCA"].source == "/etc/nccl.conf:2"
    assert not by_key["NCCL_IB_HCA"].tolerated
    assert by_key["NCCL_CUMEM_ENABLE"].tolerated  # server-owned
    assert "NCCL_IB_HCA" not in result.env  # NCCL sets it inside the process, not us

    for policy, tolerated in (("warn", True), ("strip", False)):
        lenient = profile(policy={"undeclared_nccl": policy})
        plan = build_plan(lenient)
        merged = merge_environment(
            inherited_environment({}, []), plan, lenient.policy, {}, conf, profile_file=FILE
        )
        [entry] = [e for e in merged.report.entries if e.key == "NCCL_IB_HCA"]
        assert entry.tolerated is tolerated, policy


def test_a_fix_line_never_says_to_write_a_secret_into_the_profile() -> None:
    """The profile is shown, diffed and committed: a secret's value goes in an env file."""
    entries = [
        DriftEntry(key=key, kind="changed", expected="a", actual="b", source="calling environment")
        for key in ("API_KEY", "NCCL_PROTO")
    ]
    assert [line.split(", unset")[0] for line in fix_lines(entries)] == [
        "fix ~ (changed): put the value the server should get in an env file the profile names "
        "(env_files), never the profile itself",
        "fix ~ (changed): put the value the server should get in the profile",
    ]


def test_where_a_value_is_declared_and_set_are_fields_the_fixes_read() -> None:
    """A key an env file of the profile declares names that file in `declared_by` (JSON too),
    and the file that sets the value found, in `set_in`, is where the fix removes it."""
    declared = [EnvLayer("/srv/chat.env", {"HF_TOKEN": "new"})]
    resolved = profile()
    result = merge_environment(
        inherited_environment({}, [EnvLayer("old.env", {"HF_TOKEN": "old"})]),
        build_plan(resolved),
        resolved.policy,
        {},
        profile_file=FILE,
        env_files=declared,
    )
    [entry] = result.report.entries
    assert (entry.declared_by, entry.set_in, entry.note) == (
        "env file /srv/chat.env",
        "env file old.env",
        None,
    )
    shown = entry.model_dump(mode="json")
    assert shown["declared_by"] == "env file /srv/chat.env" and "set_in" not in shown
    assert "declared by env file /srv/chat.env" in drift_lines([entry])[0]
    assert fix_lines([entry]) == [
        "fix ~ (changed): put the value the server should get in env file /srv/chat.env, "
        "remove it from env file old.env, or start with the profile's value anyway: "
        '[policy] conflict = "warn"'
    ]
