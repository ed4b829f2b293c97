/* json.c - see json.h */
#include "json.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

void buf_append(buf_t *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void buf_puts(buf_t *b, const char *s) { buf_append(b, s, strlen(s)); }

/* ---------- construction ---------- */

static jval *jnew(jtype t)
{
    jval *v = xmalloc(sizeof *v);
    memset(v, 0, sizeof *v);
    v->type = t;
    return v;
}

jval *json_null(void) { return jnew(J_NULL); }

jval *json_bool(int b)
{
    jval *v = jnew(J_BOOL);
    v->boolean = b != 0;
    return v;
}

jval *json_num(double d)
{
    jval *v = jnew(J_NUM);
    char buf[64];
    format_double(d, buf, sizeof buf);
    v->num = d;
    v->numtext = xstrdup(buf);
    return v;
}

jval *json_int(int64_t i)
{
    jval *v = jnew(J_NUM);
    v->num = (double)i;
    v->numtext = xasprintf("%lld", (long long)i);
    return v;
}

jval *json_strn(const char *s, size_t n)
{
    jval *v = jnew(J_STR);
    v->str = xmalloc(n + 1);
    memcpy(v->str, s, n);
    v->str[n] = '\0';
    v->len = n;
    return v;
}

jval *json_str(const char *s) { return json_strn(s, strlen(s)); }
jval *json_arr(void) { return jnew(J_ARR); }
jval *json_obj(void) { return jnew(J_OBJ); }

static void grow(jval *c)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 4;
        c->items = xrealloc(c->items, c->cap * sizeof *c->items);
        if (c->type == J_OBJ) {
            c->keys = xrealloc(c->keys, c->cap * sizeof *c->keys);
            c->keylens = xrealloc(c->keylens, c->cap * sizeof *c->keylens);
        }
    }
}

void json_push(jval *arr, jval *v)
{
    grow(arr);
    arr->items[arr->n++] = v;
}

static void obj_setn(jval *obj, const char *key, size_t klen, jval *v)
{
    grow(obj);
    obj->keys[obj->n] = xmalloc(klen + 1);
    memcpy(obj->keys[obj->n], key, klen);
    obj->keys[obj->n][klen] = '\0';
    obj->keylens[obj->n] = klen;
    obj->items[obj->n++] = v;
}

jval *json_set(jval *obj, const char *key, jval *v)
{
    obj_setn(obj, key, strlen(key), v);
    return obj;
}

jval *json_clone(const jval *v)
{
    jval *c = jnew(v->type);
    c->boolean = v->boolean;
    c->num = v->num;
    if (v->numtext)
        c->numtext = xstrdup(v->numtext);
    if (v->type == J_STR) {
        c->str = xmalloc(v->len + 1);
        memcpy(c->str, v->str, v->len + 1);
        c->len = v->len;
    }
    for (size_t i = 0; i < v->n; i++) {
        if (v->type == J_OBJ)
            obj_setn(c, v->keys[i], v->keylens[i], json_clone(v->items[i]));
        else
            json_push(c, json_clone(v->items[i]));
    }
    return c;
}

void json_free(jval *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(v->items[i]);
        if (v->type == J_OBJ)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->keylens);
    free(v->numtext);
    free(v->str);
    free(v);
}

/* ---------- lookup ---------- */

jval *json_get(const jval *obj, const char *key)
{
    if (!obj || obj->type != J_OBJ)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = obj->n; i-- > 0;)
        if (obj->keylens[i] == klen && memcmp(obj->keys[i], key, klen) == 0)
            return obj->items[i];
    return NULL;
}

const char *json_get_str(const jval *obj, const char *key)
{
    jval *v = json_get(obj, key);
    if (!v || v->type != J_STR || strlen(v->str) != v->len)
        return NULL;
    return v->str;
}

