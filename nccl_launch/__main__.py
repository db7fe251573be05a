from nccl_launch.cli import main

main()
