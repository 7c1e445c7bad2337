"""The one loopback rule (`verl_bot_contract.loopback`): which hosts are this machine, as a destination and as a
bind address; every row written by hand."""

import pytest

from verl_bot_contract.loopback import is_loopback, listens_beyond_loopback

# host -> (a connection to it stays on this machine, a server bound to it is reached from other machines)
HOSTS = {
    "localhost": (True, False),
    "LOCALHOST": (True, False),
    "localhost.": (True, False),  # the root's trailing dot
    "api.localhost": (True, False),  # RFC 6761: every name under localhost is loopback
    "a.b.Localhost": (True, False),
    "127.0.0.1": (True, False),
    "127.255.3.9": (True, False),  # all of 127.0.0.0/8
    "::1": (True, False),
    "[::1]": (True, False),  # as a URL writes an IPv6 host
    "::ffff:127.0.0.1": (True, False),  # IPv4-mapped
    "0.0.0.0": (True, True),  # a destination on this machine; as a bind address every interface
    "::": (True, True),
    "[::]": (True, True),
    "": (False, True),
    "localhost.example.com": (False, True),
    "notlocalhost": (False, True),
    "gpu3": (False, True),
    "10.0.0.5": (False, True),
    "128.0.0.1": (False, True),
    "::2": (False, True),
    "fe80::1%eth0": (False, True),  # link-local reaches the neighbours
    "::ffff:10.0.0.5": (False, True),
}


@pytest.mark.parametrize(("host", "expected"), HOSTS.items())
def test_which_hosts_are_this_machine(host, expected):
    assert (is_loopback(host), listens_beyond_loopback(host)) == expected
