#!/bin/bash
# Kimi-K2.5 on the 8-GPU box. The tuned NCCL values, copied from the tuning notes.
set -euo pipefail

export NCCL_PROTO=LL
export NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS
export NCCL_MAX_NCHANNELS=16 NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512
export PATH=/opt/ml-env/bin:$PATH      # depends on the caller: left out of the profile

MODEL=/models/Kimi-K2.5                # a shell variable, not exported
cd "${SERVER_DIR:-/srv/sglang}"

HF_HUB_OFFLINE=1 exec python3 -m sglang.launch_server \
    --model-path "$MODEL" --tp 8 --port ${PORT:-8000} \
    --speculative-algorithm EAGLE3 --speculative-draft-model-path "${MODEL}-EAGLE3" \
    --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3 \
    --disable-custom-all-reduce --num-continuous-decode-steps 4 \
    2>&1 | tee -a server.log
