"""Where a server may listen: an IP address or a host name, checked before it reaches a script
or a unit, and whether it keeps the server on this machine (loopback)."""

from __future__ import annotations

import ipaddress
import re

_LABEL = r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"


class AddressError(ValueError):
    """A ``--host`` value that is neither an IP address nor a host name."""


def check_host(host: str) -> str:
    """``host`` when it is one IPv4 or IPv6 address (no zone, no brackets) or one DNS host
    name (RFC 1123 labels, at most 253 characters); else :class:`AddressError` saying why."""
    if not isinstance(host, str) or not host:
        raise AddressError("the listen address is empty")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if "%" in host:
            raise AddressError(f"{host!r}: an IPv6 zone (%...) is not accepted; give the address alone")
        return host
    if len(host) > 253:
        raise AddressError(f"{host[:40]!r}...: a host name has at most 253 characters")
    labels = host.split(".")
    if not all(re.match(_LABEL, label) for label in labels):
        raise AddressError(f"{host!r} is neither an IP address nor a host name (letters, digits "
                           "and '-' in dot-separated labels)")
    if all(label.isdigit() for label in labels):
        raise AddressError(f"{host!r} looks like an IPv4 address but is not one")
    return host


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps a server reachable from this machine only."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
