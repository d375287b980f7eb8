"""pyinfra operations: each ensures one state on a host and yields commands only when the host
differs from it."""
