/* _compiled.c - the compiled form of the per-envelope work of speed_runtime.core (wire contract
 * section 5): the inbox file name, the 64-byte header, the framing checks, ChaCha20-Poly1305 through
 * libsodium, the field checks of the JSON payload, and the journal's line for one envelope (section 8).
 *
 * Every function here has a pure-Python twin (core/envelope.py, core/payloads.py, core/aead.py),
 * bound with bind() when those modules are imported. A function returns what its twin returns and
 * raises what its twin raises: the envelope's own rejections (EnvelopeError) are built here with the
 * same reason and detail; any input outside the fast path (another type or arity, keywords, a value
 * out of range) is handed to the twin itself, so the two cannot differ there either.
 * tests/runtime/test_compiled_form.py checks both on random and hostile input.
 *
 * Optional: setup.py builds it when a C compiler and the headers of Python and libsodium are
 * present; core/accel.py falls back to the twins when it is missing (or SPEED_PURE_PYTHON=1). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sodium.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HEADER_SIZE 64
#define NONCE_SIZE 12
#define TAG_SIZE 16
#define OVERHEAD (HEADER_SIZE + NONCE_SIZE + TAG_SIZE)
#define KEY_SIZE 32
#define VERSION 1
#define SENDER_MAX 64
/* a payload at least this large is sealed or opened without the GIL (as PyNaCl's cffi calls do):
 * other threads of the node run meanwhile; below it, giving the GIL away costs more than it frees */
#define RELEASE_GIL_FROM 16384

/* ------------------------------------------------------------------ what bind() hands over */
enum {
    B_HEADER, B_FILENAME, B_OPENED, B_ENVELOPE_ERROR, B_ERROR_CODES,
    B_PURE_PARSE_FILENAME, B_PURE_SEAL, B_PURE_OPEN, B_PURE_DECODE_PAYLOAD, B_PURE_ENCODE_PAYLOAD, B_PURE_ENCRYPT,
    B_PURE_DECRYPT, B_ENVELOPE_TRACE, B_PURE_ENVELOPE_LINE,
    B_COUNT
};
static const char *const BOUND_NAMES[B_COUNT] = {
    "Header", "FileName", "OpenedEnvelope", "EnvelopeError", "SPC_ERROR_CODES",
    "parse_filename", "seal", "open_envelope", "decode_payload", "encode_payload", "encrypt", "decrypt",
    "EnvelopeTrace", "envelope_line",
};
static PyObject *bound[B_COUNT];
static PyObject *str_raw, *str_error, *str_success, *str_from, *str_to, *str_result, *str_status,
    *str_error_code, *str_error_message, *str_caller_node, *zero;

static PyObject *bind(PyObject *self, PyObject *args)
{
    const char *name;
    PyObject *value;
    if (!PyArg_ParseTuple(args, "sO:bind", &name, &value))
        return NULL;
    for (int i = 0; i < B_COUNT; i++) {
        if (strcmp(name, BOUND_NAMES[i]) == 0) {
            Py_INCREF(value);
            Py_XSETREF(bound[i], value);
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "nothing called %s is bound", name);
    return NULL;
}

static int ready(int first, int last)
{
    for (int i = first; i <= last; i++) {
        if (bound[i] == NULL) {
            PyErr_Format(PyExc_RuntimeError, "the compiled form needs %s bound first", BOUND_NAMES[i]);
            return 0;
        }
    }
    return 1;
}

/* The pure twin, called with exactly the arguments this call got. */
static PyObject *twin(int which, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (!ready(which, which))
        return NULL;
    return PyObject_Vectorcall(bound[which], args, nargsf, kwnames);
}

/* A NamedTuple of the core (a tuple subclass without slots of its own), made as tuple() would. */
static PyObject *record(int which, Py_ssize_t size)
{
    PyTypeObject *type = (PyTypeObject *)bound[which];
    return type->tp_alloc(type, size);
}

static void reject(const char *reason, PyObject *detail)
{
    if (detail == NULL)
        return; /* formatting failed: that error stands */
    PyObject *exc = PyObject_CallFunction(bound[B_ENVELOPE_ERROR], "sO", reason, detail);
    Py_DECREF(detail);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

/* The key's 32 raw bytes (Key.raw), or NULL without an error set when they are not plain bytes. */
static PyObject *raw_key(PyObject *key)
{
    PyObject *raw = PyObject_GetAttr(key, str_raw);
    if (raw == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!PyBytes_CheckExact(raw) || PyBytes_GET_SIZE(raw) != KEY_SIZE) {
        Py_DECREF(raw);
        return NULL;
    }
    return raw;
}

/* ------------------------------------------------------------------ the file name */
static int is_name_char(unsigned char c, int first)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           (!first && c == '-');
}

static int is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static PyObject *lower8(const unsigned char *p)
{
    char out[8];
    for (int i = 0; i < 8; i++)
        out[i] = (char)(p[i] >= 'A' && p[i] <= 'F' ? p[i] + ('a' - 'A') : p[i]);
    return PyUnicode_FromStringAndSize(out, 8);
}

/* parse_filename(name): <sender>.<8 hex>.<20 digits>.<8 hex>.env, the sequence at most 2**64 - 1.
 * The sender holds no '.', so the last 43 characters are the fixed part. */
static PyObject *parse_filename(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kwnames != NULL || !PyUnicode_Check(args[0]) || !ready(B_FILENAME, B_FILENAME))
        return twin(B_PURE_PARSE_FILENAME, args, nargsf, kwnames);
    PyObject *name = args[0];
    if (PyUnicode_READY(name) < 0)
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(name);
    if (!PyUnicode_IS_ASCII(name) || len < 1 + 43 || len > SENDER_MAX + 43)
        Py_RETURN_NONE; /* no other character can match the pattern */
    const unsigned char *s = PyUnicode_1BYTE_DATA(name);
    Py_ssize_t n = len - 43; /* the sender's length */
    const unsigned char *t = s + n;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_name_char(s[i], i == 0))
            Py_RETURN_NONE;
    if (t[0] != '.' || t[9] != '.' || t[30] != '.' || memcmp(t + 39, ".env", 4) != 0)
        Py_RETURN_NONE;
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        if (!is_hex(t[1 + i]) || !is_hex(t[31 + i]))
            Py_RETURN_NONE;
    for (int i = 0; i < 20; i++) {
        unsigned d = (unsigned)t[10 + i] - '0';
        if (d > 9)
            Py_RETURN_NONE;
        if (seq > (UINT64_MAX - d) / 10)
            Py_RETURN_NONE; /* beyond 2**64 - 1 */
        seq = seq * 10 + d;
    }
    PyObject *out = record(B_FILENAME, 4);
    if (out == NULL)
        return NULL;
    PyObject *items[4] = {PyUnicode_FromStringAndSize((const char *)s, n), lower8(t + 1),
                          PyLong_FromUnsignedLongLong(seq), lower8(t + 31)};
    for (int i = 0; i < 4; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 4; j++)
                Py_XDECREF(items[j]);
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, items[i]);
    }
    return out;
}

/* ------------------------------------------------------------------ the header */
typedef struct {
    unsigned long long type, sequence, timestamp_ms, payload_size, flags, version, header_length;
    const char *source_id, *target_id;
} header_fields;

