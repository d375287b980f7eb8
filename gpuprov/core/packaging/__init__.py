"""The NVIDIA driver and container toolkit as real package sources name and version them.

``sources.yaml`` holds one profile per source (names, version spelling, cited);
``profiles`` loads and validates it and chooses a host's profile; ``versions`` orders Debian
versions and picks the one a plan means among those a host's apt metadata lists. Pure core: the
deploy hands in what the host reported.
"""
