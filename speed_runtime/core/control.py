"""The `control` extension (contract §9; docs/PROTOCOL.md "### control"): operator keys, signed
requests, the target's judgement of a control file, its answers, and who trusts whom. Pure:
bytes, names and times in; values or the runtime's errors out.

An operator holds an Ed25519 key. A node started with `--operator PUBKEY` trusts that key: it
advertises `control` and the key's fingerprint in its entry, watches `ROOT/NAME/control/`, and
acts on an envelope there only when it carries a request signed by a trusted key, for this node's
name and instance, not expired and not seen before. The signed request is a JSON text carried as
a string (`request`), so the verifier checks exactly the bytes it then parses: no canonical JSON.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple

from nacl import bindings as _sodium
from nacl.exceptions import BadSignatureError, CryptoError

from . import payloads
from .entry import RegistryEntry, json_loads
from .envelope import FLAG_CONTROL, OVERHEAD, EnvelopeType, open_envelope
from .errors import ConfigError, EnvelopeError, KeyFileError
from .names import is_valid_name
from .receiving import Identity, Verdict, check_identities, header_type

FEATURE = "control"
KEY_HEADER = "SPEED-OPERATOR-KEY-V1"
SIGNING_DOMAIN = b"SPEED-CONTROL-V1\x00"
FINGERPRINT_DOMAIN = b"SPEED-OPERATOR-FINGERPRINT\x00"
COMMANDS = ("allow", "revoke", "stop", "status", "lift")
MAX_PAYLOAD = 8192                 # plaintext of a control envelope; a larger file is too_large, never read
MAX_FILE = OVERHEAD + MAX_PAYLOAD
MAX_REQUEST_TEXT = 4096            # UTF-8 bytes of the signed request text
DEFAULT_LIFETIME_MS = 60_000       # a requester's expiresAt - issuedAt
MAX_LIFETIME_MS = 300_000          # longer lifetimes are control_malformed
CLOCK_SKEW_MS = 30_000             # issuedAt may lie this far ahead; expiresAt is honoured this much longer
MAX_REMEMBERED = 4096              # request ids kept until they expire; beyond, control_refused
_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_MAX_MS = 2 ** 53

# journal reasons of this extension (also in core/records.py EXTENSION_REASONS["control"])
REASONS = ("control_malformed", "control_unsigned", "control_untrusted", "control_bad_signature",
           "control_wrong_target", "control_wrong_requester", "control_expired", "control_replayed",
           "control_refused")
# the v1 errorCode of the answer to a refused request (its errorMessage is "<reason>: <sentence>")
ERROR_CODES = {"control_malformed": "INVALID_ARGUMENTS", "control_expired": "TIMEOUT",
               "control_refused": "EXECUTION_FAILED"}  # every other reason: ACCESS_DENIED


# ============================================================================ keys
def fingerprint(public_key: bytes) -> str:
    """First 16 hex digits of SHA-256 over a domain tag and the public key: what entries advertise."""
    return hashlib.sha256(FINGERPRINT_DOMAIN + public_key).hexdigest()[:16]


def format_public_key(public_key: bytes) -> str:
    return base64.b64encode(public_key).decode("ascii")


def parse_public_key(text: object) -> bytes:
    """An operator's public key from its text form (standard base64 of 32 bytes)."""
    raw = _b64(text, 32)
    if raw is None:
        shown = str(text)[:60]
        raise ConfigError(f"{shown!r} is not an operator public key (standard base64 of 32 bytes, as "
                          "`speed operator keygen` prints it)")
    return raw


class OperatorKey:
    """An operator's Ed25519 key pair. Its text forms show only the fingerprint; the secret seed
    never leaves this object except through `format_operator_key_text` (the key file)."""

    __slots__ = ("_seed", "_secret", "public_key")

    def __init__(self, seed: bytes):
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise KeyFileError("an operator key is a 32-byte Ed25519 seed")
        self._seed = bytes(seed)
        self.public_key, self._secret = _sodium.crypto_sign_seed_keypair(self._seed)

    @classmethod
    def new(cls) -> "OperatorKey":
        return cls(secrets.token_bytes(32))

    @property
    def public_text(self) -> str:
        return format_public_key(self.public_key)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return _sodium.crypto_sign(message, self._secret)[:64]

    def __repr__(self) -> str:
        return f"OperatorKey(fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __reduce__(self):  # never pickle key material by accident
        raise TypeError("an OperatorKey cannot be pickled")


