#!/usr/bin/env python3
"""Independent implementation of the tower-mrtr envelopes v4, v3 and v2 (docs/envelope.md), for
test vectors.

Written from the specification in docs/envelope.md, not from the Rust code: libsodium's
XChaCha20-Poly1305 (PyNaCl) for the cipher, and a canonical-JSON writer of its own for the argument
digest: v4 and v3 write every number by its exact decimal value, read with Python's `decimal`
module (the construction of a Decimal from a string never rounds); v2 (RFC 8785 with the
document's rule for integers above 2^53) reads numbers as doubles. v4 is sealed today; v3 and v2
are the formats a relay still opens. `python3 scripts/envelope_vectors.py` prints
the vectors that the Rust tests (`crates/tower-mrtr/src/envelope/tests.rs`; the gateway's
session-id vectors in `crates/mrtr-gateway/src/legacy/session.rs`) and the document must contain;
`--check FILE` (CI) first checks the exact-decimal rule on its own (equal Decimal values, and only
they, share a canonical form), then fails unless every vector appears in FILE.
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


# v3: the largest magnitude of a canonical number's exponent (docs/envelope.md).
MAX_EXPONENT = 10**18 - 1


def exact_number(literal):
    """v3: the number's exact decimal value as sign, significant digits and exponent."""
    value = decimal.Decimal(literal.decode())  # from a string: exact, never rounded
    if value.is_zero():
        return "0"  # 0, -0, 0.000, 0e7: one value
    sign, digits, exponent = value.as_tuple()  # a Decimal's coefficient has no leading zeros
    digits = list(digits)
    while digits[-1] == 0:
        digits.pop()
        exponent += 1
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError("exponent out of range")
    text = ("-" if sign else "") + "".join(map(str, digits))
    return text if exponent == 0 else text + "e" + str(exponent)


def doubles_number(literal):
    """v2: RFC 8785's double, except integer literals above 2^53 and integral doubles below 1e21."""
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


