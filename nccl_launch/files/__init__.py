"""Files in and out: a named path looked at, regular files read, trust as root, atomic writes."""
