"""Which hosts are this machine: the one loopback rule of the reward servers' bind warning and a recipe's node plan.

A connection to a *loopback* host never leaves this machine:

- `localhost` and every name under it (`api.localhost`; RFC 6761 section 6.3 reserves them for the loopback
  interface), in any case, with or without the root's trailing dot;
- 127.0.0.0/8, `::1` and the IPv4-mapped `::ffff:127.x.y.z`;
- the unspecified address `0.0.0.0` or `::` *as a destination*: Linux connects it to this machine.

Other names (this machine's host name, its interfaces' addresses) are this machine too, but the other machines reach
them: they are not loopback. The unspecified address *as a bind address* listens on every interface: a server bound
there is reached from other machines (`listens_beyond_loopback`).
"""

from __future__ import annotations

import ipaddress


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address (brackets of a URL's IPv6 host and a zone index allowed), or None for a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def is_loopback(host: str) -> bool:
    """True when a connection to `host` (a name or an address, as a URL holds it) never leaves this machine."""
    name = host.strip("[]").lower().removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _address(host)
    return address is not None and (address.is_loopback or address.is_unspecified)


def listens_beyond_loopback(host: str) -> bool:
    """True when a server bound to `host` is reached from other machines: any host but a loopback one, and the
    unspecified address (`0.0.0.0`, `::`: every interface)."""
    address = _address(host)
    return not is_loopback(host) or (address is not None and address.is_unspecified)