static void put_be(unsigned char *p, unsigned long long v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static unsigned long long get_be(const unsigned char *p, int n)
{
    unsigned long long v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* An int field within [0, max] (what struct.pack accepts for its format), else 0. */
static int int_field(PyObject *value, unsigned long long max, unsigned long long *out)
{
    if (!PyLong_Check(value))
        return 0;
    *out = PyLong_AsUnsignedLongLong(value);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return *out <= max;
}

static int id_field(PyObject *value, const char **out)
{
    if (!PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) != 16)
        return 0;
    *out = PyBytes_AS_STRING(value);
    return 1;
}

/* Header(type, sequence, timestamp_ms, payload_size, source_id, target_id, flags, version,
 * header_length), each as Header.encode() packs it; 0 when any is not (the twin raises). */
static int header_from(PyObject *h, header_fields *f)
{
    if ((PyObject *)Py_TYPE(h) != bound[B_HEADER] || PyTuple_GET_SIZE(h) != 9)
        return 0;
    return int_field(PyTuple_GET_ITEM(h, 0), 0xff, &f->type) &&
           int_field(PyTuple_GET_ITEM(h, 1), UINT64_MAX, &f->sequence) &&
           int_field(PyTuple_GET_ITEM(h, 2), UINT64_MAX, &f->timestamp_ms) &&
           id_field(PyTuple_GET_ITEM(h, 4), &f->source_id) && id_field(PyTuple_GET_ITEM(h, 5), &f->target_id) &&
           int_field(PyTuple_GET_ITEM(h, 6), 0xffff, &f->flags) &&
           int_field(PyTuple_GET_ITEM(h, 7), 0xff, &f->version) &&
           int_field(PyTuple_GET_ITEM(h, 8), 0xffffffffu, &f->header_length) &&
           PyLong_Check(PyTuple_GET_ITEM(h, 3));
}

static void encode_header(const header_fields *f, unsigned char *out)
{
    out[0] = (unsigned char)f->version;
    out[1] = (unsigned char)f->type;
    put_be(out + 2, f->flags, 2);
    put_be(out + 4, f->header_length, 4);
    put_be(out + 8, f->sequence, 8);
    put_be(out + 16, f->timestamp_ms, 8);
    put_be(out + 24, f->payload_size, 8);
    memcpy(out + 32, f->source_id, 16);
    memcpy(out + 48, f->target_id, 16);
}

/* ------------------------------------------------------------------ seal and open */
/* seal(header, payload, key, nonce): header (payload_size from the payload), nonce, ciphertext, tag. */
static PyObject *seal(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    header_fields f;
    PyObject *raw;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 4 || kwnames != NULL || !ready(B_HEADER, B_HEADER) || !PyBytes_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[3]) || PyBytes_GET_SIZE(args[3]) != NONCE_SIZE || !header_from(args[0], &f) ||
        (raw = raw_key(args[2])) == NULL)
        return twin(B_PURE_SEAL, args, nargsf, kwnames);
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]);
    f.payload_size = (unsigned long long)size;
    PyObject *out = PyBytes_FromStringAndSize(NULL, OVERHEAD + size);
    if (out == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(raw);
    encode_header(&f, o);
    memcpy(o + HEADER_SIZE, PyBytes_AS_STRING(args[3]), NONCE_SIZE);
    if (size >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        crypto_aead_chacha20poly1305_ietf_encrypt(o + HEADER_SIZE + NONCE_SIZE, NULL, m, (unsigned long long)size,
                                                  o, HEADER_SIZE, NULL, o + HEADER_SIZE, k);
        Py_END_ALLOW_THREADS
    } else {
        crypto_aead_chacha20poly1305_ietf_encrypt(o + HEADER_SIZE + NONCE_SIZE, NULL, m, (unsigned long long)size,
                                                  o, HEADER_SIZE, NULL, o + HEADER_SIZE, k);
    }
    Py_DECREF(raw);
    return out;
}

/* Decrypt `size` bytes of plaintext into a new bytes object; NULL without an error set when the
 * tag does not verify. */
static PyObject *decrypt_into_bytes(const unsigned char *sealed, Py_ssize_t size, const unsigned char *ad,
                                    Py_ssize_t ad_len, const unsigned char *nonce, const unsigned char *key)
{
    unsigned char empty[1];
    PyObject *out = size ? PyBytes_FromStringAndSize(NULL, size) : NULL;
    if (size && out == NULL)
        return NULL;
    unsigned char *m = size ? (unsigned char *)PyBytes_AS_STRING(out) : empty;
    int failed;
    if (size >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        failed = crypto_aead_chacha20poly1305_ietf_decrypt(m, NULL, NULL, sealed, (unsigned long long)size + TAG_SIZE,
                                                           ad, (unsigned long long)ad_len, nonce, key);
        Py_END_ALLOW_THREADS
    } else {
        failed = crypto_aead_chacha20poly1305_ietf_decrypt(m, NULL, NULL, sealed, (unsigned long long)size + TAG_SIZE,
                                                           ad, (unsigned long long)ad_len, nonce, key);
    }
    if (failed) {
        Py_XDECREF(out);
        return NULL;
    }
    return size ? out : PyBytes_FromStringAndSize(NULL, 0);
}

static PyObject *header_record(const unsigned char *data)
{
    PyObject *h = record(B_HEADER, 9);
    if (h == NULL)
        return NULL;
    PyObject *items[9] = {
        PyLong_FromUnsignedLong(data[1]), PyLong_FromUnsignedLongLong(get_be(data + 8, 8)),
        PyLong_FromUnsignedLongLong(get_be(data + 16, 8)), PyLong_FromUnsignedLongLong(get_be(data + 24, 8)),
        PyBytes_FromStringAndSize((const char *)data + 32, 16), PyBytes_FromStringAndSize((const char *)data + 48, 16),
        PyLong_FromUnsignedLong((unsigned long)get_be(data + 2, 2)), PyLong_FromUnsignedLong(data[0]),
        PyLong_FromUnsignedLong((unsigned long)get_be(data + 4, 4)),
    };
    for (int i = 0; i < 9; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 9; j++)
                Py_XDECREF(items[j]);
            Py_DECREF(h);
            return NULL;
        }
        PyTuple_SET_ITEM(h, i, items[i]);
    }
    return h;
}

/* open_envelope(data, key, max_payload): the checks in the contract's order (size limit, size,
 * version, header length, tag, type), then OpenedEnvelope(header, nonce, payload). */
static PyObject *open_envelope(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long max_payload = 1 << 20;
    int overflow = 0;
    PyObject *raw;
    if (nargs < 2 || nargs > 3 || kwnames != NULL || !ready(B_HEADER, B_ENVELOPE_ERROR) ||
        !PyBytes_CheckExact(args[0]) || (nargs == 3 && !PyLong_CheckExact(args[2])))
        return twin(B_PURE_OPEN, args, nargsf, kwnames);
    if (nargs == 3) {
        max_payload = PyLong_AsLongLongAndOverflow(args[2], &overflow);
        if (overflow || (max_payload == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return twin(B_PURE_OPEN, args, nargsf, kwnames);
        }
    }
    if ((raw = raw_key(args[1])) == NULL)
        return twin(B_PURE_OPEN, args, nargsf, kwnames);
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[0]);
    PyObject *result = NULL;
    if (len < OVERHEAD) {
        reject("bad_size", PyUnicode_FromFormat("%zd bytes is shorter than the %d-byte minimum", len, OVERHEAD));
        goto done;
    }
    if ((long long)len - OVERHEAD > max_payload) {
        reject("too_large", PyUnicode_FromFormat("%zd bytes exceeds the envelope size limit", len));
        goto done;
    }
    /* from here max_payload >= 0 (a negative one failed just above) */
    unsigned long long psize = get_be(data + 24, 8), version = data[0], hlen = get_be(data + 4, 4);
    if (psize > (unsigned long long)max_payload) {
        reject("too_large", PyUnicode_FromFormat("payload of %llu bytes exceeds the limit of %lld", psize,
                                                 max_payload));
        goto done;
    }
    if ((unsigned long long)len != OVERHEAD + psize) {
        reject("bad_size", PyUnicode_FromFormat("file of %zd bytes does not match a payload of %llu", len, psize));
        goto done;
    }
    if (version != VERSION) {
        reject("bad_version", PyUnicode_FromFormat("version %llu, expected %d", version, VERSION));
        goto done;
    }
    if (hlen != HEADER_SIZE) {
        reject("bad_version", PyUnicode_FromFormat("header length %llu, expected %d", hlen, HEADER_SIZE));
        goto done;
    }
    PyObject *payload = decrypt_into_bytes(data + HEADER_SIZE + NONCE_SIZE, (Py_ssize_t)psize, data, HEADER_SIZE,
                                           data + HEADER_SIZE, (const unsigned char *)PyBytes_AS_STRING(raw));
    if (payload == NULL) {
        if (!PyErr_Occurred())
            reject("bad_tag", PyUnicode_FromString("authentication failed: wrong key or tampered envelope"));
        goto done;
    }
    if (data[1] < 1 || data[1] > 8) {
        Py_DECREF(payload);
        reject("bad_payload", PyUnicode_FromFormat("unknown envelope type %d", (int)data[1]));
        goto done;
    }
    PyObject *header = header_record(data);
    PyObject *nonce = PyBytes_FromStringAndSize((const char *)data + HEADER_SIZE, NONCE_SIZE);
    result = record(B_OPENED, 3);
    if (header == NULL || nonce == NULL || result == NULL) {
        Py_XDECREF(header);
        Py_XDECREF(nonce);
        Py_DECREF(payload);
        Py_CLEAR(result);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, header);
    PyTuple_SET_ITEM(result, 1, nonce);
    PyTuple_SET_ITEM(result, 2, payload);
done:
    Py_DECREF(raw);
    return result;
}