int json_num_u64(const jval *v, uint64_t *out)
{
    if (!v || v->type != J_NUM || !v->numtext)
        return -1;
    const char *t = v->numtext;
    if (strcmp(t, "-0") == 0) { /* JSON's minus zero is the integer 0 */
        *out = 0;
        return 0;
    }
    if (!*t || strspn(t, "0123456789") != strlen(t) || strlen(t) > 20)
        return -1;
    uint64_t x = 0;
    for (; *t; t++) {
        unsigned d = (unsigned)(*t - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *out = x;
    return 0;
}

int json_get_u64(const jval *obj, const char *key, uint64_t *out)
{
    return json_num_u64(json_get(obj, key), out);
}

int json_entry_number(const jval *v, double *out)
{
    if (!v || v->type != J_NUM || !isfinite(v->num))
        return -1;
    *out = v->num;
    return 0;
}

int json_entry_integer(const jval *v, double *out)
{
    return json_entry_number(v, out) == 0 && *out == floor(*out) ? 0 : -1;
}

/* ---------- number formatting ---------- */

void format_double(double d, char *out, size_t outlen)
{
    if (!isfinite(d)) { /* not representable in JSON; callers avoid this */
        snprintf(out, outlen, "null");
        return;
    }
    if (d == 0) {
        snprintf(out, outlen, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    /* shortest %e representation that round-trips */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* split "-d.ddde+XX" into sign, digits, exponent */
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp = atoi(p + 1);

    char body[64];
    size_t bl = 0;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            bl += (size_t)snprintf(body, sizeof body, "0.");
            for (int i = -1; i > exp; i--)
                body[bl++] = '0';
            memcpy(body + bl, digits, nd);
            bl += nd;
        } else {
            for (int i = 0; i <= exp; i++)
                body[bl++] = (size_t)i < nd ? digits[i] : '0';
            body[bl++] = '.';
            if ((size_t)exp + 1 < nd) {
                memcpy(body + bl, digits + exp + 1, nd - (size_t)exp - 1);
                bl += nd - (size_t)exp - 1;
            } else {
                body[bl++] = '0';
            }
        }
        body[bl] = '\0';
    } else {
        if (nd > 1)
            snprintf(body, sizeof body, "%c.%se%c%02d", digits[0], digits + 1,
                     exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        else
            snprintf(body, sizeof body, "%ce%c%02d", digits[0], exp < 0 ? '-' : '+',
                     exp < 0 ? -exp : exp);
    }
    snprintf(out, outlen, "%s%s", neg ? "-" : "", body);
}

/* ---------- serialization ---------- */

void json_write_string(buf_t *b, const char *s, size_t n)
{
    buf_append(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                esc = ubuf;
            }
        }
        if (esc) {
            buf_append(b, s + i - run, run);
            run = 0;
            buf_puts(b, esc);
        } else {
            run++;
        }
    }
    buf_append(b, s + n - run, run);
    buf_append(b, "\"", 1);
}

void json_write(buf_t *b, const jval *v)
{
    switch (v->type) {
    case J_NULL: buf_puts(b, "null"); break;
    case J_BOOL: buf_puts(b, v->boolean ? "true" : "false"); break;
    case J_NUM: buf_puts(b, v->numtext); break;
    case J_STR: json_write_string(b, v->str, v->len); break;
    case J_ARR:
        buf_puts(b, "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                buf_puts(b, ",");
            json_write(b, v->items[i]);
        }
        buf_puts(b, "]");
        break;
    case J_OBJ:
        buf_puts(b, "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                buf_puts(b, ",");
            json_write_string(b, v->keys[i], v->keylens[i]);
            buf_puts(b, ":");
            json_write(b, v->items[i]);
        }
        buf_puts(b, "}");
        break;
    }
}

char *json_dump(const jval *v, size_t *len)
{
    buf_t b = {0};
    json_write(&b, v);
    if (!b.p)
        buf_append(&b, "", 0);
    if (len)
        *len = b.len;
    return b.p;
}

/* ---------- parsing ---------- */

typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} parser;

static void fail(parser *p, const char *msg)
{
    if (!p->failed) {
        p->failed = 1;
        snprintf(p->err, p->errlen, "%s at byte %zu", msg, p->pos);
    }
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* Length of one valid UTF-8 sequence at s (n bytes available), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

static void put_utf8(buf_t *b, uint32_t cp)
{
    unsigned char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        o[0] = (unsigned char)(0xf0 | cp >> 18);
        o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    buf_append(b, o, n);
}

static int read_hex4(parser *p, uint32_t *out)
{
    if (p->pos + 4 > p->len) {
        fail(p, "truncated \\u escape");
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0) {
            fail(p, "bad \\u escape");
            return -1;
        }
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Parses a string starting at the opening quote into b. */
static int parse_string_into(parser *p, buf_t *b)
{
    p->pos++; /* opening quote */
    buf_append(b, "", 0);
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c < 0x20) {
            fail(p, "control character in string");
            return -1;
        }
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->len)
                break;
            char e = p->s[p->pos++];
            switch (e) {
            case '"': buf_append(b, "\"", 1); break;
            case '\\': buf_append(b, "\\", 1); break;
            case '/': buf_append(b, "/", 1); break;
            case 'b': buf_append(b, "\b", 1); break;
            case 'f': buf_append(b, "\f", 1); break;
            case 'n': buf_append(b, "\n", 1); break;
            case 'r': buf_append(b, "\r", 1); break;
            case 't': buf_append(b, "\t", 1); break;
            case 'u': {
                uint32_t cp;
                if (read_hex4(p, &cp))
                    return -1;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    uint32_t lo;
                    if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                        fail(p, "lone surrogate");
                        return -1;
                    }
                    p->pos += 2;
                    if (read_hex4(p, &lo))
                        return -1;
                    if (lo < 0xdc00 || lo > 0xdfff) {
                        fail(p, "lone surrogate");
                        return -1;
                    }
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    fail(p, "lone surrogate");
                    return -1;
                }
                put_utf8(b, cp);
                break;
            }
            default:
                fail(p, "bad escape");
                return -1;
            }
            continue;
        }
        size_t n = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos);
        if (!n) {
            fail(p, "invalid UTF-8");
            return -1;
        }
        buf_append(b, p->s + p->pos, n);
        p->pos += n;
    }
    fail(p, "unterminated string");
    return -1;
}

