"""Who may reach the emulator: it is a test tool, with a job control and a fault header that take
no credential, so both answer only callers on this machine (loopback), and listening anywhere else
is said loudly. Loopback rather than a token: the tests and ``slurm-job-api-emulator control`` run
on the emulator's machine and need nothing configured, and no token can leak into a test's log."""

from __future__ import annotations

import ipaddress
import socket


def is_loopback_address(address: str | None) -> bool:
    """Whether a peer's IP address (``request.remote``) is this machine's loopback."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, from a dual-stack socket
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def is_loopback_host(host: str) -> bool:
    """Whether listening on ``host`` (an address or a name) is reachable from this machine only."""
    if not host:
        return False  # every interface
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(resolved) and all(is_loopback_address(str(address)) for address in resolved)


def exposure_warning(host: str) -> str | None:
    """The warning for an emulator that listens on ``host``, or None on loopback."""
    if is_loopback_host(host):
        return None
    return (
        f"WARNING: the emulator listens on {host!r}, so other machines may call it. Its jobs run "
        "as the user who started it; its job control and fault header still answer only callers on "
        "this machine. Use --host 127.0.0.1 unless another machine must reach it."
    )


def loopback_only(what: str, address: str | None) -> str | None:
    """Why ``what`` is refused to the caller at ``address``, or None for a loopback caller."""
    if is_loopback_address(address):
        return None
    return f"{what} is accepted only from this machine (loopback); the caller {address or '(unknown)'} is not"
