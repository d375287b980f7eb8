"""What verify compares that is not a file: the GPUs NVML reports (``gpus``). The files gpuprov
writes are checked by their own modules in ``gpuprov/hostfiles/``; ``gpuprov/compare.py`` runs
them all."""