static jval *parse_value(parser *p, int depth);

static jval *parse_number(parser *p)
{
    size_t start = p->pos;
    const char *s = p->s;
    if (p->pos < p->len && s[p->pos] == '-')
        p->pos++;
    if (p->pos < p->len && s[p->pos] == '0') {
        p->pos++;
    } else if (p->pos < p->len && s[p->pos] >= '1' && s[p->pos] <= '9') {
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
            p->pos++;
    } else {
        fail(p, "bad number");
        return NULL;
    }
    if (p->pos < p->len && s[p->pos] == '.') {
        p->pos++;
        size_t d = p->pos;
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
            p->pos++;
        if (d == p->pos) {
            fail(p, "bad number");
            return NULL;
        }
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-'))
            p->pos++;
        size_t d = p->pos;
        while (p->pos < p->len && s[p->pos] >= '0' && s[p->pos] <= '9')
            p->pos++;
        if (d == p->pos) {
            fail(p, "bad number");
            return NULL;
        }
    }
    jval *v = jnew(J_NUM);
    size_t n = p->pos - start;
    v->numtext = xmalloc(n + 1);
    memcpy(v->numtext, s + start, n);
    v->numtext[n] = '\0';
    /* beyond a double's range strtod gives +-HUGE_VAL (infinity): the document is still valid JSON
     * (RFC 8259 leaves the range to implementations), and a reader of such a number treats it as
     * missing (json_entry_number; docs/PROTOCOL.md section 9 "Numbers") */
    v->num = strtod(v->numtext, NULL);
    return v;
}

static int match_lit(parser *p, const char *lit)
{
    size_t n = strlen(lit);
    if (p->len - p->pos >= n && memcmp(p->s + p->pos, lit, n) == 0) {
        p->pos += n;
        return 1;
    }
    return 0;
}

static jval *parse_value(parser *p, int depth)
{
    if (depth > MAX_DEPTH) {
        fail(p, "nesting too deep");
        return NULL;
    }
    skip_ws(p);
    if (p->pos >= p->len) {
        fail(p, "unexpected end");
        return NULL;
    }
    char c = p->s[p->pos];
    if (c == '{') {
        jval *o = json_obj();
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            return o;
        }
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                fail(p, "expected key");
                break;
            }
            buf_t key = {0};
            if (parse_string_into(p, &key)) {
                free(key.p);
                break;
            }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(key.p);
                fail(p, "expected ':'");
                break;
            }
            p->pos++;
            jval *v = parse_value(p, depth + 1);
            if (!v) {
                free(key.p);
                break;
            }
            obj_setn(o, key.p, key.len, v);
            free(key.p);
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == '}') {
                p->pos++;
                return o;
            }
            fail(p, "expected ',' or '}'");
            break;
        }
        json_free(o);
        return NULL;
    }
    if (c == '[') {
        jval *a = json_arr();
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            return a;
        }
        for (;;) {
            jval *v = parse_value(p, depth + 1);
            if (!v)
                break;
            json_push(a, v);
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == ']') {
                p->pos++;
                return a;
            }
            fail(p, "expected ',' or ']'");
            break;
        }
        json_free(a);
        return NULL;
    }
    if (c == '"') {
        buf_t b = {0};
        if (parse_string_into(p, &b)) {
            free(b.p);
            return NULL;
        }
        jval *v = jnew(J_STR);
        v->str = b.p;
        v->len = b.len;
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p);
    if (match_lit(p, "true"))
        return json_bool(1);
    if (match_lit(p, "false"))
        return json_bool(0);
    if (match_lit(p, "null"))
        return json_null();
    fail(p, "unexpected character");
    return NULL;
}

jval *json_parse(const char *text, size_t len, char *err, size_t errlen)
{
    static char dummy[4];
    parser p = {text, len, 0, err ? err : dummy, err ? errlen : sizeof dummy, 0};
    jval *v = parse_value(&p, 0);
    if (!v)
        return NULL;
    skip_ws(&p);
    if (p.pos != p.len) {
        fail(&p, "trailing data");
        json_free(v);
        return NULL;
    }
    return v;
}
