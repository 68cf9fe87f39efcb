"""Ansible connection to a test machine: commands run on this computer, as with ``local``.

``ansible.builtin.reboot`` refuses the ``local`` connection (it would reboot the controller).
A test machine is a directory, and its reboot is ``tests/support/boot_machine.py``, which the
role test passes as ``reboot_command``; this connection differs from ``local`` only in its
name, so the real reboot action runs against that directory.
"""

from __future__ import annotations

from ansible.plugins.connection.local import Connection as LocalConnection

DOCUMENTATION = """
    name: machine
    short_description: run on this computer, for a test machine directory
    description:
        - The local connection under another name, so that ansible.builtin.reboot runs the
          reboot command it is given (the boot of a test machine directory).
    author: ojai developers
    options:
        become_success_timeout:
            type: int
            default: 10
            description: As for the local connection.
        become_strip_preamble:
            type: bool
            default: true
            description: As for the local connection.
    extends_documentation_fragment:
        - connection_pipelining
"""


class Connection(LocalConnection):
    transport = "machine"
