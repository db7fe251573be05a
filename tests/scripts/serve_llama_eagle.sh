#!/usr/bin/env bash
# Llama with EAGLE, started in the background with its log in a file.
set -a                                   # everything assigned below is exported
CUDA_VISIBLE_DEVICES=0,1,2,3
NCCL_DEBUG=WARN
NCCL_IB_DISABLE=1
set +a
DRAFT='/models/EAGLE-LLaMA3-Instruct-8B'
PORT=30001

cd "${SERVER_DIR:-/srv/llama}"
NCCL_SOCKET_IFNAME=^docker,lo TOKENIZERS_PARALLELISM=false \
  nohup env OMP_NUM_THREADS=8 python3 -m sglang.launch_server --model /models/Meta-Llama-3-8B-Instruct \
  --tensor-parallel-size=4 --port=$PORT --host 127.0.0.1 \
  --speculative-algorithm eagle --speculative-draft-model "$DRAFT" \
  --speculative-num-steps 5 --speculative-eagle-topk 8 --speculative-num-draft-tokens 64 \
  --speculative-accept-threshold-single 1.0 \
  --mem-fraction-static 0.7 --served-model-name "llama 3 (eagle)" > llama.log 2>&1 &
echo "started $!"