/* ------------------------------------------------------------------ ChaCha20-Poly1305 alone (core/aead.py) */
static int plain_bytes(PyObject *const *args, Py_ssize_t nargs)
{
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (!PyBytes_CheckExact(args[i]))
            return 0;
    return PyBytes_GET_SIZE(args[2]) == NONCE_SIZE && PyBytes_GET_SIZE(args[3]) == KEY_SIZE;
}

/* encrypt(message, ad, nonce, key) -> ciphertext and tag */
static PyObject *encrypt(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 4 || kwnames != NULL || !plain_bytes(args, 4))
        return twin(B_PURE_ENCRYPT, args, nargsf, kwnames);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size + TAG_SIZE);
    if (out == NULL)
        return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(args[0]),
                        *ad = (const unsigned char *)PyBytes_AS_STRING(args[1]),
                        *nonce = (const unsigned char *)PyBytes_AS_STRING(args[2]),
                        *key = (const unsigned char *)PyBytes_AS_STRING(args[3]);
    unsigned long long ad_len = (unsigned long long)PyBytes_GET_SIZE(args[1]);
    if (size >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        crypto_aead_chacha20poly1305_ietf_encrypt(o, NULL, m, (unsigned long long)size, ad, ad_len, NULL, nonce, key);
        Py_END_ALLOW_THREADS
    } else {
        crypto_aead_chacha20poly1305_ietf_encrypt(o, NULL, m, (unsigned long long)size, ad, ad_len, NULL, nonce, key);
    }
    return out;
}

/* decrypt(sealed, ad, nonce, key) -> plaintext, or None when the tag does not verify */
static PyObject *decrypt(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 4 || kwnames != NULL || !plain_bytes(args, 4))
        return twin(B_PURE_DECRYPT, args, nargsf, kwnames);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]) - TAG_SIZE;
    if (size < 0)
        Py_RETURN_NONE;
    PyObject *out = decrypt_into_bytes((const unsigned char *)PyBytes_AS_STRING(args[0]), size,
                                       (const unsigned char *)PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]),
                                       (const unsigned char *)PyBytes_AS_STRING(args[2]),
                                       (const unsigned char *)PyBytes_AS_STRING(args[3]));
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* ------------------------------------------------------------------ JSON, the common case
 * The payload codec of core/payloads.py is the standard library's json (ensure_ascii=False,
 * separators "," and ":", allow_nan=False out; strict in). Here the same grammar and output for
 * plain values: dict, list, tuple, str, int, float, True, False, None, nested at most MAX_DEPTH
 * deep. Anything else - another type or a subclass, a key that is not a str, a lone surrogate,
 * NaN, deeper nesting, any syntax error - is not an answer here ("bail"): the caller hands the
 * whole call to its twin, which gives json's own value or error. */
#define MAX_DEPTH 64

typedef struct {
    PyObject *bytes; /* grown by doubling, cut to size at the end */
    Py_ssize_t len, cap;
} writer;

static int reserve(writer *w, Py_ssize_t more)
{
    if (w->len + more <= w->cap)
        return 0;
    Py_ssize_t need = w->len + more, cap = w->cap * 2 > need ? w->cap * 2 : need + need / 8; /* no copy for
                                                                                     what follows a long string */
    if (_PyBytes_Resize(&w->bytes, cap) < 0)
        return -1;
    w->cap = cap;
    return 0;
}

static int put(writer *w, const char *s, Py_ssize_t n)
{
    if (reserve(w, n) < 0)
        return -1;
    memcpy(PyBytes_AS_STRING(w->bytes) + w->len, s, n);
    w->len += n;
    return 0;
}

/* what json writes for an ASCII character of a string: 0 as it is, else the letter after '\'
 * ('u': \u00XX) */
static char ESCAPE[128];

static void init_escapes(void)
{
    for (int c = 0; c < 0x20; c++)
        ESCAPE[c] = 'u';
    ESCAPE['"'] = '"';
    ESCAPE['\\'] = '\\';
    ESCAPE['\b'] = 'b';
    ESCAPE['\f'] = 'f';
    ESCAPE['\n'] = 'n';
    ESCAPE['\r'] = 'r';
    ESCAPE['\t'] = 't';
}

static int put_escaped(writer *w, Py_UCS4 c)
{
    char out[6] = {'\\', ESCAPE[c], '0', '0', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 0xf]};
    return put(w, out, ESCAPE[c] == 'u' ? 6 : 2);
}

/* How many bytes from p (at most n) come before the first one a JSON string cannot hold as it is:
 * below 0x20, '"' or '\\' - or, with `high`, 0x80 or more. Sixteen bytes at a time with SSE2
 * (every x86-64), eight elsewhere. */
#ifdef __SSE2__
#include <emmintrin.h>

static Py_ssize_t plain_prefix(const unsigned char *p, Py_ssize_t n, int high)
{
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), control = _mm_set1_epi8(0x1f);
    Py_ssize_t i = 0;
    for (; n - i >= 16; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                                   _mm_cmpeq_epi8(_mm_max_epu8(x, control), control));
        int mask = _mm_movemask_epi8(hit) | (high ? _mm_movemask_epi8(x) : 0);
        if (mask)
            return i + __builtin_ctz((unsigned)mask);
    }
    for (; i < n; i++)
        if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\' || (high && p[i] >= 0x80))
            break;
    return i;
}
#else
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static int has_byte(uint64_t x, unsigned char c)
{
    uint64_t y = x ^ (ONES * c);
    return ((y - ONES) & ~y & HIGHS) != 0;
}

static Py_ssize_t plain_prefix(const unsigned char *p, Py_ssize_t n, int high)
{
    Py_ssize_t i = 0;
    for (; n - i >= 8; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        if (((x - ONES * 0x20) & ~x & HIGHS) || has_byte(x, '"') || has_byte(x, '\\') || (high && (x & HIGHS)))
            break;
    }
    for (; i < n; i++)
        if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\' || (high && p[i] >= 0x80))
            break;
    return i;
}
#endif

/* A string as json.encoder's encode_basestring writes it (escapes for '"', '\' and control
 * characters, everything else as is), in UTF-8. A lone surrogate, which UTF-8 cannot carry, bails. */
