"""The direct libsodium calls of core/aead.py against PyNaCl's wrapper: the same bytes out, the
same refusals, at every size around the edges (empty, one byte, the tag alone, large)."""
import os
import subprocess
import sys

import pytest
from nacl import bindings
from nacl.exceptions import CryptoError

from speed_runtime.core import aead


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 64, 4096, 1 << 20])
def test_encrypt_and_decrypt_match_pynacl(size):
    key, nonce, ad, message = os.urandom(32), os.urandom(12), os.urandom(64), os.urandom(size)
    sealed = aead.encrypt(message, ad, nonce, key)
    assert sealed == bindings.crypto_aead_chacha20poly1305_ietf_encrypt(message, ad, nonce, key)
    assert aead.decrypt(sealed, ad, nonce, key) == message


def test_what_does_not_verify_is_none_as_pynacl_refuses_it():
    key, nonce, ad = os.urandom(32), os.urandom(12), os.urandom(64)
    sealed = aead.encrypt(b"speed", ad, nonce, key)
    tampered = [sealed[:-1] + bytes([sealed[-1] ^ 1]), sealed[:5], b"", sealed + b"x"]
    for bad, bad_ad, bad_key in [(t, ad, key) for t in tampered] + [(sealed, ad[:-1], key),
                                                                    (sealed, ad, os.urandom(32))]:
        assert aead.decrypt(bad, bad_ad, nonce, bad_key) is None
        with pytest.raises((CryptoError, ValueError)):
            bindings.crypto_aead_chacha20poly1305_ietf_decrypt(bad, bad_ad, nonce, bad_key)


def test_importing_the_core_initialises_libsodium_so_that_it_uses_its_fast_implementations():
    # without sodium_init() libsodium runs its portable ChaCha20 and Poly1305: a 512 KiB envelope
    # sealed in 1.4 ms instead of 0.47 (PyNaCl calls it from nacl.bindings, which the core avoids)
    code = ("import sys; import speed_runtime.core.envelope; from nacl._sodium import lib; "
            "assert 'nacl.bindings' not in sys.modules, 'the test needs a process without nacl.bindings'; "
            "print(lib.sodium_init())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"  # 1: already initialised (0 would mean this call was the first)
