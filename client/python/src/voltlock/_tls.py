"""TLS for both clients: the one ``ssl.SSLContext`` a client uses for its https:// endpoints,
made from ``cacert=``/``cert=``/``key=`` (as etcdctl's ``--cacert/--cert/--key``; else the
``VOLTLOCK_CACERT``/``VOLTLOCK_CERT``/``VOLTLOCK_KEY`` environment variables) or given whole
as ``ssl_context=``. TLS 1.2 or newer; the replica's certificate is checked against the CA and
its address."""
import os
import ssl
from typing import Optional, Sequence

from . import _protocol as p


def client_context(endpoints: Sequence[p.Endpoint], *, ssl_context: Optional[ssl.SSLContext],
                   cacert: Optional[str], cert: Optional[str],
                   key: Optional[str]) -> Optional[ssl.SSLContext]:
    """The context for `endpoints`' https:// ones; None when every endpoint is http://."""
    given = [name for name, value in (("cacert", cacert), ("cert", cert), ("key", key))
             if value is not None]
    uses_tls = any(e.tls for e in endpoints)
    if ssl_context is not None and given:
        raise ValueError(f"pass ssl_context or {'/'.join(given)}, not both")
    if given and not uses_tls:
        raise ValueError(f"{'/'.join(given)} given, but no endpoint is https://")
    if key is not None and cert is None:
        raise ValueError("key without cert: pass the client certificate as cert=")
    if not uses_tls:
        return None
    if ssl_context is not None:
        return ssl_context
    cacert = cacert if cacert is not None else os.environ.get("VOLTLOCK_CACERT") or None
    cert = cert if cert is not None else os.environ.get("VOLTLOCK_CERT") or None
    key = key if key is not None else os.environ.get("VOLTLOCK_KEY") or None
    context = ssl.create_default_context(cafile=cacert)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context
