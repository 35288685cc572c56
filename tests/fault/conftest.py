"""The fault tier's fixtures: the integration tier's `root` and `voltlockd` (skip, saying why,
without root or without the daemon), and its cell helpers on the import path."""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(os.path.dirname(HERE), "integration")
sys.path.insert(0, HERE)
sys.path.insert(0, INTEGRATION)

_spec = importlib.util.spec_from_file_location("integration_conftest",
                                               os.path.join(INTEGRATION, "conftest.py"))
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)

root = _integration.root
voltlockd = _integration.voltlockd
