"""The host-side agent, shipped as ``/usr/lib/gpuprov/agent.pyz``: ``probe`` and ``apply``.

Everything under this package runs on GPU hosts with only the stdlib and pynvml (bundled).

>>> from gpuprov.agent.main import main
>>> main(["apply", "--layout", "/etc/gpuprov/mig-layout.json", "--check"])  # doctest: +SKIP
0
"""
