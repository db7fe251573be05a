"""What people must not see: which values are secret, decided once, and masking them in text."""