static int encode_string(writer *w, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (reserve(w, n + 2) < 0 || put(w, "\"", 1) < 0)
        return -1;
    if (PyUnicode_IS_ASCII(s)) {
        const unsigned char *p = PyUnicode_1BYTE_DATA(s);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t run = plain_prefix(p + i, n - i, 0);
            if (put(w, (const char *)p + i, run) < 0 || (i + run < n && put_escaped(w, p[i + run]) < 0))
                return -1;
            i += run;
        }
    } else {
        int kind = PyUnicode_KIND(s);
        const void *data = PyUnicode_DATA(s);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            char u[4];
            int len;
            if (c < 0x80) {
                if (ESCAPE[c]) {
                    if (put_escaped(w, c) < 0)
                        return -1;
                    continue;
                }
                u[0] = (char)c, len = 1;
            } else if (c < 0x800) {
                u[0] = (char)(0xc0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3f)), len = 2;
            } else if (c >= 0xd800 && c <= 0xdfff) {
                return -1; /* a lone surrogate: json's utf-8 encode raises */
            } else if (c < 0x10000) {
                u[0] = (char)(0xe0 | c >> 12), u[1] = (char)(0x80 | ((c >> 6) & 0x3f)),
                u[2] = (char)(0x80 | (c & 0x3f)), len = 3;
            } else {
                u[0] = (char)(0xf0 | c >> 18), u[1] = (char)(0x80 | ((c >> 12) & 0x3f)),
                u[2] = (char)(0x80 | ((c >> 6) & 0x3f)), u[3] = (char)(0x80 | (c & 0x3f)), len = 4;
            }
            if (put(w, u, len) < 0)
                return -1;
        }
    }
    return put(w, "\"", 1);
}

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 u128;

/* float.__repr__'s text of d where it is plain to find: 1e-4 <= |d| < 2**53 (fixed notation), the
 * two neighbours equally far (the mantissa not a power of two) and no tie on the way; else 0, and
 * PyOS_double_to_string decides. Journals write a time and a latency per record, and the general
 * routine (big integers, an allocation) cost about 3,500 instructions each; this costs a few hundred.
 * With d = m / 2**k exactly, the nearest number of p decimals N / 10**p reads back as d when it lies
 * within half a unit in the last place: |N * 2**(k+1) - 2 * m * 10**p| < 10**p; the first p for which
 * that holds gives repr's digits (the shortest that read back, and of those the nearest). Every term
 * fits 128 bits: m < 2**53, 10**p <= 10**19, k <= 67. */
static Py_ssize_t short_repr(double d, char *out)
{
    double a = d < 0 ? -d : d;
    if (!(a >= 1e-4 && a < 9007199254740992.0))
        return 0;
    int exp;
    uint64_t m = (uint64_t)ldexp(frexp(a, &exp), 53); /* exact: a = m / 2**k, 2**52 <= m < 2**53 */
    int k = 53 - exp;
    if (m == (uint64_t)1 << 52)
        return 0; /* the neighbour below is nearer than the one above */
    u128 scale = 1, half = k > 0 ? (u128)1 << (k - 1) : 0;
    for (int p = 0; p <= 19; p++, scale *= 10) {
        u128 q = (u128)m * scale;
        if (k > 0 && (q & (((u128)1 << k) - 1)) == half)
            return 0; /* halfway between two numbers of p decimals */
        u128 n = k > 0 ? (q + half) >> k : q, twice = n << (k + 1), exact = q << 1;
        u128 off = twice > exact ? twice - exact : exact - twice;
        if (off == scale)
            return 0; /* on the boundary: read back by rounding to even */
        if (off > scale)
            continue;
        char digits[24];
        int len = 0;
        uint64_t whole = (uint64_t)(n / scale), frac = (uint64_t)(n % scale);
        Py_ssize_t at = 0;
        if (d < 0)
            out[at++] = '-';
        do
            digits[len++] = (char)('0' + whole % 10);
        while (whole /= 10);
        while (len)
            out[at++] = digits[--len];
        out[at++] = '.';
        if (!p) {
            out[at++] = '0';
            return at;
        }
        for (int i = p - 1; i >= 0; i--, frac /= 10)
            out[at + i] = (char)('0' + frac % 10);
        return at + p;
    }
    return 0;
}
#endif

/* a float as float.__repr__ writes it */
static int put_repr(writer *w, double d)
{
#ifdef __SIZEOF_INT128__
    char fast[48];
    Py_ssize_t n = short_repr(d, fast);
    if (n)
        return put(w, fast, n);
#endif
    char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL); /* float.__repr__ */
    if (text == NULL)
        return -1;
    int failed = put(w, text, (Py_ssize_t)strlen(text));
    PyMem_Free(text);
    return failed;
}

static int encode_value(writer *w, PyObject *v, int depth);

static int encode_items(writer *w, PyObject *v, int depth)
{
    if (depth >= MAX_DEPTH)
        return -1;
    if (PyDict_CheckExact(v)) {
        PyObject *key, *value;
        Py_ssize_t at = 0;
        int first = 1;
        if (put(w, "{", 1) < 0)
            return -1;
        while (PyDict_Next(v, &at, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) /* json turns int, float, bool and None keys into strings */
                return -1;
            if ((!first && put(w, ",", 1) < 0) || encode_string(w, key) < 0 || put(w, ":", 1) < 0 ||
                encode_value(w, value, depth + 1) < 0)
                return -1;
            first = 0;
        }
        return put(w, "}", 1);
    }
    if (put(w, "[", 1) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); i++) {
        if ((i && put(w, ",", 1) < 0) || encode_value(w, PySequence_Fast_GET_ITEM(v, i), depth + 1) < 0)
            return -1;
    }
    return put(w, "]", 1);
}

static int encode_value(writer *w, PyObject *v, int depth)
{
    if (v == Py_None)
        return put(w, "null", 4);
    if (v == Py_True)
        return put(w, "true", 4);
    if (v == Py_False)
        return put(w, "false", 5);
    if (PyUnicode_CheckExact(v))
        return encode_string(w, v);
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (n == -1 && PyErr_Occurred()))
            return -1;
        char text[24];
        return put(w, text, snprintf(text, sizeof text, "%lld", n));
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        if (!isfinite(d))
            return -1; /* allow_nan=False: json raises */
        return put_repr(w, d);
    }
    if (PyDict_CheckExact(v) || PyList_CheckExact(v) || PyTuple_CheckExact(v))
        return encode_items(w, v, depth);
    return -1;
}

/* encode_payload(payload): the payload's JSON text in UTF-8. */
static PyObject *encode_payload(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL || !PyDict_CheckExact(args[0]))
        return twin(B_PURE_ENCODE_PAYLOAD, args, nargsf, kwnames);
    writer w = {PyBytes_FromStringAndSize(NULL, 256), 0, 256};
    if (w.bytes == NULL)
        return NULL;
    if (encode_items(&w, args[0], 0) < 0 || _PyBytes_Resize(&w.bytes, w.len) < 0) {
        Py_XDECREF(w.bytes);
        PyErr_Clear();
        return twin(B_PURE_ENCODE_PAYLOAD, args, nargsf, kwnames);
    }
    return w.bytes;
}


/* ------------------------------------------------------------------ the journal's envelope line */
static const char HEX[] = "0123456789abcdef";

static int put_u(writer *w, unsigned c)
{
    char out[6] = {'\\', 'u', HEX[c >> 12 & 0xf], HEX[c >> 8 & 0xf], HEX[c >> 4 & 0xf], HEX[c & 0xf]};
    return put(w, out, 6);
}

