"""MIG layouts: the exact placement solver and its result types."""
