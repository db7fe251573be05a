"""Starting a server: prepare the launch (env files, nccl.conf, placement), preflight, exec."""
