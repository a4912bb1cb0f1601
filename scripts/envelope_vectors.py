#!/usr/bin/env python3
"""Independent implementation of the tower-mrtr envelope v1 (docs/envelope.md), for test vectors.

Written from the specification in docs/envelope.md, not from the Rust code, with libsodium's
XChaCha20-Poly1305 (PyNaCl). `python3 scripts/envelope_vectors.py` prints the vectors that the
Rust tests (`crates/tower-mrtr/src/envelope/tests.rs`) and the document must contain.
"""
import base64
import struct

from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt

KEY = bytes(range(0x00, 0x20))
KID = b"k1"
NONCE = bytes(range(0x40, 0x58))
EXPIRES_MS = 1_800_000_000_000
LABELS = {
    "request-state": b"tower-mrtr/v1/request-state",
    "task-handle": b"tower-mrtr/v1/task-handle",
}


def field(value):
    if value is None:
        return b"\x00"
    data = value.encode()
    return b"\x01" + struct.pack(">I", len(data)) + data


def seal(purpose, method, target, principal, route, state):
    header = bytes([1, len(KID)]) + KID + NONCE
    aad = LABELS[purpose] + b"\x00" + header + field(method) + field(target) + field(principal)
    route_b = route.encode()
    plaintext = struct.pack(">Q", EXPIRES_MS) + struct.pack(">H", len(route_b)) + route_b
    plaintext += b"\x00" if state is None else b"\x01" + state.encode()
    sealed = crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, NONCE, KEY)
    return "mrtr1." + base64.urlsafe_b64encode(header + sealed).decode().rstrip("=")


VECTORS = [
    ("request-state", "tools/call", "delete_branch", None, "backend-a", "opaque-state"),
    ("request-state", "resources/read", "file:///tmp/a.txt", "alice", "b", None),
    ("request-state", "prompts/get", "greet", None, "b", ""),
    ("task-handle", "tasks", None, None, "backend-a", "task-7f3a"),
]

if __name__ == "__main__":
    import sys

    wires = [seal(*v) for v in VECTORS]
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        # CI: every vector computed here must appear in the document.
        with open(sys.argv[2], encoding="utf-8") as f:
            doc = f.read()
        missing = [w for w in wires if w not in doc]
        for w in missing:
            print("missing from", sys.argv[2], ":", w, file=sys.stderr)
        print(f"{len(wires) - len(missing)} of {len(wires)} vectors found in {sys.argv[2]}")
        sys.exit(1 if missing else 0)
    for v, w in zip(VECTORS, wires):
        print(v, w, sep="\n  ")
