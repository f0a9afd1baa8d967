"""Types of the C extension tls_pump.c (see its header comment)."""

class UnknownLayout(RuntimeError):
    """The SSL object cannot be driven from C here (unknown CPython layout, another libssl)."""

class Pump:
    """The byte path of one established TLS connection, run with the GIL released."""

    records_read_calls: int
    plaintext_in_bytes: int
    plaintext_out_bytes: int

    def __init__(self, ssl_socket: object, raw_fd: int, pair_fd: int, linger_s: float) -> None: ...
    def run(self) -> str: ...
    def abort(self) -> None: ...

def openssl_shared_with(ssl_module_path: str, /) -> bool: ...
