"""Test certificates, made inside the test with the `openssl` command (none is committed): CAs,
certificates signed by them, and certificates whose validity ended in the past."""
from __future__ import annotations

import os
import subprocess


def openssl(*args: str, cwd: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {done.stderr.strip()}")


def make_ca(directory: str, name: str) -> tuple[str, str]:
    """A new CA: (certificate, key) paths."""
    cert, key = os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}-key.pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", cert, "-subj", f"/CN={name}", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return cert, key


def issue(directory: str, ca: tuple[str, str], name: str, ip: str | None = None,
          expired: bool = False) -> tuple[str, str]:
    """A certificate of `ca` for TLS clients and servers (at `ip`, when given): (certificate,
    key) paths. expired: valid only for a day in 2020."""
    cert, key = os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}-key.pem")
    csr = os.path.join(directory, f"{name}.csr")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", f"/CN={name}", cwd=directory)
    extensions = os.path.join(directory, f"{name}.ext")
    with open(extensions, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
        if ip:
            f.write(f"subjectAltName=IP:{ip}\n")
    if not expired:
        openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial",
                str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-sha256",
                "-extfile", extensions, "-out", cert, cwd=directory)
        return cert, key
    # `openssl x509` takes no start date; `openssl ca` does, with a small database of its own.
    database = os.path.join(directory, f"{name}-ca-db")
    os.makedirs(database, exist_ok=True)
    open(os.path.join(database, "index.txt"), "w").close()
    with open(os.path.join(database, "serial"), "w") as f:
        f.write(os.urandom(8).hex() + "\n")
    config = os.path.join(database, "ca.cnf")
    with open(config, "w") as f:
        f.write(f"[ca]\ndefault_ca = here\n[here]\ndatabase = {database}/index.txt\n"
                f"new_certs_dir = {database}\nserial = {database}/serial\n"
                "default_md = sha256\npolicy = anything\n[anything]\ncommonName = supplied\n")
    openssl("ca", "-batch", "-config", config, "-cert", ca[0], "-keyfile", ca[1], "-in", csr,
            "-out", cert, "-notext", "-startdate", "20200101000000Z", "-enddate",
            "20200102000000Z", "-extfile", extensions, cwd=directory)
    return cert, key
