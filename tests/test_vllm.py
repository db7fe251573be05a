"""vLLM's side of the `[server]` table, through the CLI: its profiles validated, its argv as
its parser reads it, the NCCL values it replaces or sets itself, placement, masking, units."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nccl_launch.vllm
from nccl_launch.vllm import rules
from nccl_launch.vllm.server import VllmServer
from tests.conftest import RunCli, WriteProfile, require
from tests.helpers import sleeper

SHIPPED = "kimi-k25-rtx6000bw-tp8-eagle3-vllm"
# The shipped vLLM profile's digest: a change here changes what every deployment of it pins.
SHIPPED_DIGEST = "sha256:a2d8ae899b1f1564548e523bbb657a14430e6502c621b553efa42d6f46d46c13"

HEAD = 'schema = 1\nname = "{name}"\nversion = 1\n'
SERVER = """
[server]
kind = "vllm"
python = "/opt/vllm/bin/python3"
model_path = "/models/m"
"""
SPECULATIVE = """
[server.speculative]
method = "eagle3"
model = "/models/d"
num_speculative_tokens = 3
"""
TUNED = '[nccl]\nPROTO = "LL"\nALGO = "Ring"\nMAX_NCHANNELS = 16\nNTHREADS = 512\n'


def profile(write_profile: WriteProfile, name: str, *parts: str) -> Path:
    """A profile `name` of the given tables (a vLLM [server] unless a part writes another)."""
    return write_profile(name, HEAD.format(name=name) + "\n".join(parts))


def one_error(run_cli: RunCli, name: str) -> str:
    """What `validate` says of a profile it refuses, as one line without the file's name."""
    result = run_cli("validate", f"profiles/{name}.toml")
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    prefix = f"profiles/{name}.toml: "
    assert line.startswith(prefix)
    return line.removeprefix(prefix)


def test_the_shipped_profile_is_valid_with_a_pinned_digest_and_argv(run_cli: RunCli) -> None:
    shown = json.loads(run_cli("show", SHIPPED, "--format", "json").stdout)
    assert shown["digest"] == SHIPPED_DIGEST
    assert shown["argv"] == [
        *("/opt/vllm-env/bin/python3", "-m", "vllm.entrypoints.cli.main", "serve"),
        *("/models/Kimi-K2.5", "--tensor-parallel-size", "8"),
        *("--host", "127.0.0.1", "--port", "8000", "--speculative-config"),
        '{"method":"eagle3","model":"/models/Kimi-K2.5-EAGLE3","num_speculative_tokens":3}',
        "--disable-custom-all-reduce",
    ]
    validated = run_cli("validate", SHIPPED)
    assert (validated.returncode, validated.stderr) == (0, "")
    assert f"sha256:{SHIPPED_DIGEST[7:15]}" in validated.stdout


# The shipped SGLang profiles' digests before a [server] named its kind: units pin them.
SGLANG_DIGESTS = {
    "kimi-k25-rtx6000bw-tp8-eagle3": (
        "sha256:731d33507009f893777dd22d8f24b9b26d9d81204052a46de90e70605e60aead"
    ),
    "rtx6000bw-pcie-tp8": "sha256:6bd995480810b7994eda66e9d438db9fd9901d9d53957a5034a3f0a04eb69b5a",
}


@pytest.mark.parametrize("name", sorted(SGLANG_DIGESTS))
def test_every_sglang_profile_keeps_its_digest(
    name: str, run_cli: RunCli, write_profile: WriteProfile
) -> None:
    shown = json.loads(run_cli("show", name, "--format", "json").stdout)
    assert shown["digest"] == SGLANG_DIGESTS[name]
    if not shown["argv"]:
        return  # no [server] to name a kind in
    # Naming the default kind changes nothing either: the digest is of what runs.
    named = write_profile("named", f'schema = 1\nname = "named"\nversion = 1\nextends = "{name}"\n')
    text = named.read_text() + '[server]\nkind = "sglang"\n'
    named.write_text(text)
    again = json.loads(run_cli("show", "named", "--format", "json").stdout)
    assert again["argv"] == shown["argv"]
    assert again["env"] == shown["env"]


