#!/bin/bash
# Guards, a helper, here-docs and arithmetic: only the code bash runs reaches the server.
set -eu
log() { echo "$(date +%T) $*" >&2; export NCCL_PROTO=Simple; }
cat > /dev/null <<EOF
export NCCL_PROTO=Simple
python3 -m sglang.launch_server --model-path /wrong/$(hostname)
EOF
cat > /dev/null <<-'END'
	export NCCL_ALGO=Tree
	END
export NCCL_PROTO=LL
cd "${SERVER_DIR:-/srv/sglang}" || exit 1
cd . || { echo "cannot stay in $PWD" >&2; export NCCL_ALGO=Tree; exit 1; }
mkdir -p logs && { export NCCL_ALGO=Ring; echo "logs in $PWD/logs"; }
true || export NCCL_ALGO=Tree
GPUS=4
export NCCL_MAX_NCHANNELS=$((GPUS * 4))
exec python3 -X "pycache_prefix=$SERVER_DIR/py cache" -m sglang.launch_server \
    --model-path /models/m --tp $((GPUS / 2)) --served-model-name "my model" \
    > logs/server.log 2>&1
export NCCL_PROTO=LL128
exit 0
