"""A network namespace of the harness's own, joined to this one by a veth pair, and a TCP relay from an address
inside it to a port on loopback.

Why: the API server reaches an aggregated API (KEDA's metrics adapter) through its Service's Endpoints when run
with ``--enable-aggregator-routing=true``, and Endpoints may not name loopback (the API server refuses
127.0.0.0/8). So the harness makes an address of its own for the Endpoints: ``10.251.<n>.2`` inside a namespace
it creates (``vpo-<run>``), with ``10.251.<n>.1`` on its end of the pair. The relay listens on the namespace's
address and forwards each connection to the adapter on ``127.0.0.1`` (the listening socket is made inside the
namespace with setns(2); a socket keeps the namespace it was made in). The API server is the only client;
nothing is sent to this machine's other addresses or beyond.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and ``ip`` (iproute2); ``available()`` says why not where it cannot.
The namespace and its pair are removed by ``close()`` (deleting the namespace removes both ends of the pair); the name carries the creating
process's pid, so a killed run's are removed by the next ``create()`` (``remove_strays``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import threading
import zlib
from pathlib import Path

CLONE_NEWNET = 0x40000000
PREFIX = "vpo-"


class NetnsUnavailable(RuntimeError):
    """This machine cannot give the harness a network namespace (not root, no iproute2)."""


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "a network namespace needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if not shutil.which("ip"):
        return "iproute2's ip is not on PATH"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {res.stderr.strip() or res.returncode}")
    return res


def remove_strays() -> None:
    """Delete the harness's namespaces (``vpo-<pid>-<tag>``) whose process is gone (a run that was killed)."""
    res = _ip("netns", "list", check=False)
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        pid = name[len(PREFIX):].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _ip("netns", "delete", name, check=False)


class Netns:
    """``vpo-<pid>-<tag>`` with ``10.251.<n>.2/30`` inside and ``10.251.<n>.1/30`` on this side (n from the
    name)."""

    def __init__(self, tag: str):
        if why := available():
            raise NetnsUnavailable(why)
        self.name = f"{PREFIX}{os.getpid()}-{tag}"
        n = zlib.crc32(self.name.encode()) % 250 + 1
        self.host_ip, self.inner_ip = f"10.251.{n}.1", f"10.251.{n}.2"
        self._host_if = f"vpo{n}h"
        self._relays: list[Relay] = []

    def create(self) -> Netns:
        remove_strays()
        _ip("netns", "delete", self.name, check=False)
        _ip("link", "delete", self._host_if, check=False)
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self._host_if, "type", "veth", "peer", "name", "eth0", "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self._host_if)
            _ip("link", "set", self._host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.inner_ip}/30", "dev", "eth0")
            _ip("-n", self.name, "link", "set", "eth0", "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except Exception:
            self.close()
            raise
        return self

    def relay(self, port: int, target_port: int) -> Relay:
        """Forward ``inner_ip:port`` (inside the namespace) to ``127.0.0.1:target_port`` (here)."""
        r = Relay(self._listen_inside(port), target_port)
        self._relays.append(r)
        return r.start()

    def _listen_inside(self, port: int) -> socket.socket:
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/self/ns/net") as here, open(f"/run/netns/{self.name}") as there:
            # setns changes the calling thread only: do it on a thread of its own, so no other thread of this
            # process ever runs in the namespace
            made: list[socket.socket | BaseException] = []

            def inside() -> None:
                try:
                    if libc.setns(there.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the namespace")
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((self.inner_ip, port))
                    s.listen(64)
                    made.append(s)
                except BaseException as e:
                    made.append(e)
                finally:
                    libc.setns(here.fileno(), CLONE_NEWNET)

            t = threading.Thread(target=inside, name="netns-listen")
            t.start()
            t.join()
        [result] = made
        if isinstance(result, BaseException):
            raise NetnsUnavailable(f"listening on {self.inner_ip}:{port} in {self.name}: {result}")
        return result

    def close(self) -> None:
        for r in self._relays:
            r.close()
        self._relays.clear()
        _ip("netns", "delete", self.name, check=False)
        _ip("link", "delete", self._host_if, check=False)

    def __enter__(self) -> Netns:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Relay:
    """Accepts on a listening socket and splices each connection to ``127.0.0.1:target_port``, both ways."""

    def __init__(self, listener: socket.socket, target_port: int):
        self.listener = listener
        self.target_port = target_port
        self.connections = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="netns-relay", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            self.connections += 1
            threading.Thread(target=_splice, args=(conn, upstream), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(timeout=5)


def _splice(a: socket.socket, b: socket.socket) -> None:
    back = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    back.start()
    _pipe(a, b)
    back.join()
    a.close()
    b.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
