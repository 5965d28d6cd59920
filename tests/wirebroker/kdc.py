"""A real MIT Kerberos KDC for the GSSAPI tests: a realm of its own in a temporary folder
(`kdb5_util create`), `krb5kdc` serving it on a free port of 127.0.0.1, and keytabs made with
`kadmin.local` (`addprinc -randkey`, `ktadd`).

`krb5.conf` is this realm's client configuration: the broker process and the C clients read it
through `KRB5_CONFIG` (set by `Kdc.environment`), the Java client through
`-Djava.security.krb5.conf`. Everything speaks TCP to the KDC (Java's and MIT's clients alike).
`serving_kdc` runs one for a block with this process's environment pointing at it (brokers
started meanwhile inherit it); `requires_kdc` skips, saying why, where MIT's KDC is absent.
`krb5_jaas` and `kcat_gssapi` are the clients' and brokers' logins from a keytab.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REALM = "WIREBROKER.TEST"
SBIN = ("/usr/sbin", "/usr/local/sbin")


def kdc_binary(name: str) -> str | None:
    """Where MIT's `name` (krb5kdc, kdb5_util, kadmin.local) is, if installed."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


def missing_binaries() -> list[str]:
    return [n for n in ("krb5kdc", "kdb5_util", "kadmin.local") if kdc_binary(n) is None]


requires_kdc = pytest.mark.skipif(
    bool(missing_binaries()),
    reason=f"MIT Kerberos KDC binaries absent ({', '.join(missing_binaries())}): "
    "`make setup` installs them (as root)",
)
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def krb5_jaas(keytab: Path, principal: str) -> str:
    """The JAAS entry logging in as `principal` (with its realm) with the keys of `keytab`."""
    return (
        f'{KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true keyTab="{keytab}" '
        f'principal="{principal}";'
    )


def kcat_gssapi(
    bootstrap: str, principal: str, keytab: Path, protocol: str = "SASL_PLAINTEXT"
) -> list[str]:
    """kcat's command line up to its mode, logged in as `principal` (librdkafka kinits with
    the keytab into the KRB5CCNAME cache) over `protocol` (for SASL_SSL, add the CA:
    `ssl.ca.location`)."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: run `make tools`")
    return [
        kcat,
        *("-b", bootstrap, "-X", f"security.protocol={protocol}"),
        *("-X", "sasl.mechanisms=GSSAPI", "-X", "sasl.kerberos.service.name=kafka"),
        *("-X", f"sasl.kerberos.keytab={keytab}", "-X", f"sasl.kerberos.principal={principal}"),
    ]


@contextmanager
def serving_kdc(directory: Path, **environment: str) -> Iterator[Kdc]:
    """A KDC in `directory` for the block, with this process's environment (and that of the
    processes it starts) pointing at it, plus `environment`."""
    kdc = Kdc(directory)
    kdc.start()
    try:
        with pytest.MonkeyPatch.context() as env:
            for name, value in {**kdc.environment, **environment}.items():
                env.setenv(name, value)
            yield kdc
    finally:
        kdc.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Kdc:
    """One realm's KDC process and its files in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.krb5_conf = directory / "krb5.conf"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def environment(self) -> dict[str, str]:
        """What a process of this realm needs: its configuration, a replay cache and a default
        credential cache of its own (not the machine's)."""
        return {
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.directory / "kdc.conf"),
            "KRB5RCACHEDIR": str(self.directory),
            "KRB5CCNAME": f"FILE:{self.directory / 'ccache'}",
        }

    def _run(self, *argv: str) -> str:
        env = {**os.environ, **self.environment}
        done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode(errors="replace")

    def start(self) -> None:
        d = self.directory
        self.krb5_conf.write_text(
            f"""[libdefaults]
  default_realm = {REALM}
  dns_lookup_realm = false
  dns_lookup_kdc = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  ticket_lifetime = 1h
[realms]
  {REALM} = {{
    kdc = 127.0.0.1:{self.port}
  }}
[domain_realm]
  localhost = {REALM}
"""
        )
        (d / "kdc.conf").write_text(
            f"""[kdcdefaults]
  kdc_ports = {self.port}
  kdc_tcp_ports = {self.port}
[realms]
  {REALM} = {{
    database_name = {d / "principal"}
    key_stash_file = {d / "stash"}
    acl_file = {d / "kadm5.acl"}
    max_life = 1h
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
  }}
[logging]
  kdc = FILE:{d / "kdc.log"}
"""
        )
        (d / "kadm5.acl").write_text("")
        self._run(str(kdc_binary("kdb5_util")), "create", "-s", "-r", REALM, "-P", "master-pw")
        env = {**os.environ, **self.environment}
        krb5kdc = str(kdc_binary("krb5kdc"))
        self.proc = subprocess.Popen([krb5kdc, "-n", "-r", REALM], env=env)
        deadline = time.monotonic() + 20
        while True:  # krb5kdc says nothing when it serves: wait for its TCP port
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"krb5kdc did not serve: {self.log()}") from None
                time.sleep(0.05)

    def keytab(self, *principals: str) -> Path:
        """A new keytab holding new random keys of `principals` (created if new)."""
        path = self.directory / f"{principals[0].replace('/', '_')}-{time.monotonic_ns()}.keytab"
        for principal in principals:
            self.add_principal(principal)
            self._run(str(kdc_binary("kadmin.local")), "-q", f"ktadd -k {path} {principal}")
        return path

    def add_principal(self, principal: str) -> None:
        listed = self._run(str(kdc_binary("kadmin.local")), "-q", "listprincs")
        if f"{principal}@{REALM}" not in listed.split():
            self._run(str(kdc_binary("kadmin.local")), "-q", f"addprinc -randkey {principal}")

    def delete_principal(self, principal: str) -> None:
        self._run(str(kdc_binary("kadmin.local")), "-q", f"delprinc -force {principal}")

    def log(self) -> str:
        path = self.directory / "kdc.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
