#!/usr/bin/env python3
"""Independent implementation of the tower-mrtr envelope v2 (docs/envelope.md), for test vectors.

Written from the specification in docs/envelope.md, not from the Rust code: libsodium's
XChaCha20-Poly1305 (PyNaCl) for the cipher, and a canonical-JSON writer of its own (RFC 8785 with
the document's rule for integers above 2^53) for the argument digest. `python3
scripts/envelope_vectors.py` prints the vectors that the Rust tests
(`crates/tower-mrtr/src/envelope/tests.rs`; the gateway's session-id vector in
`crates/mrtr-gateway/src/legacy/session.rs`) and the document must contain; `--check FILE` (CI)
fails unless every one of them appears in FILE.
"""
import base64
import decimal
import hashlib
import json
import struct

from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt

KEY = bytes(range(0x00, 0x20))
KID = b"k1"
NONCE = bytes(range(0x40, 0x58))
EXPIRES_MS = 1_800_000_000_000
LABELS = {
    "request-state": b"tower-mrtr/v2/request-state",
    "task-handle": b"tower-mrtr/v2/task-handle",
    # A custom label (docs/envelope.md, "Custom labels"): mrtr-gateway's sealed Mcp-Session-Id.
    "legacy-session": b"tower-mrtr/v2/legacy-session",
}
EXACT_LIMIT = 2**53


def es_number(value):
    """ECMAScript Number::toString of a finite double (what RFC 8785 writes)."""
    if value == 0:
        return "0"
    if value < 0:
        return "-" + es_number(-value)
    # Python's repr is the shortest decimal that round-trips, as ECMAScript requires.
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    s = "".join(map(str, digits))
    k = len(s)
    n = exponent + k  # value = 0.s * 10^n
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    mantissa = s if k == 1 else s[0] + "." + s[1:]
    return mantissa + "e" + ("+" if e > 0 else "-") + str(abs(e))


def canonical_number(literal):
    text = literal.decode()
    if not any(c in text for c in ".eE"):
        if abs(int(text)) > EXACT_LIMIT:
            return text  # integers above 2^53 keep their digits
    value = float(text)
    if EXACT_LIMIT < abs(value) < 1e21:
        return str(int(value))  # the double's exact integer
    return es_number(value)


def canonical_string(value):
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
        elif code < 0x20:
            out.append("\\u%04x" % code)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class Number:
    def __init__(self, literal):
        self.literal = literal


def canonical(value):
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(canonical_string(k) + ":" + canonical(v) for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, Number):
        return canonical_number(value.literal)
    if isinstance(value, str):
        return canonical_string(value)
    return {True: "true", False: "false", None: "null"}[value]


def parse(text):
    """JSON with number literals kept as written, refusing duplicate member names."""

    def pairs(items):
        names = [k for k, _ in items]
        if len(names) != len(set(names)):
            raise ValueError("duplicate member name")
        return dict(items)

    keep = lambda literal: Number(literal.encode())  # noqa: E731
    return json.loads(text, object_pairs_hook=pairs, parse_int=keep, parse_float=keep)


def arguments_digest(arguments):
    """SHA-256 of the canonical form; absent, null and {} are the same."""
    value = {} if arguments is None else parse(arguments)
    if value is None:
        value = {}
    return hashlib.sha256(canonical(value).encode()).digest()


def field(value):
    if value is None:
        return b"\x00"
    data = value.encode() if isinstance(value, str) else value
    return b"\x01" + struct.pack(">I", len(data)) + data


def seal(purpose, method, target, principal, arguments, route, state):
    header = bytes([2, len(KID)]) + KID + NONCE
    digest = None if arguments is False else arguments_digest(arguments)
    aad = LABELS[purpose] + b"\x00" + header
    aad += field(method) + field(target) + field(principal) + field(digest)
    route_b = route.encode()
    plaintext = struct.pack(">Q", EXPIRES_MS) + struct.pack(">H", len(route_b)) + route_b
    plaintext += b"\x00" if state is None else b"\x01" + state.encode()
    sealed = crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, NONCE, KEY)
    return "mrtr2." + base64.urlsafe_b64encode(header + sealed).decode().rstrip("=")


# (purpose, method, target, principal, arguments (False: not bound, None: absent), route, state)
VECTORS = [
    ("request-state", "tools/call", "delete_branch", None,
     '{"repo":"acme/api","branch":"old"}', "backend-a", "opaque-state"),
    ("request-state", "resources/read", "file:///tmp/a.txt", "alice", False, "b", None),
    ("request-state", "prompts/get", "greet", None, None, "b", ""),
    ("task-handle", "tasks", None, None, False, "backend-a", "task-7f3a"),
    ("request-state", "tools/call", "transfer", "bob",
     '{"to":"acct\\u00e9\\n","amounts":[1.50,2e1,9007199254740993,-0.0,1e-7],"b":{"z":true,"a":null}}',
     "pay", "s"),
    # mrtr-gateway's session id (crates/mrtr-gateway/src/legacy/session.rs checks this one).
    ("legacy-session", "mrtr-gateway/legacy-session", None, "alice", False, "@legacy-session",
     '{"v":"2025-11-25","i":{"name":"claude-desktop","version":"1.0"},"c":{"elicitation":{}}}'),
]

# The canonical forms the digests above are taken of, for the document.
CANONICAL_EXAMPLES = [
    '{"repo":"acme/api","branch":"old"}',
    '{"to":"acct\\u00e9\\n","amounts":[1.50,2e1,9007199254740993,-0.0,1e-7],"b":{"z":true,"a":null}}',
]

if __name__ == "__main__":
    import sys

    wires = [seal(*v) for v in VECTORS]
    canon = [canonical(parse(a)) for a in CANONICAL_EXAMPLES]
    digests = [arguments_digest(a).hex() for a in CANONICAL_EXAMPLES] + [arguments_digest(None).hex()]
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        # CI: every vector computed here must appear in the document.
        with open(sys.argv[2], encoding="utf-8") as f:
            doc = f.read()
        expected = wires + canon + digests
        missing = [w for w in expected if w not in doc]
        for w in missing:
            print("missing from", sys.argv[2], ":", w, file=sys.stderr)
        print(f"{len(expected) - len(missing)} of {len(expected)} vectors found in {sys.argv[2]}")
        sys.exit(1 if missing else 0)
    for v, w in zip(VECTORS, wires):
        print(v, w, sep="\n  ")
    for a, c, d in zip(CANONICAL_EXAMPLES, canon, digests):
        print(a, c, d, sep="\n  ")
    print("absent/{}:", digests[-1])
