"""Integration tier (STYLE.md tier 4): real processes in network namespaces.

Every test here needs root (namespaces, veths, nftables, XDP): use the `root` fixture (a module
can say `pytestmark = pytest.mark.usefixtures("root")`), which skips with the reason otherwise.
Tests marked `voltlockd` are skipped while the daemon is not built; they run build/voltlockd,
or $VOLTLOCKD.
"""
import os
import shutil

import pytest

from cell import voltlockd_available, voltlockd_path


@pytest.fixture
def root():
    if os.geteuid() != 0:
        pytest.skip("integration tests build network namespaces and need root "
                    "(try: sudo python3 -m pytest tests/integration)")
    missing = [tool for tool in ("ip", "tc", "nft", "ethtool", "ping") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"missing {', '.join(missing)}; run scripts/install-deps")


@pytest.fixture
def voltlockd(root):
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built yet ({voltlockd_path()} missing; "
                    "cmake --build build, or set VOLTLOCKD)")
    return voltlockd_path()


def pytest_collection_modifyitems(config, items):
    """Tests marked `voltlockd` skip, with the reason, while the daemon is not built."""
    if voltlockd_available():
        return
    skip = pytest.mark.skip(reason=f"voltlockd is not built yet ({voltlockd_path()} missing; "
                                   "cmake --build build, or set VOLTLOCKD)")
    for item in items:
        if "voltlockd" in item.keywords:
            item.add_marker(skip)
