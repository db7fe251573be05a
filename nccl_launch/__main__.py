import sys

from nccl_launch.cli import main

sys.exit(main())
