"""Reports as people read them (aligned text) and as Prometheus scrapes them."""
