"""pyinfra facts: what a host has, read in as few round trips as possible (one per deploy)."""
