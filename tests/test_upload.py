"""A file upload whose SFTP channel cannot be opened fails its host the way pyinfra fails a
host whose command loses its connection: an ``SSHException``, which pyinfra's operation runner
catches per host, never a ``ConnectError`` that stops the whole run."""

from __future__ import annotations

import pytest
from paramiko import SSHException
from pyinfra.api.exceptions import ConnectError

from gpuprov.controller.operations.upload import Upload


class CutHost:
    """What pyinfra's SSH connector does when the connection was cut under the upload."""

    def put_file(self, *args, **kwargs):
        raise ConnectError("Unable to establish SFTP connection.")


class State:
    print_output = print_input = False


def test_a_cut_connection_is_the_ssh_error_pyinfra_fails_one_host_for():
    with pytest.raises(SSHException, match="upload of /etc/x.tmp: Unable to establish SFTP"):
        Upload("/tmp/x", "/etc/x.tmp").execute(State(), CutHost(), {})


def test_an_upload_that_works_gives_the_connectors_answer():
    class Host:
        def put_file(self, src, dest, **kwargs):
            return (src, dest)

    assert Upload("/tmp/x", "/etc/x").execute(State(), Host(), {}) == ("/tmp/x", "/etc/x")
