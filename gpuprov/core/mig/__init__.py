"""MIG layouts: the exact placement solver."""
