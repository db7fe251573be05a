"""`bench`: decode speed measured only on a server proved to run its profile, stamped, kept."""
