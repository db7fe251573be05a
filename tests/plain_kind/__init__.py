"""A server kind of the tests' own: a plain OpenAI-compatible server (tests/standin)."""