/* A str as json.dumps writes it (ensure_ascii): printable ASCII as it is; '"', '\' and control
 * characters as json escapes them; everything else as \uXXXX, a character above U+FFFF as its
 * two surrogates, a lone surrogate as itself. The result is ASCII. */
static int put_ascii_string(writer *w, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (reserve(w, n + 2) < 0 || put(w, "\"", 1) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int failed;
        if (c < 0x80 && ESCAPE[c]) {
            failed = put_escaped(w, c);
        } else if (c < 0x7f) {
            char ch = (char)c;
            failed = put(w, &ch, 1);
        } else if (c >= 0x10000) {
            c -= 0x10000;
            failed = put_u(w, 0xd800 | (c >> 10)) < 0 || put_u(w, 0xdc00 | (c & 0x3ff)) < 0;
        } else {
            failed = put_u(w, c);
        }
        if (failed)
            return -1;
    }
    return put(w, "\"", 1);
}

/* `"name":` and the field, a str (put_ascii_string), or -1 for anything else (the twin writes it) */
static int put_str_field(writer *w, const char *name, PyObject *v)
{
    if (!PyUnicode_CheckExact(v))
        return -1;
    return put(w, name, (Py_ssize_t)strlen(name)) < 0 ? -1 : put_ascii_string(w, v);
}

static int put_int_field(writer *w, const char *name, PyObject *v)
{
    int overflow;
    if (!PyLong_CheckExact(v))
        return -1;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (n == -1 && PyErr_Occurred()))
        return -1;
    char text[64];
    return put(w, text, snprintf(text, sizeof text, "%s%lld", name, n));
}

static int put_base64(writer *w, const unsigned char *p, Py_ssize_t n)
{
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    Py_ssize_t out = (n + 2) / 3 * 4;
    if (reserve(w, out) < 0)
        return -1;
    char *o = PyBytes_AS_STRING(w->bytes) + w->len;
    Py_ssize_t i = 0;
    for (; n - i >= 3; i += 3, o += 4) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        o[0] = B64[v >> 18], o[1] = B64[v >> 12 & 63], o[2] = B64[v >> 6 & 63], o[3] = B64[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)p[i] << 16;
        o[0] = B64[v >> 18], o[1] = B64[v >> 12 & 63], o[2] = '=', o[3] = '=';
    } else if (n - i == 2) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
        o[0] = B64[v >> 18], o[1] = B64[v >> 12 & 63], o[2] = B64[v >> 6 & 63], o[3] = '=';
    }
    w->len += out;
    return 0;
}

/* the optional str fields, in the order the line has them (core/records.py: _OPTIONAL) */
static const struct {
    int index;
    const char *name;
} OPTIONAL_FIELDS[] = {{8, ",\"reason\":"}, {9, ",\"requestId\":"}, {10, ",\"service\":"}, {11, ",\"status\":"},
                       {12, ",\"errorCode\":"}, {16, ",\"messageId\":"}};

static int envelope_fields(writer *w, PyObject *e, Py_ssize_t limit)
{
    PyObject *const *f = &PyTuple_GET_ITEM(e, 0);
    if (!PyFloat_CheckExact(f[0]) || put(w, "{\"kind\":\"envelope\",\"ts\":", 24) < 0 ||
        put_repr(w, PyFloat_AS_DOUBLE(f[0])) < 0 || put_str_field(w, ",\"node\":", f[1]) < 0 ||
        put_str_field(w, ",\"dir\":", f[2]) < 0 || put_str_field(w, ",\"peer\":", f[3]) < 0 ||
        put_str_field(w, ",\"type\":", f[4]) < 0 || put_int_field(w, ",\"seq\":", f[5]) < 0 ||
        put_int_field(w, ",\"size\":", f[6]) < 0 || put_str_field(w, ",\"outcome\":", f[7]) < 0)
        return -1;
    for (size_t i = 0; i < sizeof OPTIONAL_FIELDS / sizeof OPTIONAL_FIELDS[0]; i++) {
        PyObject *v = f[OPTIONAL_FIELDS[i].index];
        if (v != Py_None && put_str_field(w, OPTIONAL_FIELDS[i].name, v) < 0)
            return -1;
    }
    if (f[13] != Py_None) { /* latencyMs: float(value) */
        double d;
        if (PyFloat_CheckExact(f[13]))
            d = PyFloat_AS_DOUBLE(f[13]);
        else if (PyLong_CheckExact(f[13]) && !((d = PyLong_AsDouble(f[13])) == -1.0 && PyErr_Occurred()))
            ;
        else
            return -1;
        if (put(w, ",\"latencyMs\":", 13) < 0 || put_repr(w, d) < 0)
            return -1;
    }
    if (f[17] != Py_None) { /* chunk, and chunks (0 when None) */
        if (put_int_field(w, ",\"chunk\":", f[17]) < 0 ||
            put_int_field(w, ",\"chunks\":", f[18] == Py_None ? zero : f[18]) < 0)
            return -1;
    }
    if (f[14] != Py_None) {
        if (!PyBytes_CheckExact(f[14]))
            return -1;
        if (PyBytes_GET_SIZE(f[14]) <= limit &&
            (put(w, ",\"envelope\":\"", 13) < 0 ||
             put_base64(w, (const unsigned char *)PyBytes_AS_STRING(f[14]), PyBytes_GET_SIZE(f[14])) < 0 ||
             put(w, "\"", 1) < 0))
            return -1;
    }
    return put(w, "}\n", 2);
}

/* envelope_line(event, envelope_limit): the journal line of an EnvelopeTrace (core.records), a str. */
static PyObject *envelope_line(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    if (!ready(B_ENVELOPE_TRACE, B_PURE_ENVELOPE_LINE))
        return NULL;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL ||
        Py_TYPE(args[0]) != (PyTypeObject *)bound[B_ENVELOPE_TRACE] || PyTuple_GET_SIZE(args[0]) != 19 ||
        !PyLong_CheckExact(args[1]))
        return twin(B_PURE_ENVELOPE_LINE, args, nargsf, kwnames);
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return twin(B_PURE_ENVELOPE_LINE, args, nargsf, kwnames);
    }
    writer w = {PyBytes_FromStringAndSize(NULL, 512), 0, 512};
    if (w.bytes == NULL)
        return NULL;
    if (envelope_fields(&w, args[0], limit) < 0) {
        Py_DECREF(w.bytes);
        PyErr_Clear();
        return twin(B_PURE_ENVELOPE_LINE, args, nargsf, kwnames);
    }
    PyObject *line = PyUnicode_New(w.len, 127);
    if (line != NULL)
        memcpy(PyUnicode_1BYTE_DATA(line), PyBytes_AS_STRING(w.bytes), w.len);
    Py_DECREF(w.bytes);
    return line;
}

typedef struct {
    const unsigned char *p, *end;
    int depth;
} reader;

/* the payload fields of wire contract section 5.2, made once */
static PyObject *str_data, *str_request_id, *str_service, *str_arguments, *str_event, *str_reply, *str_ack_seq,
    *str_timeout_ms, *str_encoding;
static const struct {
    const char *text;
    PyObject **name;
} KNOWN_KEYS[] = {
    {"from", &str_from}, {"to", &str_to}, {"data", &str_data}, {"requestId", &str_request_id},
    {"service", &str_service}, {"arguments", &str_arguments}, {"callerNode", &str_caller_node},
    {"timeoutMs", &str_timeout_ms}, {"status", &str_status}, {"result", &str_result}, {"errorCode", &str_error_code},
    {"errorMessage", &str_error_message}, {"event", &str_event}, {"reply", &str_reply}, {"ackSeq", &str_ack_seq},
    {"encoding", &str_encoding}, {NULL, NULL},
};

