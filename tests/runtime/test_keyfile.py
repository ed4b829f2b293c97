import base64
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_runtime.core.errors import KeyFileError
from speed_runtime.keyfile import Key, format_key_text, generate_key_file, load_key, parse_key_text

RAW = bytes(range(32))
B64 = base64.b64encode(RAW).decode()


def write(path, text, mode=0o600):
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    os.chmod(path, mode)
    return path


def test_generate_and_load(workdir):
    path = os.path.join(workdir, "k")
    key = generate_key_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_key(path) == key
    with pytest.raises(KeyFileError, match="already exists"):
        generate_key_file(path)


@pytest.mark.parametrize("text", [f"SPEED-KEY-V1\n{B64}\n", f"SPEED-KEY-V1\n{B64}", f"\nSPEED-KEY-V1\n\n{B64}\n\n",
                                  f"SPEED-KEY-V1\r\n{B64}\r\n"])
def test_accepted_layouts(text):
    assert parse_key_text(text.encode()).raw == RAW


@pytest.mark.parametrize("text,fragment", [
    ("", "empty"), ("SPEED-KEY-V2\n" + B64, "does not start"), ("SPEED-KEY-V1\n", "exactly two lines"),
    ("SPEED-KEY-V1\n%%%%\n", "base64"), ("SPEED-KEY-V1\n" + base64.b64encode(b"x" * 31).decode(), "31 bytes"),
    ("SPEED-KEY-V1\n" + B64 + "\nextra\n", "exactly two lines"), ("SPEED-KEY-V1\n" + B64 + "\n\xff", "non-ASCII"),
])
def test_refused_layouts_never_show_key(text, fragment):
    with pytest.raises(KeyFileError, match=fragment) as info:
        parse_key_text(text.encode("latin-1"))
    assert B64 not in str(info.value) and B64[:12] not in str(info.value)


def test_permissions_symlink_and_missing(workdir):
    path = write(os.path.join(workdir, "k"), format_key_text(Key(RAW)), 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_key(path)
    assert load_key(path, allow_insecure=True).raw == RAW
    os.chmod(path, 0o600)
    link = os.path.join(workdir, "link")
    os.symlink(path, link)
    with pytest.raises(KeyFileError, match="symbolic link"):
        load_key(link)
    with pytest.raises(KeyFileError, match="does not exist"):
        load_key(os.path.join(workdir, "missing"))
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_key(workdir)


def test_key_text_forms_hide_material():
    key = Key(RAW)
    assert RAW.hex() not in repr(key) and B64 not in str(key) and key.fingerprint in repr(key)
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(key)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_parser_raises_only_its_own_error(data):
    try:
        parse_key_text(data)
    except KeyFileError:
        pass
