"""Hostile and hand-made control requests for tests: every field of the signed request, the
payload and the envelope can be set, and the answer (if any) is awaited by a real requester
node, as the Operator client would — but without its checks, so that the target's own checks
are what the tests see."""
from __future__ import annotations

import base64
import json
import os
import time
import uuid
from concurrent.futures import Future

from speed_runtime.core import control
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.transport import TargetDirs, deliver

_seq = iter(range(1, 1 << 62))
STRANGER = control.OperatorKey(bytes(range(101, 133)))  # a key no test node trusts


def forgeries() -> dict[str, tuple[dict, str]]:
    """The issue's forgeries: name -> (forge() options, the reason the target must give)."""
    now = int(time.time() * 1000)
    return {
        "forged signature": (dict(flip_signature=True), "control_bad_signature"),
        "signed for another target": (dict(sign_target="someone-else"), "control_wrong_target"),
        "signed for another instance": (dict(sign_instance="6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"),
                                        "control_wrong_target"),
        "expired": (dict(issued_ms=now - 200_000), "control_expired"),
        "issued in the future": (dict(issued_ms=now + 100_000), "control_expired"),
        "operator not trusted": (dict(operator=STRANGER), "control_untrusted"),
        "unsigned": (dict(unsigned=True), "control_unsigned"),
        "signed for another requester": (dict(sign_requester="mallory"), "control_wrong_requester"),
    }


def forge(requester, target: str, target_id: str, operator: control.OperatorKey, *, command: str = "allow",
          arguments: dict | None = None, request_id: str | None = None, sign_target: str | None = None,
          sign_instance: str | None = None, sign_requester: str | None = None, issued_ms: int | None = None,
          lifetime_ms: int = 60_000, unsigned: bool = False, flip_signature: bool = False,
          flags: int = control.FLAG_CONTROL, timestamp_ms: int | None = None, text: bytes | None = None,
          **payload_overrides) -> tuple[str, bytes, str]:
    """(file name, sealed bytes, request id) of one control request from `requester` (a Node)."""
    request_id = request_id or uuid.uuid4().hex
    issued = int(time.time() * 1000) if issued_ms is None else issued_ms
    if text is None:
        text = control.request_text(
            target=sign_target or target, instance=sign_instance or target_id, request_id=request_id,
            requester=sign_requester or requester.name, command=command,
            arguments={"peer": "gateway"} if arguments is None and command in ("allow", "revoke") else arguments or {},
            issued_ms=issued, expires_ms=issued + lifetime_ms)
    payload = json.loads(control.request_payload(operator, requester.name, target, request_id, text))
    if unsigned:
        del payload["signature"], payload["operator"]
    if flip_signature:
        signature = bytearray(base64.b64decode(payload["signature"]))
        signature[7] ^= 0x10
        payload["signature"] = base64.b64encode(bytes(signature)).decode()
    payload.update(payload_overrides)
    body = json.dumps(payload, separators=(",", ":")).encode()
    seq, nonce = next(_seq), os.urandom(12)
    stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    data = seal(Header(EnvelopeType.SPC_REQUEST, seq, stamp, len(body), requester.id_bytes,
                       uuid.UUID(target_id).bytes, flags), body, requester.key, nonce)
    return envelope_filename(requester.name, requester.id_bytes, seq, nonce), data, request_id


def put(root: str, target: str, filename: str, data: bytes) -> None:
    """Deliver exact bytes into `target`'s control/ directory (tmp/ then a no-replace move)."""
    dirs = TargetDirs(root, target, "control")
    try:
        deliver(dirs, filename, data)
    finally:
        dirs.close()


def send(requester, target: str, target_id: str, signer: control.OperatorKey, timeout: float = 10.0,
         **options) -> tuple[Future, str, str]:
    """Forge, deliver and await the answer as `requester` (which must allow `target`):
    (future of the result, file name, request id). A refusal raises SpcError from the future.
    `operator=` in options (a forgeries() entry) replaces the signing key."""
    filename, data, request_id = forge(requester, target, target_id, options.pop("operator", signer), **options)
    future = requester.caller.expect(request_id, target, uuid.UUID(target_id).bytes, "control", timeout,
                                     lambda: put(requester.root, target, filename, data))
    return future, filename, request_id