static void skip_space(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int literal(reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static int hex4(const unsigned char *p, Py_UCS4 *out)
{
    Py_UCS4 v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (Py_UCS4)d;
    }
    *out = v;
    return 1;
}

/* A string after its opening quote: the raw bytes as UTF-8 (strictly decoded, as json decodes the
 * whole payload), escapes as json's scanstring reads them; control characters bail (strict). */
static PyObject *known_key(const unsigned char *p, Py_ssize_t n)
{
    for (int i = 0; KNOWN_KEYS[i].text != NULL; i++)
        if ((Py_ssize_t)strlen(KNOWN_KEYS[i].text) == n && memcmp(KNOWN_KEYS[i].text, p, n) == 0)
            return Py_NewRef(*KNOWN_KEYS[i].name);
    return NULL;
}

static PyObject *parse_string(reader *r, int key)
{
    const unsigned char *start = r->p;
    unsigned char high = 0;
    for (;;) { /* to the closing quote, a backslash or a control character */
        r->p += plain_prefix(r->p, r->end - r->p, 1);
        if (r->p >= r->end || *r->p < 0x80)
            break;
        high = 0x80;
        r->p++;
    }
    if (r->p >= r->end || *r->p < 0x20)
        return NULL;
    if (*r->p == '"') {
        Py_ssize_t n = r->p++ - start;
        if (!(high & 0x80)) {
            PyObject *s = key && n <= 16 ? known_key(start, n) : NULL;
            if (s != NULL)
                return s; /* interned: no allocation, its hash kept */
            s = PyUnicode_New(n, 127);
            if (s != NULL)
                memcpy(PyUnicode_1BYTE_DATA(s), start, n);
            return s;
        }
        return PyUnicode_DecodeUTF8((const char *)start, n, "strict");
    }
    /* escapes: unescape into UTF-8, then decode it all strictly */
    Py_ssize_t cap = (r->end - start), len = r->p - start; /* unescaped text is never longer */
    char *buf = PyMem_Malloc(cap ? cap : 1);
    PyObject *out = NULL;
    if (buf == NULL)
        return PyErr_NoMemory();
    memcpy(buf, start, len);
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = *r->p;
        if (c < 0x20)
            goto done;
        if (c != '\\') {
            buf[len++] = (char)c, r->p++;
            continue;
        }
        if (r->end - r->p < 2)
            goto done;
        c = r->p[1];
        r->p += 2;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            buf[len++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        Py_UCS4 u, low;
        if (c != 'u' || r->end - r->p < 4 || !hex4(r->p, &u))
            goto done;
        r->p += 4;
        if (u >= 0xd800 && u <= 0xdbff && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u' &&
            hex4(r->p + 2, &low) && low >= 0xdc00 && low <= 0xdfff) {
            u = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00); /* a surrogate pair, as json joins it */
            r->p += 6;
        } else if (u >= 0xd800 && u <= 0xdfff) {
            goto done; /* a lone surrogate: json keeps it; UTF-8 cannot carry it */
        }
        /* at most 4 bytes of UTF-8 for 6 or 12 bytes of escape */
        if (u < 0x80) {
            buf[len++] = (char)u;
        } else if (u < 0x800) {
            buf[len++] = (char)(0xc0 | u >> 6), buf[len++] = (char)(0x80 | (u & 0x3f));
        } else if (u < 0x10000) {
            buf[len++] = (char)(0xe0 | u >> 12), buf[len++] = (char)(0x80 | ((u >> 6) & 0x3f));
            buf[len++] = (char)(0x80 | (u & 0x3f));
        } else {
            buf[len++] = (char)(0xf0 | u >> 18), buf[len++] = (char)(0x80 | ((u >> 12) & 0x3f));
            buf[len++] = (char)(0x80 | ((u >> 6) & 0x3f)), buf[len++] = (char)(0x80 | (u & 0x3f));
        }
    }
    if (r->p < r->end) {
        r->p++;
        out = PyUnicode_DecodeUTF8(buf, len, "strict");
    }
done:
    PyMem_Free(buf);
    return out;
}

static int is_digit(const reader *r, const unsigned char *p)
{
    return p < r->end && *p >= '0' && *p <= '9';
}

/* A number as json's scanner matches it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, an int
 * unless it has a fraction or an exponent. */
static PyObject *parse_number(reader *r)
{
    const unsigned char *start = r->p, *p = r->p;
    int is_float = 0;
    if (p < r->end && *p == '-')
        p++;
    if (!is_digit(r, p))
        return NULL;
    if (*p++ != '0')
        while (is_digit(r, p))
            p++;
    if (p < r->end && *p == '.' && is_digit(r, p + 1)) {
        is_float = 1;
        p += 2;
        while (is_digit(r, p))
            p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        const unsigned char *e = p + 1;
        if (e < r->end && (*e == '-' || *e == '+'))
            e++;
        if (is_digit(r, e)) {
            is_float = 1;
            while (is_digit(r, e))
                e++;
            p = e;
        }
    }
    char text[64];
    if (p - start >= (Py_ssize_t)sizeof text)
        return NULL; /* a long number: json's own conversion decides */
    memcpy(text, start, p - start);
    text[p - start] = '\0';
    r->p = p;
    if (is_float) {
        double d = PyOS_string_to_double(text, NULL, NULL); /* what float(text) gives */
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    return PyLong_FromString(text, NULL, 10);
}

static PyObject *parse_value(reader *r);

static PyObject *parse_items(reader *r, int object)
{
    PyObject *out = object ? PyDict_New() : PyList_New(0);
    if (out == NULL || ++r->depth > MAX_DEPTH)
        goto failed;
    r->p++;
    skip_space(r);
    if (r->p < r->end && *r->p == (object ? '}' : ']')) {
        r->p++, r->depth--;
        return out;
    }
    for (;;) {
        PyObject *key = NULL, *value;
        if (object) {
            if (r->p >= r->end || *r->p != '"')
                goto failed;
            r->p++;
            if ((key = parse_string(r, 1)) == NULL)
                goto failed;
            skip_space(r);
            if (r->p >= r->end || *r->p != ':') {
                Py_DECREF(key);
                goto failed;
            }
            r->p++;
            skip_space(r);
        }
        value = parse_value(r);
        int failed = value == NULL || (object ? PyDict_SetItem(out, key, value) : PyList_Append(out, value)) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed)
            goto failed;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            skip_space(r);
            continue;
        }
        if (r->p < r->end && *r->p == (object ? '}' : ']')) {
            r->p++, r->depth--;
            return out;
        }
        goto failed;
    }
failed:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *parse_value(reader *r)
{
    if (r->p >= r->end)
        return NULL;
    switch (*r->p) {
    case '{':
        return parse_items(r, 1);
    case '[':
        return parse_items(r, 0);
    case '"':
        r->p++;
        return parse_string(r, 0);
    case 't':
        return literal(r, "true") ? Py_NewRef(Py_True) : NULL;
    case 'f':
        return literal(r, "false") ? Py_NewRef(Py_False) : NULL;
    case 'n':
        return literal(r, "null") ? Py_NewRef(Py_None) : NULL;
    case 'N':
        return literal(r, "NaN") ? PyFloat_FromDouble(Py_NAN) : NULL; /* json reads these three */
    case 'I':
        return literal(r, "Infinity") ? PyFloat_FromDouble(Py_HUGE_VAL) : NULL;
    case '-':
        if (literal(r, "-Infinity"))
            return PyFloat_FromDouble(-Py_HUGE_VAL);
        return parse_number(r);
    default:
        return parse_number(r);
    }
}

/* The payload's JSON value, or NULL (bail; an error may be set) */
static PyObject *parse_json(PyObject *data)
{
    reader r = {(const unsigned char *)PyBytes_AS_STRING(data),
                (const unsigned char *)PyBytes_AS_STRING(data) + PyBytes_GET_SIZE(data), 0};
    skip_space(&r);
    PyObject *value = parse_value(&r);
    if (value == NULL)
        return NULL;
    skip_space(&r);
    if (r.p != r.end)
        Py_CLEAR(value);
    return value;
}

