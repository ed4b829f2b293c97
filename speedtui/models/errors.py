"""What the console says when something fails: one sentence in the console's language (keys to
press), never a class name, never the error code twice ("ACCESS_DENIED ACCESS_DENIED: …")."""

from __future__ import annotations

import re

_DENIED = re.compile(r"(?:node )?(?P<node>[\w.\-]+) does not allow (?P<peer>[\w.\-]+)")
_PYTHON_ADVICE = re.compile(r"[;,]?\s*(?:run allow\([^)]*\) on \S+ first|grant it on \S+ \(allow \S+\))\.?$")


def strip_code(code: str, message: str) -> str:
    """The message without a leading ``CODE:`` (the runtime's SpcError text starts with it)."""
    message = message.strip()
    if code and message.upper().startswith(code.upper()):
        message = message[len(code):].lstrip(" :-")
    return message


def grant_advice(node: str, peer: str, own: bool) -> str:
    if own:
        return f"press g to grant it (on {node}, allow {peer})"
    return (f"{node} was not started by this console: restart it with `--allow {peer}` "
            f"(or grant from a console that started it)")


def explain_denied(message: str, own_nodes: frozenset[str] = frozenset()) -> str:
    """ACCESS_DENIED in the console's words: who does not allow whom, and what to press."""
    m = _DENIED.search(message)
    if m is None:
        return _PYTHON_ADVICE.sub("", message).strip()
    node, peer = m.group("node"), m.group("peer")
    why = ", so the answer could not come back" if "response" in message or "come back" in message else ""
    return f"{node} does not allow {peer}{why}: {grant_advice(node, peer, node in own_nodes)}"


def describe_call_error(code: str, message: str, own_nodes: frozenset[str] = frozenset()) -> str:
    """The text after the code, as the call dialog, the notifications and the history show it."""
    text = strip_code(code, message)
    if code == "ACCESS_DENIED":
        return explain_denied(text, own_nodes)
    return text


def describe_failure(exc: BaseException, own_nodes: frozenset[str] = frozenset()) -> str:
    """Any failure of an action, as one sentence (the first line of its message)."""
    if isinstance(exc, OSError) and exc.strerror:  # "[Errno 28] No space left on device" alone says too little
        where = f" ({exc.filename})" if exc.filename else ""
        return f"the environment's files could not be written or read{where}: {exc.strerror}"
    code = getattr(exc, "code", "")
    text = str(getattr(exc, "message", "") or exc).strip()
    text = text.splitlines()[0] if text else ""
    if isinstance(code, str) and code:
        text = describe_call_error(code, text, own_nodes)
        return f"{code}: {text}" if text else code
    text = _PYTHON_ADVICE.sub("", text).strip()
    return text or "the action failed without saying why"
