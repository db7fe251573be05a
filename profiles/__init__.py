"""The profiles shipped with nccl-launch: pyproject.toml installs this folder as the package
`nccl_launch.shipped`, which the profile search path reads last (profile/search.py)."""