/* ------------------------------------------------------------------ the JSON payload's fields */
enum kind { ANY, STR, BOOL, COUNT };
typedef struct {
    PyObject **name;
    enum kind kind;
    const char *missing; /* the detail when it is absent or of the wrong kind */
} field_rule;

#define RULE(type, field, kind, quoted) {&field, kind, "a " #type " payload needs '" quoted "'"}
static const field_rule RULES_MESSAGE[] = {RULE(MESSAGE, str_data, ANY, "data"), {NULL, ANY, NULL}};
static const field_rule RULES_REQUEST[] = {
    RULE(SPC_REQUEST, str_request_id, STR, "requestId"), RULE(SPC_REQUEST, str_service, STR, "service"),
    RULE(SPC_REQUEST, str_arguments, ANY, "arguments"), RULE(SPC_REQUEST, str_caller_node, STR, "callerNode"),
    {NULL, ANY, NULL}};
static const field_rule RULES_RESPONSE[] = {RULE(SPC_RESPONSE, str_request_id, STR, "requestId"),
                                            RULE(SPC_RESPONSE, str_status, STR, "status"), {NULL, ANY, NULL}};
static const field_rule RULES_EVENT[] = {RULE(EVENT, str_event, STR, "event"), {NULL, ANY, NULL}};
static const field_rule RULES_HEARTBEAT[] = {RULE(HEARTBEAT, str_reply, BOOL, "reply"), {NULL, ANY, NULL}};
static const field_rule RULES_ERROR[] = {RULE(ERROR, str_error_code, STR, "errorCode"),
                                         RULE(ERROR, str_error_message, STR, "errorMessage"), {NULL, ANY, NULL}};
static const field_rule RULES_ACK[] = {RULE(ACK, str_ack_seq, COUNT, "ackSeq"), {NULL, ANY, NULL}};
static const field_rule RULES_NONE[] = {{NULL, ANY, NULL}};
/* by envelope type 1..8 (DISCOVERY needs nothing beyond from and to) */
static const field_rule *const RULES[9] = {NULL, RULES_MESSAGE, RULES_REQUEST, RULES_RESPONSE, RULES_EVENT,
                                           RULES_NONE, RULES_HEARTBEAT, RULES_ERROR, RULES_ACK};

/* -1 error, 0 no, 1 yes: the value is of the kind (COUNT: an int, not a bool, >= 0) */
static int of_kind(PyObject *value, enum kind kind)
{
    switch (kind) {
    case STR:
        return PyUnicode_Check(value);
    case BOOL:
        return PyBool_Check(value);
    case COUNT:
        if (!PyLong_Check(value) || PyBool_Check(value))
            return 0;
        return PyObject_RichCompareBool(value, zero, Py_GE);
    default:
        return 1;
    }
}

static PyObject *bad_payload(const char *detail)
{
    reject("bad_payload", PyUnicode_FromString(detail));
    return NULL;
}

/* decode_payload(data, etype): the payload object of an envelope of that type, its fields checked
 * (wire contract section 5.2). */
static PyObject *decode_payload(PyObject *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int overflow = 0;
    long etype = 0;
    if (nargs != 2 || kwnames != NULL || !ready(B_ENVELOPE_ERROR, B_ERROR_CODES) || !PyBytes_CheckExact(args[0]) ||
        !PyLong_Check(args[1]))
        return twin(B_PURE_DECODE_PAYLOAD, args, nargsf, kwnames);
    etype = PyLong_AsLongAndOverflow(args[1], &overflow);
    if (etype == -1 && PyErr_Occurred())
        return NULL;
    PyObject *obj = parse_json(args[0]);
    if (obj == NULL) { /* not the common case: json itself decides (value or bad_payload) */
        PyErr_Clear();
        return twin(B_PURE_DECODE_PAYLOAD, args, nargsf, kwnames);
    }
    if (!PyDict_Check(obj)) {
        Py_DECREF(obj);
        return bad_payload("the payload is not a JSON object");
    }
    PyObject *from = PyDict_GetItemWithError(obj, str_from), *to;
    if (from == NULL || !PyUnicode_Check(from)) {
        Py_DECREF(obj);
        return PyErr_Occurred() ? NULL : bad_payload("the payload lacks a string 'from'");
    }
    to = PyDict_GetItemWithError(obj, str_to);
    if (to == NULL || !PyUnicode_Check(to)) {
        Py_DECREF(obj);
        return PyErr_Occurred() ? NULL : bad_payload("the payload lacks a string 'to'");
    }
    const field_rule *rule = !overflow && etype >= 1 && etype <= 8 ? RULES[etype] : RULES_NONE;
    for (; rule->name != NULL; rule++) {
        PyObject *value = PyDict_GetItemWithError(obj, *rule->name);
        int ok = value == NULL ? (PyErr_Occurred() ? -1 : 0) : of_kind(value, rule->kind);
        if (ok <= 0) {
            Py_DECREF(obj);
            return ok < 0 ? NULL : bad_payload(rule->missing);
        }
    }
    if (!overflow && etype == 3) { /* the status is a string (the rules above) */
        PyObject *status = PyDict_GetItemWithError(obj, str_status);
        const char *detail;
        int is_error = PyObject_RichCompareBool(status, str_error, Py_EQ), bad;
        if (is_error < 0)
            goto failed;
        if (is_error) {
            PyObject *code = PyDict_GetItemWithError(obj, str_error_code), *message;
            if (code == NULL && PyErr_Occurred())
                goto failed;
            int known = PySequence_Contains(bound[B_ERROR_CODES], code ? code : Py_None);
            if (known < 0 || ((message = PyDict_GetItemWithError(obj, str_error_message)) == NULL && PyErr_Occurred()))
                goto failed;
            bad = !known || (message != NULL && !PyUnicode_Check(message));
            detail = "an ERROR response needs a standard errorCode";
        } else {
            int success = PyObject_RichCompareBool(status, str_success, Py_EQ);
            int has_result = success > 0 ? PyDict_Contains(obj, str_result) : 0;
            if (success < 0 || has_result < 0)
                goto failed;
            bad = !success || !has_result;
            detail = "a response is SUCCESS with a result or ERROR with a code";
        }
        if (bad) {
            Py_DECREF(obj);
            return bad_payload(detail);
        }
    }
    if (!overflow && etype == 2) {
        int differs = PyObject_RichCompareBool(PyDict_GetItemWithError(obj, str_caller_node), from, Py_NE);
        if (differs < 0)
            goto failed;
        if (differs) {
            Py_DECREF(obj);
            return bad_payload("callerNode differs from the sender");
        }
    }
    return obj;
failed:
    Py_DECREF(obj);
    return NULL;
}

/* ------------------------------------------------------------------ the module */
/* ------------------------------------------------------------------ three system calls of the hot path
 * What transport.py and fsutil.py made through ctypes, whose call costs ten times the system call's
 * own user-space work. Each returns 0 or the errno (the write: the bytes written or -errno), so the
 * Python side keeps its error handling as it was. */

