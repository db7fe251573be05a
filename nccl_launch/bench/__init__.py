"""`bench`: decode speed measured only on a server proved to run its profile, stamped, kept."""

# The most tokens a request asks for and a result holds: a history line claiming more is no
# measurement (nor is 10**400). Here, so that `bench`'s options (and a TAB) need no model.
TOKEN_LIMIT = 2**31 - 1
