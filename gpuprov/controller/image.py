"""gpuprov's fleet image (placeholder; the builder follows)."""

from gpuprov import __version__

# A name that never resolves (RFC 2606 ``.invalid``): a cluster names its registry's copy.
DEFAULT_IMAGE = f"gpuprov.invalid/gpuprov-fleet:{__version__}"
