/* json.h - a minimal JSON DOM: parser (RFC 8259, UTF-8), builder and compact serializer.
 *
 * Numbers keep the exact text they were parsed from, so that data is re-emitted as received;
 * numbers built from doubles are formatted like Python's repr() (shortest round-trip). */
#ifndef SPEED_JSON_H
#define SPEED_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval jval;
struct jval {
    jtype type;
    int boolean;        /* J_BOOL */
    double num;         /* J_NUM: value */
    char *numtext;      /* J_NUM: JSON text of the number */
    char *str;          /* J_STR: UTF-8, NUL-terminated (may contain NUL: use len) */
    size_t len;         /* J_STR: byte length */
    size_t n, cap;      /* J_ARR / J_OBJ: element count */
    jval **items;       /* J_ARR / J_OBJ: values */
    char **keys;        /* J_OBJ: keys, NUL-terminated */
    size_t *keylens;    /* J_OBJ: key byte lengths */
};

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

void buf_append(buf_t *b, const void *data, size_t n);
void buf_puts(buf_t *b, const char *s);

/* Parses exactly one JSON value (surrounding whitespace allowed). NULL on error, with a
 * message in err. Invalid UTF-8, lone surrogates and nesting deeper than 64 are errors. */
jval *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(jval *v);

/* Object lookup (the last duplicate wins, as in most parsers). */
jval *json_get(const jval *obj, const char *key);
/* The string value of key, or NULL if absent or not a string (or containing NUL). */
const char *json_get_str(const jval *obj, const char *key);
/* A payload's integer: a number written without fraction, exponent or sign ("-0" is 0), in
 * range of uint64_t. 0 on success. */
int json_get_u64(const jval *obj, const char *key, uint64_t *out);
int json_num_u64(const jval *v, uint64_t *out);
/* A registry entry's number (docs/PROTOCOL.md section 9 "Numbers"): its value, whatever the
 * spelling, when finite as a double (1e400 counts as missing); an integer when that value is
 * integral (64, 64.0 and 6.4e1 alike). 0 on success. */
int json_entry_number(const jval *v, double *out);
int json_entry_integer(const jval *v, double *out);

jval *json_null(void);
jval *json_bool(int b);
jval *json_num(double d);
jval *json_int(int64_t i);
jval *json_str(const char *s);
jval *json_strn(const char *s, size_t n);
jval *json_arr(void);
jval *json_obj(void);
void json_push(jval *arr, jval *v);
/* Appends key: v (takes ownership of v). Returns obj for chaining. */
jval *json_set(jval *obj, const char *key, jval *v);
jval *json_clone(const jval *v);

/* Compact serialization; non-ASCII is written as raw UTF-8. */
void json_write(buf_t *b, const jval *v);
/* malloc'd NUL-terminated compact text. */
char *json_dump(const jval *v, size_t *len);
void json_write_string(buf_t *b, const char *s, size_t n);

/* Python-repr-like formatting of a finite double into out (at least 32 bytes). */
void format_double(double d, char *out, size_t outlen);

#endif
