"""Backup and restore as the README tells an operator to do them: --export-snapshot from a
stopped replica's data directory, --import-snapshot into every replica's new one, then the whole
cell starts from the backup's state."""
import json
import os
import shutil
import subprocess

import pytest

from api import Client
from cell import Cell, voltlockd_available, voltlockd_path

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not voltlockd_available(),
                                reason="needs root (network namespaces) and build/voltlockd")


def voltlockd(*args: str, umask: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([voltlockd_path(), *args], capture_output=True, text=True, timeout=60,
                          preexec_fn=None if umask is None else lambda: os.umask(umask))


def keys_under(client: Client, replica: int, prefix: str) -> set[str]:
    """Every key under `prefix`, page after page."""
    keys, after = set(), ""
    while True:
        page = client(replica, "GET", f"/v1/kv/{prefix}?prefix=true&after={after}").body
        keys |= {kv["key"] for kv in page["kvs"]}
        if not page["more"]:
            return keys
        after = page["next_after"]


def config_of(cell: Cell, replica: int) -> str:
    return os.path.join(os.path.dirname(cell.replicas[replica]["log"]), "config.json")


def write_keys_and_stop(cell: Cell, keys: int) -> None:
    """Writes `keys` keys at the cell of one replica, then stops it (a snapshot to export)."""
    client = Client(cell)
    try:
        for i in range(keys):
            assert client(0, "PUT", f"/v1/kv/k{i}", {"value": "v"}).status == 200
    finally:
        client.close()
    cell.stop(0)


def test_a_backup_restores_every_replica_to_its_state(tmp_path):
    with Cell(replicas=3, snapshot_every_ops=100) as cell:
        client = Client(cell)
        try:
            for i in range(250):
                assert client(0, "PUT", f"/v1/kv/before/{i}", {"value": f"v{i}"}).status == 200
            cell.stop(2)
            backup = str(tmp_path / "cell.snap")
            exported = voltlockd("--config", config_of(cell, 2), "--export-snapshot", backup)
            assert exported.returncode == 0, exported.stderr
            cell.start(2)
            # Written after the backup: gone once it is restored.
            for i in range(20):
                assert client(0, "PUT", f"/v1/kv/after/{i}", {"value": "x"}).status == 200
        finally:
            client.close()

        cell.stop("all")
        for r in range(3):
            data_dir = cell.replicas[r]["data_dir"]
            shutil.move(data_dir, data_dir + ".old")
            imported = voltlockd("--config", config_of(cell, r), "--import-snapshot", backup)
            assert imported.returncode == 0, imported.stderr
        # A second import would overwrite state: refused, naming the directory.
        again = voltlockd("--config", config_of(cell, 0), "--import-snapshot", backup)
        assert again.returncode == 1 and cell.replicas[0]["data_dir"] in again.stderr
        cell.start("all")
        cell.wait_for_leader(timeout=30)

        client = Client(cell)
        try:
            restored_op = json.loads(exported.stderr.split("snapshot of op ")[1].split()[0])
            status = client(1, "GET", "/v1/status").body
            assert status["log_base"] >= restored_op
            keys = keys_under(client, 1, "before/")
            # Everything up to the backup's op is there; nothing written after it.
            assert {f"before/{i}" for i in range(restored_op - 1)} <= keys
            assert client(1, "GET", "/v1/kv/after/0").status == 404
            assert client(1, "PUT", "/v1/kv/restored", {"value": "y"}).status == 200
        finally:
            client.close()


def test_an_export_is_its_owners_only_whatever_the_umask(tmp_path):
    """The backup holds every key and session: mode 0600 under umask 022, also over a 0644 file
    and beside a failed run's 0644 FILE.partial, as lockctl snapshot save writes it (it was
    created as the umask said)."""
    with Cell(replicas=1, snapshot_every_ops=10) as cell:
        write_keys_and_stop(cell, 15)
        fresh, over = tmp_path / "fresh.snap", tmp_path / "over.snap"
        leftover = tmp_path / "over.snap.partial"
        for file in (over, leftover):
            file.touch(mode=0o644)
            os.chmod(file, 0o644)
        for backup in (fresh, over):
            exported = voltlockd("--config", config_of(cell, 0), "--export-snapshot", str(backup),
                                 umask=0o022)
            assert exported.returncode == 0, exported.stderr
            assert oct(os.stat(backup).st_mode & 0o777) == oct(0o600), backup
        assert sorted(os.listdir(tmp_path)) == ["fresh.snap", "over.snap"]  # no .partial


def test_an_import_refuses_a_damaged_snapshot(tmp_path):
    with Cell(replicas=1, snapshot_every_ops=10) as cell:
        write_keys_and_stop(cell, 30)
        backup = tmp_path / "cell.snap"
        exported = voltlockd("--config", config_of(cell, 0), "--export-snapshot", str(backup))
        assert exported.returncode == 0, exported.stderr
        damaged = bytearray(backup.read_bytes())
        damaged[len(damaged) // 2] ^= 0x40
        backup.write_bytes(bytes(damaged))
        shutil.move(cell.replicas[0]["data_dir"], cell.replicas[0]["data_dir"] + ".old")
        imported = voltlockd("--config", config_of(cell, 0), "--import-snapshot", str(backup))
        assert imported.returncode == 1
        assert "is not a Voltlock snapshot, or it is damaged" in imported.stderr
