"""gpuprov: provision NVIDIA GPU hosts into well-packed Kubernetes nodes."""

__version__ = "0.1.0"
