"""Artefacts for other tools: the systemd unit, env exports, files written atomically."""
