"""The pure core: plain data in and out; no pyinfra, paramiko, gevent or pynvml, no I/O."""