static int int_arg(PyObject *v, int *out)
{
    *out = _PyLong_AsInt(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* `want` arguments, a descriptor (into *fd) then bytes; else -1 with a TypeError naming `usage` */
static int fd_and_bytes(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage, int *fd)
{
    if (nargs != want || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    return int_arg(args[0], fd);
}

/* rename_noreplace(src_fd, name, dst_fd): renameat2(src_fd, name, dst_fd, name, RENAME_NOREPLACE),
 * without the GIL (a directory on a disk may wait for it); ENOSYS where the kernel lacks it. */
static PyObject *rename_noreplace(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int src, dst;
    if (fd_and_bytes(args, nargs, 3, "rename_noreplace(src_fd, name: bytes, dst_fd)", &src) < 0 ||
        int_arg(args[2], &dst) < 0)
        return NULL;
    const char *name = PyBytes_AS_STRING(args[1]);
    long done;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
#ifdef SYS_renameat2
    done = syscall(SYS_renameat2, src, name, dst, name, 1 /* RENAME_NOREPLACE */);
#else
    done = -1, errno = ENOSYS;
#endif
    if (done != 0)
        err = errno;
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

/* unlinkat_keeping_gil(dir_fd, name): unlinkat(dir_fd, name, 0) with the GIL kept (fsutil.py says why). */
static PyObject *unlinkat_keeping_gil(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int dir;
    if (fd_and_bytes(args, nargs, 2, "unlinkat_keeping_gil(dir_fd, name: bytes)", &dir) < 0)
        return NULL;
    return PyLong_FromLong(unlinkat(dir, PyBytes_AS_STRING(args[1]), 0) == 0 ? 0 : errno);
}

/* write_keeping_gil(fd, data): write(2) with the GIL kept, for a descriptor that never blocks. */
static PyObject *write_keeping_gil(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int fd;
    if (fd_and_bytes(args, nargs, 2, "write_keeping_gil(fd, data: bytes)", &fd) < 0)
        return NULL;
    ssize_t written = write(fd, PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1]));
    return PyLong_FromSsize_t(written < 0 ? -(Py_ssize_t)errno : written);
}

/* file_stamp(path): (st_ino, st_mtime_ns, st_size) of lstat(path), None when it fails: registry.py's
 * stamp of an entry file, taken twice a send (the entry judged current before the seal, unchanged
 * after the delivery), where os.stat's result object cost six times the system call's user-space work. */
static PyObject *file_stamp(PyObject *self, PyObject *arg)
{
    PyObject *raw = NULL;
    if (!PyUnicode_FSConverter(arg, &raw))
        return NULL;
    struct stat st;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = lstat(PyBytes_AS_STRING(raw), &st);
    Py_END_ALLOW_THREADS
    Py_DECREF(raw);
    if (failed)
        Py_RETURN_NONE;
    PyObject *mtime_ns;
    long long sec = (long long)st.st_mtim.tv_sec;
    if (sec > -9000000000LL && sec < 9000000000LL) {
        mtime_ns = PyLong_FromLongLong(sec * 1000000000LL + st.st_mtim.tv_nsec);
    } else { /* beyond 64 bits in nanoseconds: as os.stat does it, in Python integers */
        PyObject *s = PyLong_FromLongLong(sec), *billion = PyLong_FromLong(1000000000L),
                 *ns = PyLong_FromLong(st.st_mtim.tv_nsec), *product = NULL;
        mtime_ns = NULL;
        if (s && billion && ns && (product = PyNumber_Multiply(s, billion)) != NULL)
            mtime_ns = PyNumber_Add(product, ns);
        Py_XDECREF(s), Py_XDECREF(billion), Py_XDECREF(ns), Py_XDECREF(product);
    }
    if (mtime_ns == NULL)
        return NULL;
    PyObject *ino = PyLong_FromUnsignedLongLong((unsigned long long)st.st_ino),
             *size = PyLong_FromLongLong((long long)st.st_size);
    if (ino == NULL || size == NULL) {
        Py_XDECREF(ino), Py_XDECREF(size), Py_DECREF(mtime_ns);
        return NULL;
    }
    PyObject *stamp = PyTuple_Pack(3, ino, mtime_ns, size);
    Py_DECREF(ino), Py_DECREF(mtime_ns), Py_DECREF(size);
    return stamp;
}

static PyMethodDef METHODS[] = {
    {"bind", bind, METH_VARARGS, "bind(name, object): a type, error or pure twin the functions use"},
    {"parse_filename", (PyCFunction)(void (*)(void))parse_filename, METH_FASTCALL | METH_KEYWORDS,
     "The parts of an inbox file name, or None (core.envelope.parse_filename)."},
    {"seal", (PyCFunction)(void (*)(void))seal, METH_FASTCALL | METH_KEYWORDS,
     "Seal a payload under a header (core.envelope.seal)."},
    {"open_envelope", (PyCFunction)(void (*)(void))open_envelope, METH_FASTCALL | METH_KEYWORDS,
     "Judge and decrypt one envelope file's bytes (core.envelope.open_envelope)."},
    {"encrypt", (PyCFunction)(void (*)(void))encrypt, METH_FASTCALL | METH_KEYWORDS,
     "ChaCha20-Poly1305 (IETF) encryption (core.aead.encrypt)."},
    {"decrypt", (PyCFunction)(void (*)(void))decrypt, METH_FASTCALL | METH_KEYWORDS,
     "ChaCha20-Poly1305 (IETF) decryption, None when the tag does not verify (core.aead.decrypt)."},
    {"decode_payload", (PyCFunction)(void (*)(void))decode_payload, METH_FASTCALL | METH_KEYWORDS,
     "Parse and check a payload (core.payloads.decode_payload)."},
    {"encode_payload", (PyCFunction)(void (*)(void))encode_payload, METH_FASTCALL | METH_KEYWORDS,
     "A payload's JSON text in UTF-8 (core.payloads.encode_payload)."},
    {"envelope_line", (PyCFunction)(void (*)(void))envelope_line, METH_FASTCALL | METH_KEYWORDS,
     "The journal line of an EnvelopeTrace (core.records.encode_line)."},
    {"rename_noreplace", (PyCFunction)(void (*)(void))rename_noreplace, METH_FASTCALL,
     "renameat2(src_fd, name, dst_fd, name, RENAME_NOREPLACE) without the GIL: 0 or the errno."},
    {"unlinkat_keeping_gil", (PyCFunction)(void (*)(void))unlinkat_keeping_gil, METH_FASTCALL,
     "unlinkat(dir_fd, name, 0) keeping the GIL: 0 or the errno."},
    {"write_keeping_gil", (PyCFunction)(void (*)(void))write_keeping_gil, METH_FASTCALL,
     "write(fd, data) keeping the GIL: the bytes written, or -errno."},
    {"file_stamp", file_stamp, METH_O, "(st_ino, st_mtime_ns, st_size) of lstat(path), or None (registry.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_compiled",
                                    "The compiled form of the per-envelope work (see core/accel.py).", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

static int intern(PyObject **slot, const char *text)
{
    *slot = PyUnicode_InternFromString(text);
    return *slot != NULL;
}

PyMODINIT_FUNC PyInit__compiled(void)
{
    /* sodium_init() picks the fastest implementations this CPU has; idempotent */
    if (sodium_init() < 0) {
        PyErr_SetString(PyExc_ImportError, "libsodium could not be initialised");
        return NULL;
    }
    if (!intern(&str_raw, "raw") || !intern(&str_error, "ERROR") || !intern(&str_success, "SUCCESS") ||
        !intern(&str_from, "from") || !intern(&str_to, "to") || !intern(&str_result, "result") ||
        !intern(&str_status, "status") || !intern(&str_error_code, "errorCode") ||
        !intern(&str_error_message, "errorMessage") || !intern(&str_caller_node, "callerNode") ||
        !intern(&str_data, "data") || !intern(&str_request_id, "requestId") || !intern(&str_service, "service") ||
        !intern(&str_arguments, "arguments") || !intern(&str_event, "event") || !intern(&str_reply, "reply") ||
        !intern(&str_ack_seq, "ackSeq") || !intern(&str_timeout_ms, "timeoutMs") ||
        !intern(&str_encoding, "encoding") || (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    init_escapes();
    return PyModule_Create(&MODULE);
}
