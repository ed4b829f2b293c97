"""ChaCha20-Poly1305 (IETF) through libsodium, called directly: the binding PyNaCl ships (its cffi
module) without PyNaCl's Python wrapper, whose argument checks cost more than the cipher on small
envelopes (4 µs against 1.4 µs per call here; benchmarks/rtt_stages.py). The callers have already
checked sizes; results are byte-for-byte PyNaCl's (tests/runtime/test_aead.py). Falls back to
PyNaCl's wrapper where its cffi module cannot be reached."""
from __future__ import annotations

from . import accel

TAG_SIZE = 16

try:
    from nacl._sodium import ffi as _ffi, lib as _lib

    # sodium_init() picks the fastest implementations this CPU has (SIMD ChaCha20 and Poly1305);
    # without it libsodium runs its portable ones, 2.4 times slower on a 512 KiB envelope. PyNaCl
    # calls it when nacl.bindings is imported, which this module avoids. It is idempotent.
    if _lib.sodium_init() < 0:  # pragma: no cover - libsodium could not initialise at all
        raise ImportError("libsodium's sodium_init() failed")
    _alloc = _ffi.new_allocator(should_clear_after_alloc=False)  # every byte is written by libsodium

    def encrypt(message: bytes, ad: bytes, nonce: bytes, key: bytes) -> bytes:
        size = len(message) + TAG_SIZE
        out = _alloc("unsigned char[]", size)
        _lib.crypto_aead_chacha20poly1305_ietf_encrypt(out, _ffi.NULL, message, len(message), ad, len(ad),
                                                       _ffi.NULL, nonce, key)
        return _ffi.buffer(out, size)[:]

    def decrypt(sealed: bytes, ad: bytes, nonce: bytes, key: bytes) -> bytes | None:
        """The plaintext, or None when the tag does not verify."""
        size = len(sealed) - TAG_SIZE
        if size < 0:
            return None
        out = _alloc("unsigned char[]", size or 1)
        if _lib.crypto_aead_chacha20poly1305_ietf_decrypt(out, _ffi.NULL, _ffi.NULL, sealed, len(sealed), ad,
                                                          len(ad), nonce, key) != 0:
            return None
        return _ffi.buffer(out, size)[:]

except ImportError:  # pragma: no cover - PyNaCl without its bundled cffi module
    from nacl import bindings as _sodium
    from nacl.exceptions import CryptoError

    def encrypt(message: bytes, ad: bytes, nonce: bytes, key: bytes) -> bytes:
        return _sodium.crypto_aead_chacha20poly1305_ietf_encrypt(message, ad, nonce, key)

    def decrypt(sealed: bytes, ad: bytes, nonce: bytes, key: bytes) -> bytes | None:
        try:
            return _sodium.crypto_aead_chacha20poly1305_ietf_decrypt(sealed, ad, nonce, key)
        except CryptoError:
            return None


# The compiled form (core/accel.py) calls libsodium without cffi in between: the same bytes.
pure_encrypt, pure_decrypt = encrypt, decrypt
if accel.compiled is not None:
    accel.compiled.bind("encrypt", encrypt)
    accel.compiled.bind("decrypt", decrypt)
    encrypt, decrypt = accel.compiled.encrypt, accel.compiled.decrypt