def format_operator_key_text(key: OperatorKey) -> bytes:
    return f"{KEY_HEADER}\n{base64.b64encode(key._seed).decode('ascii')}\n".encode("ascii")


def parse_operator_key_text(text: bytes) -> OperatorKey:
    """An operator key file's bytes: the line `SPEED-OPERATOR-KEY-V1`, then the base64 seed."""
    try:
        lines = [line.strip("\r") for line in text.decode("ascii").split("\n") if line.strip()]
    except UnicodeDecodeError:
        lines = []
    if len(lines) != 2 or lines[0] != KEY_HEADER:
        raise KeyFileError(f"not an operator key file: it must hold the line {KEY_HEADER!r} and the base64 seed "
                           "(create one with `speed operator keygen`)")
    seed = _b64(lines[1], 32)
    if seed is None:
        raise KeyFileError("the seed line of the operator key file is not standard base64 of 32 bytes")
    return OperatorKey(seed)


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        _sodium.crypto_sign_open(signature + message, public_key)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


# ============================================================================ requests (the operator's side)
def request_text(*, target: str, instance: str, request_id: str, requester: str, command: str,
                 arguments: dict[str, Any], issued_ms: int, expires_ms: int) -> bytes:
    """The signed request as a requester writes it (compact JSON, this key order). Verifiers accept
    any JSON object text: they check the bytes carried, then parse them."""
    return payloads.encode_payload({
        "target": target, "instance": instance, "requestId": request_id, "requester": requester,
        "command": command, "arguments": arguments, "issuedAt": issued_ms, "expiresAt": expires_ms})


def request_payload(key: OperatorKey, requester: str, target: str, request_id: str, text: bytes) -> bytes:
    """The plaintext of a control envelope: the request text, its signature and the operator's key."""
    signature = key.sign(SIGNING_DOMAIN + text)
    return payloads.encode_payload({
        "from": requester, "to": target, "requestId": request_id, "operator": key.public_text,
        "request": text.decode("utf-8"), "signature": base64.b64encode(signature).decode("ascii")})


def arguments_problem(command: str, arguments: Any) -> str | None:
    """Why `arguments` do not fit `command` (None when they do)."""
    if command not in COMMANDS:
        return f"unknown command {str(command)[:40]!r}; the commands are {', '.join(COMMANDS)}"
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    if command in ("allow", "revoke"):
        if set(arguments) != {"peer"} or not is_valid_name(arguments["peer"]):
            return f"{command} takes exactly {{\"peer\": NODE_NAME}}"
    elif command == "lift":
        if set(arguments) != {"sender"} or not is_valid_name(arguments["sender"]):
            return "lift takes exactly {\"sender\": NODE_NAME}"
    elif arguments:
        return f"{command} takes no arguments"
    return None


# ============================================================================ the target's judgement
class ControlRequest(NamedTuple):
    """A request that passed every check."""

    request_id: str
    command: str
    arguments: dict
    operator: str        # the signer's fingerprint
    requester: str
    issued_ms: int
    expires_ms: int


class ControlVerdict(NamedTuple):
    """`reason` None means the request may be applied. `request_id` is set when the requester can
    be answered; `operator` is the fingerprint of the key presented, whenever one was."""

    reason: str | None
    request_id: str | None = None
    operator: str | None = None
    request: ControlRequest | None = None
    detail: str = ""


@dataclass
class RequestGuard:
    """Request ids of applied requests, each kept until its request can no longer pass the expiry
    check; at most `capacity` (a trusted operator flooding requests is refused, not remembered)."""

    capacity: int = MAX_REMEMBERED
    _until: dict[str, int] = field(default_factory=dict)
    _next_prune_ms: int = 0

    def seen(self, request_id: str) -> bool:
        return request_id in self._until

    def room(self, now_ms: int) -> bool:
        if now_ms >= self._next_prune_ms or len(self._until) >= self.capacity:
            self._next_prune_ms = now_ms + 1000
            self._until = {rid: until for rid, until in self._until.items() if until >= now_ms}
        return len(self._until) < self.capacity

    def record(self, request_id: str, until_ms: int) -> None:
        self._until[request_id] = until_ms

    def __len__(self) -> int:
        return len(self._until)


