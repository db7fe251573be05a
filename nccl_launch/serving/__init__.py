"""What every server kind shares: what a kind is, the [server] base and its rules, ${NAME}."""
