"""Artefacts for other tools: the systemd unit and the env exports."""