def open_control(sender: str, data: bytes, key: Any, me: Identity, sender_entry: RegistryEntry | None,
                 now_ms: int, window_ms: int) -> Verdict:
    """The envelope checks of a control file (§5.5 steps 3–5 without the sequence and nonce: the
    signed request id is the replay defence). Returns receiving.Verdict (stale_source applies)."""
    etype = header_type(data)
    try:
        opened = open_envelope(data, key, MAX_PAYLOAD)
        header = opened.header
        if header.type != EnvelopeType.SPC_REQUEST or not header.flags & FLAG_CONTROL:
            raise EnvelopeError("control_malformed", "not a control request (an SPC_REQUEST with flag 0x0040)")
        payload = payloads.decode_payload(opened.payload, 0)  # the control layout: only from/to are common
        check_identities(sender, payload, header, me, sender_entry)
        if abs(now_ms - header.timestamp_ms) > window_ms:
            raise EnvelopeError("stale_timestamp",
                                f"timestamp is {(now_ms - header.timestamp_ms) / 1000:.1f} s from this node's clock")
    except EnvelopeError as exc:
        return Verdict(exc.reason, etype, detail=exc.detail)
    return Verdict(None, etype, header, payload, opened.nonce)


def judge_control(payload: dict, me: Identity, trusted: Mapping[str, bytes], guard: RequestGuard,
                  now_ms: int) -> ControlVerdict:
    """The control checks of an opened control envelope's payload, in the documented order. On
    acceptance the guard remembers the request id (and only then). `trusted` maps fingerprints
    to public keys."""
    rid = payload.get("requestId")
    if not isinstance(rid, str) or not _REQUEST_ID.fullmatch(rid):
        return ControlVerdict("control_malformed", None, None, None, "the payload has no valid requestId")
    raw = _request_bytes(payload.get("request"))
    if raw is None:
        return ControlVerdict("control_malformed", rid, None, None,
                              f"the payload has no request text of at most {MAX_REQUEST_TEXT} bytes")
    public_key, signature = _b64(payload.get("operator"), 32), _b64(payload.get("signature"), 64)
    if public_key is None or signature is None:
        return ControlVerdict("control_unsigned", rid, None, None,
                              "the request carries no operator key and signature")
    operator = fingerprint(public_key)
    if trusted.get(operator) != public_key:
        return ControlVerdict("control_untrusted", rid, operator, None,
                              f"operator {operator} is not trusted by {me.name}")
    if not verify(public_key, signature, SIGNING_DOMAIN + raw):
        return ControlVerdict("control_bad_signature", rid, operator, None,
                              f"the signature does not verify under operator {operator}'s key")
    request, problem = _parse_request(raw)
    if request is None:
        return ControlVerdict("control_malformed", rid, operator, None, problem)
    if request["target"] != me.name or _uuid_bytes(request["instance"]) != me.id_bytes:
        return ControlVerdict("control_wrong_target", rid, operator, None,
                              "the request was signed for another node or another instance of it")
    if request["requester"] != payload["from"]:
        return ControlVerdict("control_wrong_requester", rid, operator, None,
                              "the request was signed for another requester")
    if request["requestId"] != rid:
        return ControlVerdict("control_malformed", rid, operator, None, "the signed requestId differs")
    issued, expires = request["issuedAt"], request["expiresAt"]
    if not 0 <= expires - issued <= MAX_LIFETIME_MS:
        return ControlVerdict("control_malformed", rid, operator, None,
                              f"a request may live at most {MAX_LIFETIME_MS // 1000} s")
    if issued > now_ms + CLOCK_SKEW_MS or now_ms > expires + CLOCK_SKEW_MS:
        when = "expired" if now_ms > expires else "was issued in the future"
        return ControlVerdict("control_expired", rid, operator, None,
                              f"the request {when} by this node's clock (check the clocks, then send it again)")
    if guard.seen(rid):
        return ControlVerdict("control_replayed", rid, operator, None, "this request id was already applied")
    if not guard.room(now_ms):
        return ControlVerdict("control_refused", rid, operator, None,
                              f"{guard.capacity} unexpired requests are remembered already; try again later")
    guard.record(rid, expires + CLOCK_SKEW_MS)
    accepted = ControlRequest(rid, request["command"], request["arguments"], operator, request["requester"],
                              issued, expires)
    return ControlVerdict(None, rid, operator, accepted)


