"""The TCP proxy layer of the network faults lives in `kraftpy.testing.proxy`, where `kraftpy.testing`
cuts brokers off with it too; the harness's modules and tests import it from here."""

from kraftpy.testing.proxy import (  # noqa: F401
    Proxy,
    Route,
    SocketOwners,
    ThreadedProxy,
    _owns,
    by_source_address,
    socket_inode,
)
