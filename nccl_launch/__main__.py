from nccl_launch.cli import console

console()