def _parse_request(raw: bytes) -> tuple[dict | None, str]:
    try:
        request = json_loads(raw.decode("utf-8"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "the signed request is not UTF-8 JSON"
    if not isinstance(request, dict):
        return None, "the signed request is not a JSON object"
    for name in ("target", "instance", "requestId", "requester", "command"):
        if not isinstance(request.get(name), str) or "\x00" in request[name]:
            return None, f"the signed request lacks a string {name!r}"
    for name in ("issuedAt", "expiresAt"):
        value = request.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_MS:
            return None, f"the signed request lacks an integer {name!r} (Unix milliseconds)"
    if _uuid_bytes(request["instance"]) is None:
        return None, "the signed instance is not a UUID"
    problem = arguments_problem(request["command"], request.get("arguments"))
    return (None, problem) if problem else (request, "")


# ============================================================================ answers
def answer_error(me: str, requester: str, request_id: str, reason: str, detail: str) -> dict[str, Any]:
    """The SPC_RESPONSE (v1 layout) to a refused request."""
    return {"from": me, "to": requester, "requestId": request_id, "status": "ERROR",
            "errorCode": ERROR_CODES.get(reason, "ACCESS_DENIED"), "errorMessage": f"{reason}: {detail}"}


def answer_result(me: str, requester: str, request_id: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"from": me, "to": requester, "requestId": request_id, "status": "SUCCESS", "result": result}


def refusal_of(error_message: str) -> tuple[str, str] | None:
    """(reason, sentence) of an answer's errorMessage, or None when it is no control refusal."""
    reason, sep, detail = error_message.partition(": ")
    return (reason, detail) if sep and reason in REASONS else None


# ============================================================================ who trusts whom
def trusted_operators(entry: RegistryEntry | None) -> tuple[str, ...]:
    """The operator fingerprints `entry`'s node trusts (none unless it advertises `control`)."""
    if entry is None or FEATURE not in entry.features:
        return ()
    operators = entry.extra.get("operators")
    if not isinstance(operators, list):
        return ()
    return tuple(op for op in operators if isinstance(op, str))


def trust_map(entries: Iterable[RegistryEntry]) -> dict[str, tuple[str, ...]]:
    """Node name -> the operator fingerprints it trusts, for every entry that trusts any."""
    return {e.name: ops for e in entries if (ops := trusted_operators(e))}


def administers(entry: RegistryEntry | None, operator: str) -> bool:
    """Whether the operator with this fingerprint may administer `entry`'s node."""
    return operator in trusted_operators(entry)


# ============================================================================ helpers
def _b64(text: object, size: int) -> bytes | None:
    if not isinstance(text, str) or len(text) > 4 * ((size + 2) // 3):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    # canonical only (unused bits zero), as libsodium's decoder requires: one text per key
    return raw if len(raw) == size and base64.b64encode(raw).decode("ascii") == text else None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON (RFC 8259)")


def _request_bytes(text: object) -> bytes | None:
    """The signed bytes: the UTF-8 encoding of the request string (no NUL, at most the limit)."""
    if not isinstance(text, str) or len(text) > MAX_REQUEST_TEXT or "\x00" in text:
        return None
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape: no signer wrote that
        return None
    return raw if len(raw) <= MAX_REQUEST_TEXT else None


def _uuid_bytes(text: str) -> bytes | None:
    """16 bytes of a UUID in its canonical 8-4-4-4-12 text form (either case), else None."""
    return uuid.UUID(text).bytes if _UUID.fullmatch(text) else None