def canonical(value, number=exact_number):
    """The canonical form: v3 with `exact_number` (the default), v2 with `doubles_number`."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(canonical_string(k) + ":" + canonical(v, number) for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v, number) for v in value) + "]"
    if isinstance(value, Number):
        return number(value.literal)
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


def arguments_digest(arguments, number=exact_number):
    """SHA-256 of the canonical form; absent, null and {} are the same."""
    value = {} if arguments is None else parse(arguments)
    if value is None:
        value = {}
    return hashlib.sha256(canonical(value, number).encode()).digest()


def field(value):
    if value is None:
        return b"\x00"
    data = value.encode() if isinstance(value, str) else value
    return b"\x01" + struct.pack(">I", len(data)) + data


def encrypt(header, plaintext, aad):
    sealed = crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, NONCE, KEY)
    prefix = {2: "mrtr2.", 3: "mrtr3.", 4: "mrtr4."}[header[0]]
    return prefix + base64.urlsafe_b64encode(header + sealed).decode().rstrip("=")


def state_bytes(state):
    return b"\x00" if state is None else b"\x01" + state.encode()


def seal_v2(purpose, method, target, principal, arguments, route, state):
    """A v2 envelope (what v3 relays still open)."""
    header = bytes([2, len(KID)]) + KID + NONCE
    digest = None if arguments is False else arguments_digest(arguments, doubles_number)
    aad = LABELS[purpose] + b"\x00" + header
    aad += field(method) + field(target) + field(principal) + field(digest)
    route_b = route.encode()
    plaintext = struct.pack(">Q", EXPIRES_MS) + struct.pack(">H", len(route_b)) + route_b
    plaintext += state_bytes(state)
    return encrypt(header, plaintext, aad)


def aad_v3(purpose, header, method, target, principal, audience, arguments):
    """The associated data of v3, and of v4 (the same fields; the header holds the version)."""
    digest = None if arguments is False else arguments_digest(arguments, exact_number)
    aad = LABELS[purpose] + b"\x00" + header
    return aad + field(audience) + field(method) + field(target) + field(principal) + field(digest)


def route_bytes(round_, route, identity):
    """expires_at || round || route_len || route || identity_flag || identity (v3 and v4)."""
    route_b = route.encode()
    plaintext = struct.pack(">Q", EXPIRES_MS) + struct.pack(">H", round_)
    plaintext += struct.pack(">H", len(route_b)) + route_b
    return plaintext + (b"\x00" if identity is None else b"\x01" + identity)


def seal_v3(purpose, method, target, principal, audience, arguments, route, identity, round_, state):
    """A v3 envelope (what v4 relays still open): audience in the associated data; round and route
    identity in the plaintext."""
    header = bytes([3, len(KID)]) + KID + NONCE
    aad = aad_v3(purpose, header, method, target, principal, audience, arguments)
    plaintext = route_bytes(round_, route, identity) + state_bytes(state)
    return encrypt(header, plaintext, aad)


def seal_v4(purpose, method, target, principal, audience, arguments, route, identity, round_, state,
            call=None):
    """A v4 envelope: v3's, with the call target (a task handle's tool) after the route identity."""
    header = bytes([4, len(KID)]) + KID + NONCE
    aad = aad_v3(purpose, header, method, target, principal, audience, arguments)
    plaintext = route_bytes(round_, route, identity)
    if call is None:
        plaintext += b"\x00"
    else:
        call_b = call.encode()
        plaintext += b"\x01" + struct.pack(">H", len(call_b)) + call_b
    plaintext += state_bytes(state)
    return encrypt(header, plaintext, aad)


# v2, as the document has listed them since v2: v4 relays still open these.
# (purpose, method, target, principal, arguments (False: not bound, None: absent), route, state)
VECTORS_V2 = [
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

# The route identity of the v3 vectors: SHA-256 of the backend's URL, as a proxy may choose it.
IDENTITY = hashlib.sha256(b"https://alpha.internal/mcp").digest()
EXACT_ARGUMENTS = '{"id":9007199254740993.0,"amounts":[100,1.00E+2,100.000000000000001,1.0000000000000001e22,-0.0]}'

# v3, as the document has listed them since v3: v4 relays still open these (with no call target).
# (purpose, method, target, principal, audience, arguments, route, identity, round, state)
VECTORS_V3 = [
    ("request-state", "tools/call", "delete_branch", None, None,
     '{"repo":"acme/api","branch":"old"}', "backend-a", None, 1, "opaque-state"),
    ("request-state", "resources/read", "file:///tmp/a.txt", "alice", None, False, "b", None, 1, None),
    ("request-state", "prompts/get", "greet", None, None, None, "b", None, 1, ""),
    ("task-handle", "tasks", None, None, None, False, "backend-a", None, 0, "task-7f3a"),
    ("request-state", "tools/call", "transfer", "bob", None, EXACT_ARGUMENTS, "pay", None, 1, "s"),
    # An audience.
    ("request-state", "tools/call", "delete_branch", None, "prod",
     '{"repo":"acme/api","branch":"old"}', "backend-a", None, 1, "opaque-state"),
    # A route identity.
    ("request-state", "tools/call", "delete_branch", None, None,
     '{"repo":"acme/api","branch":"old"}', "alpha", IDENTITY, 1, "opaque-state"),
    # A later round.
    ("request-state", "tools/call", "delete_branch", None, None,
     '{"repo":"acme/api","branch":"old"}', "backend-a", None, 3, "opaque-state"),
    # All three, and a principal.
    ("task-handle", "tasks", None, "alice", "staging", False, "alpha", IDENTITY, 0, "task-7f3a"),
    # mrtr-gateway's session id as v3 sealed it: no audience yet, round 0.
    ("legacy-session", "mrtr-gateway/legacy-session", None, "alice", None, False, "@legacy-session",
     None, 0, '{"v":"2025-11-25","i":{"name":"claude-desktop","version":"1.0"},"c":{"elicitation":{}}}'),
]

# v4: the inputs of the v3 vectors 1 to 10 with no call target (so that they differ from v3's only
# where the format does; vector 10 is mrtr-gateway's session id as it seals it today), then task
# handles with the tool whose call created them.
# (purpose, method, target, principal, audience, arguments, route, identity, round, state, call)
VECTORS_V4 = [v + (None,) for v in VECTORS_V3] + [
    # A task handle with its tool.
    ("task-handle", "tasks", None, None, None, False, "backend-a", None, 0, "task-7f3a",
     "delete_branch"),
    # A tool whose name is not ASCII (its length is in bytes: 6 for two characters), with an
    # audience, a principal and a route identity.
    ("task-handle", "tasks", None, "alice", "staging", False, "alpha", IDENTITY, 0, "task-7f3a",
     "\u9001\u91d1"),
]

# The canonical forms of the document's examples: (arguments, v3 form checked too, v2 form too).
CANONICAL_EXAMPLES = [
    '{"repo":"acme/api","branch":"old"}',
    '{"to":"acct\\u00e9\\n","amounts":[1.50,2e1,9007199254740993,-0.0,1e-7],"b":{"z":true,"a":null}}',
    EXACT_ARGUMENTS,
    '{"id":9007199254740992}',
]

# Literals whose exact values the v3 rule must tell apart or join, checked against Decimal's
# own comparison (`--check` runs this before it reads the document).
LITERALS = [
    "0", "-0", "0.0", "-0.0e5", "0E-3", "1", "1.0", "10e-1", "0.1e1", "100", "100.0", "1e2",
    "1.00E+2", "1E+2", "10e1", "100.000000000000001", "1e22", "1.0000000000000001e22",
    "10000000000000000000000", "9007199254740992", "9007199254740993", "9007199254740993.0",
    "9007199254740992.0", "-9007199254740993", "1.5", "15e-1", "0.15e1", "1.50", "-1.5",
    "123456789012345678901234567890", "1.23456789012345678901234567890e29", "1e-7", "0.0000001",
    "1e400", "10e399", "1e-400", "5e-324", "2.5e-324", "1e999999999999999999",
    "1e-999999999999999999",
]


def check_exact_rule():
    """Equal Decimal values, and only they, share a v3 canonical form; the form means the value."""
    values = {lit: decimal.Decimal(lit) for lit in LITERALS}
    forms = {lit: exact_number(lit.encode()) for lit in LITERALS}
    failures = []
    for a in LITERALS:
        if decimal.Decimal(forms[a]) != values[a]:
            failures.append(f"{a} -> {forms[a]} changes the value")
        if exact_number(forms[a].encode()) != forms[a]:
            failures.append(f"{forms[a]} is not a fixpoint")
        for b in LITERALS:
            if (forms[a] == forms[b]) != (values[a] == values[b]):
                failures.append(f"{a} ({forms[a]}) vs {b} ({forms[b]})")
    for lit in ["1e1000000000000000000", "1e-1000000000000000000"]:
        try:
            exact_number(lit.encode())
            failures.append(f"{lit} accepted beyond the exponent bound")
        except (ValueError, decimal.InvalidOperation):
            pass
    return failures


if __name__ == "__main__":
    import sys

    wires_v4 = [seal_v4(*v) for v in VECTORS_V4]
    wires_v3 = [seal_v3(*v) for v in VECTORS_V3]
    wires_v2 = [seal_v2(*v) for v in VECTORS_V2]
    wires = wires_v4 + wires_v3 + wires_v2
    canon = [canonical(parse(a)) for a in CANONICAL_EXAMPLES]
    canon_v2 = [canonical(parse(a), doubles_number) for a in CANONICAL_EXAMPLES[:2]]
    digests = [arguments_digest(a).hex() for a in CANONICAL_EXAMPLES] + [arguments_digest(None).hex()]
    digests_v2 = [arguments_digest(a, doubles_number).hex() for a in CANONICAL_EXAMPLES[:2]]
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        failures = check_exact_rule()
        for failure in failures:
            print("exact-decimal rule broken:", failure, file=sys.stderr)
        print(f"exact-decimal rule: {len(LITERALS)} literals, {len(LITERALS) ** 2} pairs, "
              f"{len(failures)} failures")
        # CI: every vector computed here must appear in the document.
        with open(sys.argv[2], encoding="utf-8") as f:
            doc = f.read()
        expected = wires + canon + canon_v2 + digests + digests_v2
        missing = [w for w in expected if w not in doc]
        for w in missing:
            print("missing from", sys.argv[2], ":", w, file=sys.stderr)
        print(f"{len(expected) - len(missing)} of {len(expected)} vectors found in {sys.argv[2]}")
        sys.exit(1 if missing or failures else 0)
    for name, vectors, sealed in [("v4", VECTORS_V4, wires_v4), ("v3", VECTORS_V3, wires_v3),
                                  ("v2", VECTORS_V2, wires_v2)]:
        print(name, "envelopes:")
        for i, (v, w) in enumerate(zip(vectors, sealed), 1):
            print(i, v, w, sep="\n  ")
    print("canonical forms (v3), digests:")
    for a, c, d in zip(CANONICAL_EXAMPLES, canon, digests):
        print(a, c, d, sep="\n  ")
    print("canonical forms (v2), digests:")
    for a, c, d in zip(CANONICAL_EXAMPLES, canon_v2, digests_v2):
        print(a, c, d, sep="\n  ")
    print("absent/{}:", digests[-1])
    print("route identity:", IDENTITY.hex())
