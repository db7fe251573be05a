"""`bench`: decode speed measured only on a server proved to run its profile, stamped, kept."""

# The most tokens a request asks for and a result holds: a history line claiming more is no
# measurement (nor is 10**400). Here, so that `bench`'s options (and a TAB) need no model.
TOKEN_LIMIT = 2**31 - 1

# How decode is measured where neither the options nor the profile's [baseline] say.
DEFAULT_MAX_TOKENS = 500
DEFAULT_RUNS = 5
DEFAULT_PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
