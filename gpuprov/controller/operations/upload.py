"""A file upload whose lost connection fails its host alone, as a lost command does.

pyinfra 3.x fails a host whose command meets a socket or SSH error (``_run_host_op`` catches
``OSError`` and ``SSHException`` around ``command.execute`` and logs "Command socket/SSH
error"), but its SSH connector turns an SFTP channel that cannot be opened (the connection cut
under the upload) into ``ConnectError``, which nothing catches: the greenlet dies and the whole
run stops with "pyinfra error", every other host's work cut short with it (seen in the lab:
tests/lab/test_lost_ssh.py when the cut met the first upload). ``Upload`` gives that error to
pyinfra as the SSH error it is.

>>> Upload("/tmp/x", "/etc/x")
FileUploadCommand(/tmp/x, /etc/x)
"""

from __future__ import annotations

from paramiko import SSHException
from pyinfra.api import FileUploadCommand
from pyinfra.api.exceptions import ConnectError


class Upload(FileUploadCommand):
    """``FileUploadCommand`` whose ``ConnectError`` is an ``SSHException``."""

    def execute(self, state, host, connector_arguments):
        try:
            return super().execute(state, host, connector_arguments)
        except ConnectError as e:
            raise SSHException(f"upload of {self.dest}: {e}") from e
