"""Transport security: ZeroMQ CURVE on tcp, so tokens and tensor bytes never cross a network in clear.

NOTE [curve]: gpud's tcp listeners are CURVE servers unless started ``--insecure``: the daemon loads its key
pair from the key directory, creating it on first start (the secret file mode 0600, the directory 0700).
A client needs the server's public key: ``WOOLY_SERVER_KEY`` (the Z85 text, or a path to a key file), else
the key directory's own ``server.key`` when the client runs as the same user on gpud's host. A client
connection uses the key pair ``WOOLY_CLIENT_KEY`` names, else a fresh one. A tenant whose config lists client
public keys (``keys = [...]``) takes connections made with one of them and no others, and no token is needed;
other tenants prove who they are with their token, which travels encrypted (NOTE [client keys] in gpud/zap.py). ipc endpoints are local files guarded by their
mode (0700 directory) and need no keys; ``WOOLY_INSECURE=1`` lets a client speak in clear to a gpud
started ``--insecure``. ``wooly keys`` prints the public key (and creates the pair if there is none).
"""

from __future__ import annotations

import os
from typing import Any

from proto import settings

SERVER_KEY = "server.key"  # "public <z85>\nsecret <z85>\n"; a copy holding only the public line may be handed out


def key_dir() -> str:
    return settings.load(settings.KeySettings).keys_folder()


def is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


def _read(path: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            name, _, value = line.strip().partition(b" ")
            if name in (b"public", b"secret") and len(value) == 40:
                keys[name.decode()] = value
    return keys


def server_keys(create: bool = True) -> tuple[bytes, bytes]:
    """gpud's (public, secret) key pair from the key directory, made there on first use."""
    import zmq

    folder = key_dir()
    path = os.path.join(folder, SERVER_KEY)
    if not os.path.exists(path):
        if not create:
            raise FileNotFoundError(path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        public, secret = zmq.curve_keypair()
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b"public " + public + b"\nsecret " + secret + b"\n")
        try:
            os.link(tmp, path)  # first writer wins when several daemons start at once
        except FileExistsError:
            pass
        os.unlink(tmp)
    keys = _read(path)
    if "public" not in keys or "secret" not in keys:
        raise ValueError(f"{path}: not a wooly key file (expected 'public <z85>' and 'secret <z85>' lines)")
    return keys["public"], keys["secret"]


def client_keys() -> tuple[bytes, bytes]:
    """This client's (public, secret) pair: the key file ``WOOLY_CLIENT_KEY`` names (``wooly keys --client NAME``
    makes one; a tenant whose config lists its public key takes this client's sessions without a token), else
    a fresh pair for this connection."""
    import zmq

    path = settings.quiet_client().client_key.strip()
    if not path:
        return zmq.curve_keypair()
    try:
        keys = _read(path)
    except OSError as exc:
        raise ValueError(f"WOOLY_CLIENT_KEY: cannot read {path!r} ({exc.strerror})") from None
    if "public" not in keys or "secret" not in keys:
        raise ValueError(
            f"WOOLY_CLIENT_KEY: {path!r} is not a wooly key file with 'public' and 'secret' lines "
            "(`wooly keys --client NAME` makes one)"
        )
    return keys["public"], keys["secret"]


def make_client_keys(name: str) -> tuple[str, bytes]:
    """A new client key pair in the key directory's ``clients/NAME.key`` (0600): (its path, its public key)."""
    import zmq

    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ValueError(f"client key name {name!r}: use letters, digits, '-', '_' and '.'")
    folder = os.path.join(key_dir(), "clients")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{name}.key")
    public, secret = zmq.curve_keypair()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never overwrites a key in use
    with os.fdopen(fd, "wb") as f:
        f.write(b"public " + public + b"\nsecret " + secret + b"\n")
    return path, public


def server_public_key() -> bytes | None:
    """The public key a client should expect: WOOLY_SERVER_KEY (Z85 text or a key file), else this user's own."""
    given = settings.quiet_client().server_key.strip()
    if given:
        if len(given) == 40 and not os.path.exists(given):
            return given.encode()
        keys = _read(given)
        if "public" not in keys:
            raise ValueError(f"WOOLY_SERVER_KEY: {given!r} is neither a 40-character Z85 key nor a wooly key file")
        return keys["public"]
    path = os.path.join(key_dir(), SERVER_KEY)
    if os.path.exists(path):
        return _read(path).get("public")
    return None


def secure_server(sock: Any) -> None:
    """Make the next ``bind`` of ``sock`` a CURVE server (call ``plain`` before binding ipc/inproc endpoints)."""
    import zmq

    public, secret = server_keys()
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)


def plain(sock: Any) -> None:
    import zmq

    sock.setsockopt(zmq.CURVE_SERVER, 0)


def secure_client(sock: Any, endpoint: str, server_key: str = "") -> None:
    """Before ``connect``: a CURVE client for a tcp endpoint (a no-op for ipc), or ValueError saying what is missing.
    ``server_key`` (Z85) overrides WOOLY_SERVER_KEY: a pool placement hands out the node's own key."""
    if not is_tcp(endpoint) or settings.quiet_client().insecure:
        return
    import zmq

    server = server_key.encode() if len(server_key) == 40 else server_public_key()
    if server is None:
        raise ValueError(
            f"gpud at {endpoint} speaks CURVE: set WOOLY_SERVER_KEY to its public key (`wooly keys` on "
            "gpud's host prints it), or WOOLY_INSECURE=1 for a gpud started --insecure"
        )
    public, secret = client_keys()
    sock.setsockopt(zmq.CURVE_SERVERKEY, server)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