def test_pass_through_speculative_keys_keep_file_order_in_the_json(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    extra = 'draft_tensor_parallel_size = 1\nrejection_sample_method = "standard"\n'
    profile(write_profile, "spec", SERVER, "tp_size = 4", SPECULATIVE + extra)
    argv = json.loads(run_cli("show", "spec", "--format", "json").stdout)["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": "/models/d", "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1, "rejection_sample_method": "standard",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("tables", "error"),
    [
        (
            SERVER.replace('"vllm"', '"tgi"'),
            "server.kind: 'tgi' is not a server kind; valid: sglang, vllm",
        ),
        (
            SERVER + "mem_fraction_static = 0.8\n",
            "server.mem_fraction_static: unknown key; valid "
            "in [server]: python, entrypoint, model_path, tp_size, pp_size, host, port, nnodes, "
            "node_rank, dist_init_addr, cwd, args, kind, speculative",
        ),
        (
            SERVER + SPECULATIVE + 'algorithm = "EAGLE3"\n',
            "server.speculative: algorithm: "
            "unknown key; valid in [server.speculative]: method, model, num_speculative_tokens, ",
        ),
        (
            SERVER + SPECULATIVE + "num_speculative_token = 2\n",
            "server.speculative: "
            "num_speculative_token: unknown key; valid in [server.speculative]: method, model, ",
        ),
        (
            SERVER + SPECULATIVE.replace('"eagle3"', '"EAGLE3"'),
            "server.speculative.method: "
            "'EAGLE3' is not valid; valid: ngram, draft_model, suffix, custom_class, eagle, "
            "eagle3, extract_hidden_states, mtp, dflash, ngram_gpu, dspark",
        ),
        (
            SERVER + SPECULATIVE.replace('"eagle3"', '"deepseek_mtp"'),
            "server.speculative.method: "
            "'deepseek_mtp' is vLLM's deprecated name of 'mtp'; write mtp",
        ),
        (
            SERVER + SPECULATIVE.replace("num_speculative_tokens = 3\n", ""),
            "server.speculative.num_speculative_tokens: required key is missing",
        ),
        (
            SERVER + SPECULATIVE.replace('model = "/models/d"\n', ""),
            "server.speculative.model: "
            "method 'eagle3' drafts with a model of its own; none given; give the draft model's "
            "path (model = ...)",
        ),
        (
            SERVER + SPECULATIVE.replace('"eagle3"', '"ngram"'),
            "server.speculative.model: method "
            "'ngram' takes no draft model (vLLM would ignore it); drop model",
        ),
        (
            SERVER + SPECULATIVE + "tensor_parallel_size = 2\n",
            "server.speculative: "
            "tensor_parallel_size: vLLM refuses it here; write draft_tensor_parallel_size",
        ),
        (
            SERVER + "tp_size = 8\n" + SPECULATIVE + "draft_tensor_parallel_size = 4\n",
            "server.speculative.draft_tensor_parallel_size: 4 is neither 1 nor tp_size = 8, which "
            "vLLM refuses",
        ),
        (
            SERVER + SPECULATIVE + "draft_tensor_parallel_size = true\n",
            "server.speculative.draft_tensor_parallel_size: True is neither 1 nor tp_size = 1, "
            "which vLLM refuses",
        ),
        (
            SERVER + 'args = ["--api-key", ""]\n',
            "server.args: --api-key's value is empty, "
            "which vLLM takes as no key (every request served); refer to the key (--api-key "
            "${API_KEY}) and give it a value in an env file the profile names",
        ),
        (
            SERVER + 'args = ["--api_key", "${API_KEY}"]\n',
            "server.args: ${API_KEY} is set by none of the profile's env files (none); name "
            "one that sets API_KEY in env_files, or name the file that holds it in secret_files",
        ),
        (
            SERVER + 'entrypoint = "-m vllm.entrypoints.cli.main serve --api-key ${API_KEY}"\n',
            "server: entrypoint: holds '${', but only [server] args fill a ${NAME} at start",
        ),
        (
            SERVER + 'nnodes = 2\ndist_init_addr = "10.0.0.1"\n',
            "server.dist_init_addr: "
            "'10.0.0.1' is not HOST:PORT (vLLM's --master-addr and --master-port)",
        ),
        (
            SERVER + 'nnodes = 2\ndist_init_addr = "fe80::1"\n',  # not `fe80:` and port 1
            "server.dist_init_addr: "
            "'fe80::1' is not HOST:PORT (vLLM's --master-addr and --master-port)",
        ),
        (
            SERVER.replace('"/models/m"', '"-h"'),  # vLLM would print its help
            "server.model_path: '-h' starts with '-', which the server reads as an option",
        ),
        (
            SERVER + 'host = "--port=5"\n',
            "server.host: '--port=5' starts with '-', which the server reads as an option",
        ),
        (
            SERVER
            + SPECULATIVE.replace('"eagle3"', '"ngram"').replace('model = "/models/d"', "")
            + "prompt_lookup_max = nan\n",
            "server.speculative: prompt_lookup_max: nan is not a finite number",
        ),
        (
            SERVER + SPECULATIVE.replace('"/models/d"', '""'),
            "server.speculative.model: empty; give the draft model's path, or leave model out",
        ),
        (
            SERVER + "tp_size = 4\nnnodes = 3\n",
            "server.nnodes: tp_size * pp_size = 4 is not a "
            "multiple of nnodes = 3 (vLLM refuses a world size nnodes does not divide)",
        ),
        (
            SERVER + 'tp_size = 4\nnnodes = 8\nargs = ["-dp", "3"]\n',
            "server.nnodes: tp_size "
            "* pp_size * data_parallel_size = 12 is not a multiple of nnodes = 8",
        ),
    ],
)
def test_a_bad_vllm_table_is_one_line_naming_the_key_and_what_is_valid(
    tables: str, error: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "bad", tables)
    assert one_error(run_cli, "bad").startswith(error)


def test_data_parallelism_from_the_args_counts_in_the_world_size(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    # 4 GPUs * 2 replicas on 2 nodes: vLLM takes it, though nnodes does not divide tp_size.
    profile(
        write_profile, "dp", SERVER, 'tp_size = 4\nnnodes = 2\nargs = ["--data_parallel_size=2"]'
    )
    assert run_cli("validate", "dp").returncode == 0


@pytest.mark.parametrize(
    ("words", "field"),
    [
        (["-tp", "4"], "tp_size"),
        (["--tensor_parallel_size=4"], "tp_size"),
        (["--tensor-p", "4"], "tp_size"),  # a unique prefix
        (["-t", "4"], "tp_size"),  # a single-dash prefix, as Python 3.11's argparse reads it
        (["-pp", "2"], "pp_size"),
        (["--model", "/models/x"], "model_path"),
        (["--port=9000"], "port"),
        (["-n", "2"], "nnodes"),
        (["-r", "1"], "node_rank"),
        (["--master_addr", "10.0.0.1"], "dist_init_addr"),
        (["-sc", "{}"], "speculative"),
        (["--speculative-config.method", "ngram"], "speculative"),  # replaces the whole JSON
        (["-sc.num_speculative_tokens=4"], "speculative"),
        (["--spec_method", "eagle3"], "speculative.method"),
        (["--spec-tokens=4"], "speculative.num_speculative_tokens"),
    ],
)
def test_a_field_repeated_in_args_is_refused_in_every_spelling_vllm_reads(
    words: list[str], field: str, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    args = json.dumps(words)
    # A field with no default repeats only where the table sets it: alone, the args say it.
    sets = {"dist_init_addr": 'dist_init_addr = "10.0.0.1:29500"', "speculative": ""}
    table = field.split(".")[0]
    tables = [SERVER + sets.get(table, ""), SPECULATIVE if table == "speculative" else ""]
    if table in sets:
        profile(write_profile, "alone", SERVER, f"args = {args}")
        assert run_cli("validate", "alone").returncode == 0
    profile(write_profile, "again", tables[0], f"args = {args}", tables[1])
    option = words[0].split("=", 1)[0]
    assert one_error(run_cli, "again") == (
        f"server.args: {option} repeats the field {field}; set it there"
    )
    # After `--` too, where the profile says the field is fixed.
    profile(write_profile, "fine", *tables)
    result = run_cli("run", "--dry-run", "fine", "--", *words)
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"nccl-launch: -- ARGS: {option} repeats the field {field}, which `--` cannot change"
    )


def test_a_vllm_field_before_the_dashes_is_said_to_belong_in_the_profile(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "v", SERVER)
    result = run_cli("run", "v", "--master-addr", "10.0.0.1")  # no flag of SGLang's
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: No such option '--master-addr'. --master-addr is the field dist_init_addr: set "
        "dist_init_addr in [server] of the profile (or of a copy: nccl-launch new NAME --from "
        "PROFILE)"
    )
    # `--tp` is SGLang's prefix of --tp-size, not a flag vLLM reads: after `--` it goes.
    other = run_cli("preflight", "v", "--tp", "4")
    assert other.returncode == 2
    assert other.stderr.splitlines()[-1].endswith("nccl-launch preflight PROFILE -- --tp 4")


@pytest.mark.parametrize("words", [["--spec-m", "x"], ["--mode", "x"], ["--master", "h"]])
def test_an_ambiguous_prefix_is_no_repeated_field(
    words: list[str], write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """vLLM refuses these itself (`--spec-m` could match --spec-method, --spec-model): only an
    exact spelling or a unique prefix of a field's flag repeats it."""
    profile(write_profile, "ambiguous", SERVER, f"args = {json.dumps(words)}")
    result = run_cli("validate", "ambiguous")
    assert (result.returncode, result.stderr) == (0, "")


# `extends` across kinds: a [server] that names another kind than its parent's replaces it.


def test_a_vllm_child_of_an_sglang_profile_keeps_its_nccl_values_but_none_of_its_server(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    sglang = """
    [server]
    entrypoint = "-m sglang.launch_server"
    model_path = "/models/m"
    tp_size = 8
    args = ["--mem-fraction-static", "0.8"]
    [server.speculative]
    algorithm = "EAGLE3"
    draft_model_path = "/models/d"
    num_steps = 2
    eagle_topk = 1
    num_draft_tokens = 3
    """
    profile(write_profile, "sglang", TUNED, sglang)
    profile(write_profile, "child", 'extends = "sglang"', SERVER)
    shown = json.loads(run_cli("show", "child", "--format", "json").stdout)
    assert shown["argv"] == [
        "/opt/vllm/bin/python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m",
    ]  # fmt: skip
    assert shown["env"]["NCCL_PROTO"] == "LL"
    # Without its own model path, nothing of the parent's [server] fills it.
    profile(write_profile, "bare", 'extends = "sglang"', '[server]\nkind = "vllm"\n')
    assert one_error(run_cli, "bare") == "server.model_path: required key is missing"


def test_an_sglang_child_of_a_vllm_profile_replaces_its_server_too(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "vllm", TUNED, SERVER, "tp_size = 8", SPECULATIVE)
    child = '[server]\nkind = "sglang"\nmodel_path = "/models/m"\ntp_size = 4\n'
    profile(write_profile, "child", 'extends = "vllm"', child)
    shown = json.loads(run_cli("show", "child", "--format", "json").stdout)
    assert shown["argv"] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--tp-size", "4",
    ]  # fmt: skip
    # A child that names no kind extends its parent's table, whatever kind that is.
    profile(write_profile, "same", 'extends = "vllm"', "[server]\ntp_size = 4\n")
    argv = json.loads(run_cli("show", "same", "--format", "json").stdout)["argv"]
    assert argv[:7] == [
        "/opt/vllm/bin/python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/m",
        "--tensor-parallel-size", "4",
    ]  # fmt: skip
    # Its own [server.speculative] holds the keys of that kind: vLLM's, validated alone too.
    drafted = SPECULATIVE.replace("tokens = 3", "tokens = 5")
    profile(write_profile, "drafted", 'extends = "vllm"', "[server]\ntp_size = 4\n", drafted)
    argv = json.loads(run_cli("show", "drafted", "--format", "json").stdout)["argv"]
    assert argv[-2:] == [
        "--speculative-config",
        '{"method":"eagle3","model":"/models/d","num_speculative_tokens":5}',
    ]


# Batch-invariant mode pins NCCL values whatever the environment holds.

PINNED = (
    "makes vLLM replace NCCL_MAX_NCHANNELS=16 by 1, NCCL_PROTO=LL by Simple, NCCL_ALGO=Ring by "
    "ring,tree;allreduce:tree, NCCL_NTHREADS=512 by 1 (batch-invariant mode pins them)"
)
ACCEPT = '[policy]\naccept = ["env.VLLM_BATCH_INVARIANT overridden"]\n'


def test_batch_invariant_mode_is_refused_over_tuned_values_unless_accepted(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    invariant = '[env]\nVLLM_BATCH_INVARIANT = "1"\n'
    profile(write_profile, "bi", TUNED, invariant, SERVER)
    expected = f"env.VLLM_BATCH_INVARIANT: {PINNED}; drop VLLM_BATCH_INVARIANT, or those values"
    assert one_error(run_cli, "bi") == expected
    ran = run_cli("run", "--dry-run", "bi")
    assert (ran.returncode, ran.stdout) == (2, "")
    assert f"profiles/bi.toml: {expected}" in ran.stderr
    profile(write_profile, "bi", TUNED, invariant, ACCEPT, SERVER)
    validated = run_cli("validate", "bi")
    assert validated.returncode == 0, validated.stderr
    assert 'accepts "env.VLLM_BATCH_INVARIANT overridden"' in validated.stdout
    assert run_cli("run", "--dry-run", "bi").returncode == 0
    # Values batch-invariant mode would set anyway, or `0`, are nothing to refuse.
    same = '[nccl]\nPROTO = "simple"\nMAX_NCHANNELS = 1\n'
    profile(write_profile, "same", same, invariant, SERVER)
    profile(write_profile, "off", TUNED, '[env]\nVLLM_BATCH_INVARIANT = "0"\n', SERVER)
    assert [run_cli("validate", name).returncode for name in ("same", "off")] == [0, 0]


def test_check_tolerates_exactly_the_variables_batch_invariant_mode_sets(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "bi", TUNED, '[env]\nVLLM_BATCH_INVARIANT = "1"\n', ACCEPT, SERVER)
    pins = {
        "NCCL_LAUNCH_MODE": "GROUP", "NCCL_COLLNET_ENABLE": "0", "NCCL_NVLS_ENABLE": "0",
        "NCCL_P2P_NET_DISABLE": "1", "NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "1",
        "NCCL_PROTO": "Simple", "NCCL_ALGO": "ring,tree;allreduce:tree", "NCCL_NTHREADS": "1",
        "NCCL_SOCKET_NTHREADS": "1", "NCCL_NO_CACHE": "NCCL_PROTO,NCCL_ALGO",
    }  # fmt: skip
    worker = {"VLLM_BATCH_INVARIANT": "1", **pins}
    environ = {key.encode(): value.encode() for key, value in worker.items()}
    with sleeper(environ) as pid:
        tolerated = run_cli("check", "bi", "--pid", str(pid), "--format", "json")
    with sleeper(environ | {b"NCCL_IB_HCA": b"mlx5_0"}) as pid:
        other = run_cli("check", "bi", "--pid", str(pid))
    assert tolerated.returncode == 0, tolerated.stdout
    assert other.returncode == 1
    assert "+ NCCL_IB_HCA" in other.stdout


def test_batch_invariant_mode_from_the_calling_environment_refuses_a_run(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "tuned", TUNED, SERVER)
    refused = run_cli("run", "--dry-run", "tuned", env={"VLLM_BATCH_INVARIANT": "1"})
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"nccl-launch: VLLM_BATCH_INVARIANT: '1', which the profile does not declare, "
        f'{PINNED}; unset it, or declare it in [env] and accept "env.VLLM_BATCH_INVARIANT '
        'overridden" in [policy]\n'
    )
    # vLLM reads it with Python's int(): ' +2 ' is on, '-0' off; 'yes' is no number, which
    # vLLM fails to start on, so it is refused too, whatever the profile declares.
    assert run_cli("run", "--dry-run", "tuned", env={"VLLM_BATCH_INVARIANT": " +2 "}).returncode
    for value in ("0", "-0"):
        run = run_cli("run", "--dry-run", "tuned", env={"VLLM_BATCH_INVARIANT": value})
        assert run.returncode == 0, (value, run.stderr)
    for value in ("yes", "true", "1e3", ""):
        run = run_cli("run", "--dry-run", "tuned", env={"VLLM_BATCH_INVARIANT": value})
        assert run.returncode == 2, (value, run.stderr)
        assert f"VLLM_BATCH_INVARIANT: {value!r} is not an integer" in run.stderr
    profile(write_profile, "odd", '[env]\nVLLM_BATCH_INVARIANT = "true"\n', SERVER)
    assert one_error(run_cli, "odd") == (
        "env.VLLM_BATCH_INVARIANT: 'true' is not an integer, which vLLM fails to start on (it "
        "reads it with int()); write 1 (on) or 0 (off)"
    )
    profile(write_profile, "declared", TUNED, '[env]\nVLLM_BATCH_INVARIANT = "1"\n', ACCEPT, SERVER)
    calling = run_cli("run", "--dry-run", "declared", env={"VLLM_BATCH_INVARIANT": "1"})
    assert calling.returncode == 0, calling.stderr


# The variables vLLM sets itself under its own conditions, which `check` tolerates.

SLEEP = ["--enable-sleep-mode", "--sleep-mode-offload-cudagraph"]
EPLB = ["--enable-eplb", "-dp", "2", "--moe-backend", "deep-gemm-mega-moe"]


@pytest.mark.parametrize(
    ("args", "owned"),
    [
        (SLEEP, "NCCL_GRAPH_REGISTER"),
        (["--enable_sleep_mode", "--sleep-mode-o"], "NCCL_GRAPH_REGISTER"),
        ([*SLEEP, "--sleep-mode-backend", "cumem"], "NCCL_GRAPH_REGISTER"),
        ([*SLEEP, "--sleep-mode-backend", "criu"], None),  # another backend: no cuMem pool
        ([*SLEEP, "--enforce-eager"], None),  # no CUDA graphs
        ([*SLEEP, "--disable-sleep-mode"], None),  # the last one wins
        (SLEEP[:1], None),
        (EPLB, "NCCL_MAX_CTAS"),
        (EPLB[:1], None),  # not with the default MoE backend
        (EPLB[:3], None),
        ([*EPLB, "--disable-eplb"], None),
        ([*EPLB[:1], *EPLB[3:]], None),  # no data parallelism
    ],
)
def test_check_tolerates_what_vllm_sets_only_where_it_sets_it(
    args: list[str], owned: str | None, write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "owned", '[nccl]\nPROTO = "LL"\n', SERVER, f"args = {json.dumps(args)}")
    environ = {b"NCCL_PROTO": b"LL", b"NCCL_GRAPH_REGISTER": b"0", b"NCCL_MAX_CTAS": b"8"}
    with sleeper(environ) as pid:
        result = run_cli("check", "owned", "--pid", str(pid))
    drifted = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("  + ")}
    assert drifted == {"NCCL_GRAPH_REGISTER", "NCCL_MAX_CTAS"} - {owned}


def test_a_declared_value_vllm_keeps_is_compared_not_tolerated(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """vLLM sets NCCL_GRAPH_REGISTER and NCCL_MAX_CTAS only where the environment has none:
    one the profile declares reaches the server and is compared like any other."""
    declared = "[nccl]\nGRAPH_REGISTER = 1\nMAX_CTAS = 16\n"
    args = f"args = {json.dumps(SLEEP + EPLB)}"
    profile(write_profile, "kept", declared, SERVER, args)
    with sleeper({b"NCCL_GRAPH_REGISTER": b"0", b"NCCL_MAX_CTAS": b"8"}) as pid:
        result = run_cli("check", "kept", "--pid", str(pid))
    assert result.returncode == 1
    assert "~ NCCL_GRAPH_REGISTER" in result.stdout
    assert "~ NCCL_MAX_CTAS" in result.stdout
    # Sleep mode keeps the value but warns about it.
    validated = run_cli("validate", "kept")
    assert "env.NCCL_GRAPH_REGISTER: 1 with sleep mode offloading CUDA graphs" in validated.stderr


# Placement: the node's rank and the first node's address as vLLM takes them.


def test_run_places_a_vllm_node_with_master_addr_and_port(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    profile(write_profile, "two", SERVER, "tp_size = 8\nnnodes = 2")
    result = run_cli(
        "run", "--dry-run", "two", "--node-rank", "1", "--dist-init-addr", "[fd00::1]:5000"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith(
        "serve /models/m --tensor-parallel-size 8 --nnodes 2 --node-rank 1 "
        "--master-addr fd00::1 --master-port 5000"
    )
    bad = run_cli("run", "--dry-run", "two", "--node-rank", "1", "--dist-init-addr", "head")
    assert (bad.returncode, bad.stderr) == (
        2,
        "nccl-launch: --dist-init-addr: 'head' is not HOST:PORT (vLLM's --master-addr and "
        "--master-port)\n",
    )
    slurm = run_cli(
        "run", "--dry-run", "two", "--dist-init-addr", "h:5000", env={"SLURM_NODEID": "0"}
    )
    assert slurm.stdout.splitlines()[-1].endswith(
        "--node-rank 0 --master-addr h --master-port 5000"
    )


# Masking: a credential in any spelling vLLM's parser reads as one.

CREDENTIALS = ["--hf-token", "hf_one", "--hf_token=hf_two", "--hf-t", "hf_three",
               "--api_key", "sk-four", "--api-k=sk-five"]  # fmt: skip


def test_credentials_in_every_spelling_are_masked_in_every_output(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    args = f"args = {json.dumps(CREDENTIALS)}"
    env = f"[env]\nVLLM_EXTRA = {json.dumps(' '.join(CREDENTIALS))}\n"
    profile(write_profile, "secret", env, SERVER, args, '[policy]\nconflict = "refuse"\n')
    dry = run_cli("run", "--dry-run", "secret")
    drift = run_cli("run", "--dry-run", "secret", env={"VLLM_EXTRA": "--hf-t hf_six"})
    extra = run_cli(
        "run", "--dry-run", "secret", "--", "--tensor_parallel_size", "2", "--api_key", "sk-seven"
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "--hf-token '***' '--hf_token=***' --hf-t '***' --api_key '***' '--api-k=***'" in dry.stdout
    )
    assert drift.returncode == 1
    assert extra.returncode == 2
    validated = run_cli("validate", "secret")
    assert "server.args: holds a credential" in validated.stderr
    # --api-key takes one or more keys: every one up to the next option is masked.
    listed = run_cli("run", "--dry-run", "secret", "--", "--api-key", "sk-eight", "sk-nine", "-O3")
    assert "--api-key '***' '***' -O3" in listed.stdout
    for result in (dry, drift, extra, validated, listed):
        text = result.stdout + result.stderr
        secrets = ("hf_one", "hf_two", "hf_three", "sk-four", "sk-five", "hf_six", "sk-seven")
        for secret in (*secrets, "sk-eight", "sk-nine"):
            assert secret not in text


# A systemd unit for a vLLM profile.


def test_systemd_writes_a_vllm_unit_that_systemd_analyze_accepts(
    write_profile: WriteProfile, run_cli: RunCli, tmp_path: Path, systemd_analyze: str
) -> None:
    server = SERVER.replace("/opt/vllm/bin/python3", sys.executable)
    path = profile(
        write_profile, "served", 'env_files = ["served.env"]', TUNED, server, SPECULATIVE
    )
    path.with_name("served.env").write_text("API_KEY=sk-live-1\n")
    target = tmp_path / "vllm-served.service"
    result = run_cli("systemd", "served", "-o", str(target), "--", "--api-key", "${API_KEY}")
    assert (result.returncode, result.stderr) == (0, "")
    lines = target.read_text().splitlines()
    for command in ("ExecStartPre=", "ExecStart="):
        [line] = [line for line in lines if line.startswith(command)]
        assert line.endswith(' -- --api-key "${API_KEY}"')
    assert "sk-live-1" not in target.read_text()
    done = subprocess.run(
        [systemd_analyze, "verify", str(target)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    empty = run_cli("systemd", "served", "--", "--api_key", "")
    assert empty.returncode == 2
    assert "--api_key's value is empty, which vLLM takes as no key" in empty.stderr


def test_an_empty_vllm_api_key_in_an_env_file_is_refused_where_no_flag_gives_a_key(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """vLLM reads its key from VLLM_API_KEY when no --api-key is given; empty, it checks none
    and serves every request, so run and systemd refuse it as they refuse an empty flag."""
    path = profile(write_profile, "open", 'env_files = ["open.env"]', SERVER)
    path.with_name("open.env").write_text("VLLM_API_KEY=\n")
    refused = (
        "nccl-launch: profiles/open.toml: VLLM_API_KEY is empty in env file "
        f"{path.with_name('open.env')}, which vLLM takes as no key (every request served); "
        "write the key there"
    )
    for command in ("run", "systemd"):
        args = ["--dry-run"] if command == "run" else []
        result = run_cli(command, *args, "open")
        assert (result.returncode, result.stderr.splitlines()[-1:]) == (3, [refused])
    # Written empty in [env]: the same, but the profile's to fix, on every host (exit 2).
    profile(write_profile, "bare", '[env]\nVLLM_API_KEY = ""\n', SERVER)
    for command in ("run", "systemd"):
        args = ["--dry-run"] if command == "run" else []
        result = run_cli(command, *args, "bare")
        assert result.returncode == 2
        assert "VLLM_API_KEY is empty in profiles/bare.toml" in result.stderr
    calling = run_cli("run", "--dry-run", "bare", env={"VLLM_API_KEY": ""})
    assert "VLLM_API_KEY is empty in" in calling.stderr
    # A key flag wins over the variable: nothing to refuse.
    assert run_cli("run", "--dry-run", "open", "--", "--api-key", "sk-1").returncode == 0
    path.with_name("open.env").write_text("VLLM_API_KEY=sk-live-2\n")
    result = run_cli("run", "--dry-run", "open")
    assert result.returncode == 0
    assert "sk-live-2" not in result.stdout + result.stderr
    unit = run_cli("systemd", "open").stdout
    assert "Description=vLLM server of open@1 (open@1)" in unit.splitlines()


# The option strings are vLLM's own: read again from its parser where vLLM is installed.

VLLM_PYTHON = os.environ.get("NCCL_LAUNCH_TEST_VLLM_PYTHON")  # read before isolation clears it
OPTIONS = """
import argparse
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import EnableDisableAction, FlexibleArgumentParser
serve = ServeSubcommand().subparser_init(FlexibleArgumentParser().add_subparsers())
for option, action in sorted(serve._option_string_actions.items()):
    if isinstance(action, EnableDisableAction):
        stored = " off" if option in action.negative_option_strings else " on"
    elif isinstance(action, argparse.BooleanOptionalAction):
        stored = " off" if option.startswith("--no-") else " on"
    elif isinstance(action, argparse._StoreTrueAction):
        stored = " on"
    elif isinstance(action, argparse._StoreFalseAction):
        stored = " off"
    else:
        stored = ""
    print(f"{option} {action.dest}{stored}")
"""


def test_the_option_strings_are_those_of_the_installed_vllm_parser() -> None:
    python = require(VLLM_PYTHON, "set NCCL_LAUNCH_TEST_VLLM_PYTHON to a vLLM 0.33.0 venv's python")
    done = subprocess.run(
        [python, "-c", OPTIONS],
        env={"VLLM_TARGET_DEVICE": "cpu", "PATH": os.environ["PATH"], "HOME": os.environ["HOME"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = Path(nccl_launch.vllm.__file__).parent / "data" / "options.txt"
    lines = [line for line in data.read_text().splitlines() if not line.startswith("#")]
    assert done.stdout.splitlines() == lines


def test_a_config_file_in_args_is_a_warning_it_can_accept(
    write_profile: WriteProfile, run_cli: RunCli
) -> None:
    """vLLM's --config reads flags from a YAML file nccl-launch does not read: said."""
    profile(write_profile, "yaml", SERVER, 'args = ["--config", "x.yaml"]')
    result = run_cli("validate", "yaml")
    assert result.returncode == 0
    assert "server.args: --config x.yaml: vLLM reads flags from that file" in result.stderr
    assert '[accept: "server.args config-file"]' in result.stderr
    profile(write_profile, "yaml", SERVER, 'args = ["--config", "x.yaml"]', ACCEPT.replace(
        "env.VLLM_BATCH_INVARIANT overridden", "server.args config-file"))  # fmt: skip
    assert run_cli("validate", "yaml").stderr == ""


@pytest.mark.parametrize(
    ("speculative", "code"),
    [
        ({"method": "eagle3", "num_speculative_tokens": 3}, "no-draft"),
        ({"method": "ngram", "model": "/d", "num_speculative_tokens": 3}, "unused-draft"),
        (
            {"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 4},
            "draft-tp",
        ),
    ],
)
def test_each_speculative_rule_has_its_own_code(speculative: dict[str, object], code: str) -> None:
    table = VllmServer.model_validate(
        {"kind": "vllm", "model_path": "/m", "tp_size": 8, "speculative": speculative}
    )
    assert [problem.code for problem in rules.server_problems(table)] == [code]
