"""Jinja2 templates the deploys render, each named after the file it produces."""
