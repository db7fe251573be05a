"""The shell reader: a start script and the files it sources, read as bash would run them."""
