#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --gres=gpu:8
# One task per node; srun runs this on both. Node rank and head address come from Slurm.
export NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_IB_HCA=mlx5_0,mlx5_1
python3 -m sglang.launch_server --model-path /models/DeepSeek-V3 --tp 16 --nnodes 2 \
    --node-rank $SLURM_NODEID --dist-init-addr $HEAD_NODE:5000 --trust-remote-code
