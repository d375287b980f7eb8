"""MIG on the host: the planned layout file, the instance diff, and the applier that makes the
GPUs match it through NVML by the driver's own rules."""
