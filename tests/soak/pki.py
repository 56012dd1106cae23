"""The soak's certificates, made with openssl: the CAs, the leaves, and the rotation of a
leaf the way the kubelet updates a mounted Secret (a new directory of files, then one rename
of the `..data` symlink), so the gateway never sees a certificate without its key."""

import calendar
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path


def openssl(*args):
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


class Pki:
    """CAs and leaves in one directory; `<name>.crt` and `<name>.key` for each CA."""

    def __init__(self, dir: Path):
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.dir / name

    def ca(self, name: str):
        openssl("req", "-x509", *EC_KEY, "-days", "30", "-subj", f"/CN=soak {name}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout", str(self.path(f"{name}.key")), "-out", str(self.path(f"{name}.crt")))

    def leaf(self, ca: str, crt: Path, key: Path, cn: str, orgs=(), dns=(), ips=()):
        """A leaf signed by `ca`: a server certificate when it has names, else a client one."""
        subject = f"/CN={cn}" + "".join(f"/O={o}" for o in orgs)
        csr = crt.with_suffix(".csr")
        openssl("req", "-new", *EC_KEY, "-subj", subject, "-keyout", str(key), "-out", str(csr))
        sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature",
               f"extendedKeyUsage={'serverAuth' if sans else 'clientAuth'}"]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        extfile = crt.with_suffix(".ext")
        extfile.write_text("\n".join(ext) + "\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.path(f"{ca}.crt")),
                "-CAkey", str(self.path(f"{ca}.key")), "-set_serial", "0x" + secrets.token_hex(16),
                "-days", "30", "-extfile", str(extfile), "-out", str(crt))
        csr.unlink()
        extfile.unlink()


def not_after(crt: Path) -> int:
    """The certificate's notAfter, in Unix seconds."""
    text = openssl("x509", "-noout", "-enddate", "-in", str(crt)).strip()
    stamp = text.removeprefix("notAfter=").replace(" GMT", "")
    return calendar.timegm(time.strptime(" ".join(stamp.split()), "%b %d %H:%M:%S %Y"))


class Secret:
    """`tls.crt` and `tls.key` in a directory, as the kubelet writes a Secret volume: each
    version in a `..<n>` directory, `..data` a symlink to the current one, the files symlinks
    through it. `rotate` makes a new leaf and swaps `..data` with one rename."""

    def __init__(self, pki: Pki, dir: Path, ca: str, cn: str, **names):
        self.pki, self.dir, self.ca, self.cn, self.names = pki, dir, ca, cn, names
        self.version = 0
        dir.mkdir(parents=True)
        self.rotate()
        for f in ("tls.crt", "tls.key"):
            os.symlink(f"..data/{f}", dir / f)

    @property
    def crt(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def key(self) -> Path:
        return self.dir / "tls.key"

    def rotate(self):
        self.version += 1
        new = self.dir / f"..{self.version:04d}"
        new.mkdir()
        self.pki.leaf(self.ca, new / "tls.crt", new / "tls.key", self.cn, **self.names)
        tmp = self.dir / "..data_tmp"
        os.symlink(new.name, tmp)
        os.replace(tmp, self.dir / "..data")
        # The version before the previous one: no reader can still be in it.
        shutil.rmtree(self.dir / f"..{self.version - 2:04d}", ignore_errors=True)

    def not_after(self) -> int:
        return not_after(self.crt)
