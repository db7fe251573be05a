"""What every server kind shares: the [server] base, its flags as argparse reads them, ${NAME}."""
