"""The lab's own failure: something on this machine did not work (not the user's input).

The CLI prints it as one message and exits 1; bad input is ``gpuprov.core.errors.InputError`` (exit 2).

>>> str(LabError("lab-a100-01: no SSH answer after 60 s"))
'lab-a100-01: no SSH answer after 60 s'
"""


class LabError(RuntimeError):
    """Starting, stopping or inspecting the lab failed; the message says where."""
