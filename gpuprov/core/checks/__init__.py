"""What verify compares that is not a file: the GPUs NVML reports (``gpus``), their health, the
packages and units the deploy installs and enables (``packages``, ``units``) and what the kubelet
registered from the device plugin (``kubelet_devices``). The files gpuprov writes are checked by
their own modules in ``gpuprov/core/hostfiles/``; ``gpuprov/core/checks/host.py`` runs them all."""
