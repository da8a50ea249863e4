/* speclogs' reader of Python reprs (see reprs.py): the values SGLang prints with repr() — `server_args=ServerArgs(…)`,
 * `Receive: obj=GenerateReqInput(…)`, `out={'meta_info': {…}}` — read without compiling them.
 *
 * - split(body) → (items, end): the items of a repr's body split at top-level commas, exactly as reprs._split_raw
 *   does (quotes and brackets honoured; `end` is the index of the bracket that closed the body, None when the text
 *   ran out first).
 * - literal(text, default) → the value ast.literal_eval gives for `text`, for the forms it reads here: None, True,
 *   False, ints and floats in their plain decimal forms (an optional '-'), single- or double-quoted strings with the
 *   usual escapes, and lists, tuples and dicts of these with spaces between the tokens. Anything else (a set, a
 *   triple-quoted or prefixed string, an unusual escape, a tab, `inf`, a name, a syntax error) returns `default`:
 *   the caller then asks ast.literal_eval, so a value never depends on this reader. tests/test_reprs.py holds the
 *   two to the same values.
 * - request(body, default) → (request, tail): a `--log-requests` line's text after `Receive: obj=` / `Finish: obj=`,
 *   read as reprs.parse_request_repr reads it ("GenerateReqInput(rid='a', …), out={…}" → ({'__class__':
 *   'GenerateReqInput', 'rid': 'a', …}, {'out': {…}})), when literal() reads each of its values; `default` otherwise
 *   (a value only Python reads, a body that is not `Name(…`): the caller then reads the line in Python.
 *
 * An ordinary CPython extension module (speclogs.ingest._reprs), built with the package (setup.py) and optional:
 * without it reprs.py reads everything in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define MAX_DEPTH 100    /* deeper nesting: ast.literal_eval decides (it may refuse it) */
#define MAX_DIGITS 4000  /* longer ints: ast.literal_eval decides (Python limits int digits to 4300) */

/* ------------------------------------------------------------------------------------------------------------ */
/* split */

/* Index after the quote (of `qlen` characters `q`) that closes a string whose text starts at i; -1 when the text
 * ends first. A quote preceded by an odd number of backslashes (counted back to i) is escaped. */
static Py_ssize_t after_quoted(int kind, const void *data, Py_ssize_t n, Py_ssize_t i, Py_UCS4 q, int qlen) {
    while (i < n) {
        Py_ssize_t end = -1;
        for (Py_ssize_t j = i; j + qlen <= n; j++) {
            if (PyUnicode_READ(kind, data, j) == q &&
                (qlen == 1 || (PyUnicode_READ(kind, data, j + 1) == q && PyUnicode_READ(kind, data, j + 2) == q))) {
                end = j;
                break;
            }
        }
        if (end < 0) return -1;
        Py_ssize_t escapes = end;
        while (escapes > i && PyUnicode_READ(kind, data, escapes - 1) == '\\') escapes--;
        if ((end - escapes) % 2 == 0) return end + qlen;
        i = end + 1;
    }
    return -1;
}

static int append_item(PyObject *items, PyObject *body, Py_ssize_t start, Py_ssize_t end) {
    PyObject *item = PyUnicode_Substring(body, start, end);
    if (!item) return -1;
    int failed = PyList_Append(items, item);
    Py_DECREF(item);
    return failed;
}

/* (items, end) of a str, as reprs._split_raw gives them. */
static PyObject *split_body(PyObject *body) {
    int kind = PyUnicode_KIND(body);
    const void *data = PyUnicode_DATA(body);
    Py_ssize_t n = PyUnicode_GET_LENGTH(body);
    PyObject *items = PyList_New(0);
    if (!items) return NULL;
    Py_UCS4 *depth = NULL; /* the closers expected, innermost last */
    Py_ssize_t depth_n = 0, depth_cap = 0, start = 0, i = 0;
    while (i < n) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch == '\'' || ch == '"') {
            int qlen = (i + 2 < n && PyUnicode_READ(kind, data, i + 1) == ch && PyUnicode_READ(kind, data, i + 2) == ch) ? 3 : 1;
            i = after_quoted(kind, data, n, i + qlen, ch, qlen);
            if (i < 0) break; /* the text ran out inside a string */
            continue;
        }
        if (ch == '(' || ch == '[' || ch == '{') {
            if (depth_n == depth_cap) {
                depth_cap = depth_cap ? 2 * depth_cap : 16;
                Py_UCS4 *grown = PyMem_Realloc(depth, depth_cap * sizeof(Py_UCS4));
                if (!grown) {
                    PyErr_NoMemory();
                    goto fail;
                }
                depth = grown;
            }
            depth[depth_n++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (ch == ')' || ch == ']' || ch == '}') {
            if (!depth_n) {
                if (append_item(items, body, start, i) < 0) goto fail;
                PyMem_Free(depth);
                return Py_BuildValue("(Nn)", items, i);
            }
            if (depth[depth_n - 1] == ch) depth_n--;
        } else if (ch == ',' && !depth_n) {
            if (append_item(items, body, start, i) < 0) goto fail;
            start = i + 1;
        }
        i++;
    }
    if (append_item(items, body, start, n) < 0) goto fail;
    PyMem_Free(depth);
    return Py_BuildValue("(NO)", items, Py_None);
fail:
    PyMem_Free(depth);
    Py_DECREF(items);
    return NULL;
}

static PyObject *py_split(PyObject *module, PyObject *body) {
    if (!PyUnicode_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "split takes a str");
        return NULL;
    }
    return split_body(body);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* literal */

typedef struct {
    PyObject *text;
    int kind;
    const void *data;
    Py_ssize_t n, i;
    int unread; /* set when the text is outside what this reader takes (not an error: the caller asks Python) */
} reader_t;

static inline Py_UCS4 peek(reader_t *r, Py_ssize_t ahead) {
    return r->i + ahead < r->n ? PyUnicode_READ(r->kind, r->data, r->i + ahead) : 0;
}

static inline void skip_spaces(reader_t *r) {
    while (r->i < r->n && PyUnicode_READ(r->kind, r->data, r->i) == ' ') r->i++;
}

static inline int is_name_char(Py_UCS4 c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static inline int is_digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }

static PyObject *unread(reader_t *r) {
    r->unread = 1;
    return NULL;
}

static int hex_digits(reader_t *r, Py_ssize_t at, int count, Py_UCS4 *value) {
    Py_UCS4 v = 0;
    for (int k = 0; k < count; k++) {
        if (at + k >= r->n) return -1;
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, at + k);
        int d = (c >= '0' && c <= '9') ? (int)(c - '0') : (c >= 'a' && c <= 'f') ? (int)(c - 'a' + 10)
                : (c >= 'A' && c <= 'F') ? (int)(c - 'A' + 10) : -1;
        if (d < 0) return -1;
        v = v * 16 + (Py_UCS4)d;
    }
    *value = v;
    return 0;
}

/* A quoted string (not triple-quoted, no prefix): its characters up to the closing quote, escapes decoded. */
static PyObject *read_string(reader_t *r) {
    Py_UCS4 q = peek(r, 0);
    if (peek(r, 1) == q && peek(r, 2) == q) return unread(r); /* a triple-quoted string */
    Py_ssize_t start = r->i + 1, end = start;
    int escaped = 0;
    for (; end < r->n; end++) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, end);
        if (c == q) break;
        if (c == '\n' || c == '\r' || c == 0 || (c >= 0xD800 && c <= 0xDFFF)) return unread(r); /* Python refuses these */
        if (c == '\\') {
            escaped = 1;
            end++;
        }
    }
    if (end >= r->n) return unread(r);
    r->i = end + 1;
    if (!escaped) return PyUnicode_Substring(r->text, start, end);
    Py_UCS4 *out = PyMem_Malloc((size_t)(end - start) * sizeof(Py_UCS4) + 1);
    if (!out) return PyErr_NoMemory();
    Py_ssize_t o = 0;
    for (Py_ssize_t j = start; j < end; j++) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, j);
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        Py_UCS4 e = PyUnicode_READ(r->kind, r->data, ++j), v;
        switch (e) {
        case '\\': case '\'': case '"': out[o++] = e; break;
        case 'a': out[o++] = 7; break;
        case 'b': out[o++] = 8; break;
        case 'f': out[o++] = 12; break;
        case 'n': out[o++] = 10; break;
        case 'r': out[o++] = 13; break;
        case 't': out[o++] = 9; break;
        case 'v': out[o++] = 11; break;
        case 'x': case 'u': case 'U': {
            int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (j + count >= end || hex_digits(r, j + 1, count, &v) < 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                PyMem_Free(out); /* a short escape (Python: a syntax error), or a surrogate */
                return unread(r);
            }
            out[o++] = v;
            j += count;
            break;
        }
        default:
            if (e >= '0' && e <= '7') { /* up to three octal digits */
                v = e - '0';
                int k = 1;
                while (k < 3 && j + 1 < end && PyUnicode_READ(r->kind, r->data, j + 1) >= '0' &&
                       PyUnicode_READ(r->kind, r->data, j + 1) <= '7') {
                    v = v * 8 + (PyUnicode_READ(r->kind, r->data, ++j) - '0');
                    k++;
                }
                if (v > 0377) { /* Python warns about these: it decides */
                    PyMem_Free(out);
                    return unread(r);
                }
                out[o++] = v;
                break;
            }
            PyMem_Free(out); /* \N{…}, a line continuation, an unknown escape (kept with a warning by Python) */
            return unread(r);
        }
    }
    PyObject *value = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, o);
    PyMem_Free(out);
    return value;
}

/* An int or float in plain decimal form: 0 | [1-9][0-9]*, with an optional fraction and exponent, or .5 / 5. */
static PyObject *read_number(reader_t *r, int negative) {
    Py_ssize_t start = r->i, j = r->i;
    int is_float = 0;
    while (j < r->n && is_digit(PyUnicode_READ(r->kind, r->data, j))) j++;
    Py_ssize_t int_digits = j - start;
    if (j < r->n && PyUnicode_READ(r->kind, r->data, j) == '.') {
        is_float = 1;
        j++;
        Py_ssize_t frac = j;
        while (j < r->n && is_digit(PyUnicode_READ(r->kind, r->data, j))) j++;
        if (!int_digits && j == frac) return unread(r);
    } else if (!int_digits) {
        return unread(r);
    }
    if (j < r->n && (PyUnicode_READ(r->kind, r->data, j) == 'e' || PyUnicode_READ(r->kind, r->data, j) == 'E')) {
        is_float = 1;
        j++;
        if (j < r->n && (PyUnicode_READ(r->kind, r->data, j) == '+' || PyUnicode_READ(r->kind, r->data, j) == '-')) j++;
        Py_ssize_t exp = j;
        while (j < r->n && is_digit(PyUnicode_READ(r->kind, r->data, j))) j++;
        if (j == exp) return unread(r);
    }
    if (j < r->n && (is_name_char(PyUnicode_READ(r->kind, r->data, j)) || PyUnicode_READ(r->kind, r->data, j) == '.'))
        return unread(r); /* 1j, 1_000, 0x1f, 1.2.3 */
    if (!is_float && (int_digits > MAX_DIGITS || (int_digits > 1 && PyUnicode_READ(r->kind, r->data, start) == '0')))
        return unread(r); /* very long, or 007 / 00 */
    if (j - start > 400) return unread(r);
    char token[402];
    for (Py_ssize_t k = start; k < j; k++) token[k - start] = (char)PyUnicode_READ(r->kind, r->data, k);
    token[j - start] = 0;
    r->i = j;
    if (is_float) {
        double value = PyOS_string_to_double(token, NULL, NULL);
        if (value == -1.0 && PyErr_Occurred()) return NULL;
        return PyFloat_FromDouble(negative ? -value : value);
    }
    PyObject *value = PyLong_FromString(token, NULL, 10);
    if (!value || !negative) return value;
    PyObject *minus = PyNumber_Negative(value);
    Py_DECREF(value);
    return minus;
}

static PyObject *read_value(reader_t *r, int depth);

/* The items of a list, tuple or dict up to `close`: values separated by ', ' (a trailing comma allowed). */
static PyObject *read_container(reader_t *r, Py_UCS4 open, int depth) {
    Py_UCS4 close = open == '[' ? ']' : open == '(' ? ')' : '}';
    r->i++;
    skip_spaces(r);
    PyObject *out = open == '{' ? PyDict_New() : PyList_New(0);
    if (!out) return NULL;
    int commas = 0, items = 0;
    while (peek(r, 0) != close) {
        if (r->i >= r->n) goto give_up;
        PyObject *value = read_value(r, depth + 1);
        if (!value) goto fail;
        skip_spaces(r);
        if (open == '{') {
            if (peek(r, 0) != ':') { /* a set, or not a literal */
                Py_DECREF(value);
                goto give_up;
            }
            r->i++;
            skip_spaces(r);
            PyObject *item = read_value(r, depth + 1);
            if (!item) {
                Py_DECREF(value);
                goto fail;
            }
            int failed = PyDict_SetItem(out, value, item);
            Py_DECREF(value);
            Py_DECREF(item);
            if (failed < 0) { /* an unhashable key: Python says so */
                PyErr_Clear();
                goto give_up;
            }
            skip_spaces(r);
        } else {
            int failed = PyList_Append(out, value);
            Py_DECREF(value);
            if (failed < 0) goto fail;
        }
        items++;
        if (peek(r, 0) == ',') {
            commas++;
            r->i++;
            skip_spaces(r);
        } else if (peek(r, 0) != close) {
            goto give_up;
        }
    }
    r->i++;
    if (open != '(') return out;
    if (items == 1 && !commas) { /* (x) is x */
        PyObject *only = PyList_GET_ITEM(out, 0);
        Py_INCREF(only);
        Py_DECREF(out);
        return only;
    }
    PyObject *tuple = PyList_AsTuple(out);
    Py_DECREF(out);
    return tuple;
give_up:
    r->unread = 1;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *read_value(reader_t *r, int depth) {
    if (depth > MAX_DEPTH) return unread(r);
    Py_UCS4 c = peek(r, 0);
    if (c == '\'' || c == '"') return read_string(r);
    if (c == '[' || c == '(' || c == '{') return read_container(r, c, depth);
    if (c == '-') {
        Py_UCS4 next = peek(r, 1);
        if (!is_digit(next) && next != '.') return unread(r);
        r->i++;
        return read_number(r, 1);
    }
    if (is_digit(c) || c == '.') return read_number(r, 0);
    static const char *const words[] = {"None", "True", "False"};
    for (int w = 0; w < 3; w++) {
        Py_ssize_t len = (Py_ssize_t)strlen(words[w]), k = 0;
        while (k < len && peek(r, k) == (Py_UCS4)words[w][k]) k++;
        if (k == len && !is_name_char(peek(r, len))) {
            r->i += len;
            PyObject *value = w == 0 ? Py_None : w == 1 ? Py_True : Py_False;
            Py_INCREF(value);
            return value;
        }
    }
    return unread(r);
}

static PyObject *py_literal(PyObject *module, PyObject *args) {
    PyObject *text, *fallback;
    if (!PyArg_ParseTuple(args, "UO", &text, &fallback)) return NULL;
    reader_t r = {text, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), 0, 0};
    PyObject *value = r.n ? read_value(&r, 0) : NULL;
    if (value && r.i != r.n) { /* more after the value: 'a' 'b', 1 2, a trailing space … */
        Py_DECREF(value);
        value = NULL;
        r.unread = 1;
    }
    if (value) return value;
    if (PyErr_Occurred()) return NULL;
    Py_INCREF(fallback);
    return fallback;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* request */

/* The value literal() gives for `text`, as reprs._literal gives it (a float that is not finite: None); NULL with
 * no exception set when this reader leaves it to Python. */
static PyObject *literal_value(PyObject *text) {
    reader_t r = {text, PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text), 0, 0};
    PyObject *value = r.n ? read_value(&r, 0) : NULL;
    if (value && r.i != r.n) {
        Py_DECREF(value);
        return NULL;
    }
    if (value && PyFloat_CheckExact(value) && !isfinite(PyFloat_AS_DOUBLE(value))) {
        Py_DECREF(value);
        Py_RETURN_NONE;
    }
    return value;
}

/* [*start, *end) of text narrowed past the whitespace str.strip() removes. */
static void strip_range(PyObject *text, Py_ssize_t *start, Py_ssize_t *end) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    while (*start < *end && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, *start))) (*start)++;
    while (*end > *start && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, *end - 1))) (*end)--;
}

/* text[start:end].strip() (a new reference). */
static PyObject *stripped(PyObject *text, Py_ssize_t start, Py_ssize_t end) {
    strip_range(text, &start, &end);
    return PyUnicode_Substring(text, start, end);
}

/* Into `out`, the keyword items `name=value` of a body split at its top-level commas (`split`, split_body's): as
 * reprs._fields reads reprs._split_top_level's items (a truncated body's last item dropped, items that are not
 * `identifier=…` skipped, a repeated name's last value kept). The value is literal()'s, or with `as_text` its text
 * where literal() gives None for a text other than "None". Returns 1 when done, 0 when a value is one only Python
 * reads, -1 on an error. */
static int read_items(PyObject *split, PyObject *out, int as_text) {
    PyObject *items = PyTuple_GET_ITEM(split, 0);
    Py_ssize_t count = PyList_GET_SIZE(items) - (PyTuple_GET_ITEM(split, 1) == Py_None ? 1 : 0);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *item = PyList_GET_ITEM(items, k);
        Py_ssize_t n = PyUnicode_GET_LENGTH(item), eq = PyUnicode_FindChar(item, '=', 0, n, 1);
        if (eq == -2) return -1;
        if (eq < 0) continue; /* an empty item, or not a keyword item */
        PyObject *name = stripped(item, 0, eq);
        if (!name) return -1;
        if (!PyUnicode_IsIdentifier(name)) {
            Py_DECREF(name);
            continue;
        }
        PyObject *text = stripped(item, eq + 1, n), *value = text ? literal_value(text) : NULL;
        int done = value ? 1 : PyErr_Occurred() ? -1 : 0;
        if (value) {
            int keep_text = as_text && value == Py_None && PyUnicode_CompareWithASCIIString(text, "None") != 0;
            if (PyDict_SetItem(out, name, keep_text ? text : value) < 0) done = -1;
        }
        Py_DECREF(name);
        Py_XDECREF(text);
        Py_XDECREF(value);
        if (done <= 0) return done;
    }
    return 1;
}

/* The keyword items after a call repr's closing bracket ("…), out={…}"): body[from:] as reprs.parse_keyword_reprs
 * reads it (stripped, leading commas dropped, a ')' added to close it), into `tail`. */
static int read_tail(PyObject *body, Py_ssize_t from, PyObject *tail) {
    Py_ssize_t to = PyUnicode_GET_LENGTH(body);
    strip_range(body, &from, &to);
    while (from < to && PyUnicode_READ(PyUnicode_KIND(body), PyUnicode_DATA(body), from) == ',') from++;
    PyObject *cut = PyUnicode_Substring(body, from, to), *close = PyUnicode_FromOrdinal(')');
    PyObject *closed = cut && close ? PyUnicode_Concat(cut, close) : NULL;
    Py_XDECREF(cut);
    Py_XDECREF(close);
    PyObject *split = closed ? split_body(closed) : NULL;
    Py_XDECREF(closed);
    if (!split) return -1;
    int done = read_items(split, tail, 0);
    Py_DECREF(split);
    return done;
}

static PyObject *py_request(PyObject *module, PyObject *args) {
    PyObject *body, *fallback;
    if (!PyArg_ParseTuple(args, "UO", &body, &fallback)) return NULL;
    int kind = PyUnicode_KIND(body);
    const void *data = PyUnicode_DATA(body);
    Py_ssize_t n = PyUnicode_GET_LENGTH(body), start = 0;
    while (start < n && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, start))) start++;
    Py_ssize_t head = PyUnicode_FindChar(body, '(', start, n, 1);
    if (head == -2) return NULL;
    PyObject *name = NULL, *request = NULL, *tail = NULL, *inner = NULL, *split = NULL;
    int done = 0; /* 1 read, 0 left to Python, -1 an error */
    if (head <= start) goto finish; /* not `Name(` */
    if (!(name = PyUnicode_Substring(body, start, head))) goto error;
    if (!PyUnicode_IsIdentifier(name)) goto finish;
    if (!(request = PyDict_New()) || PyDict_SetItemString(request, "__class__", name) < 0) goto error;
    if (!(inner = PyUnicode_Substring(body, head + 1, n)) || !(split = split_body(inner))) goto error;
    if ((done = read_items(split, request, 1)) <= 0) goto finish;
    if (!(tail = PyDict_New())) goto error;
    PyObject *end = PyTuple_GET_ITEM(split, 1);
    if (end == Py_None) {
        done = 1; /* truncated inside the call: nothing after it */
    } else {
        Py_ssize_t closing = PyLong_AsSsize_t(end);
        if (closing == -1 && PyErr_Occurred()) goto error;
        done = read_tail(body, head + 1 + closing + 1, tail);
    }
    goto finish;
error:
    done = -1;
finish:
    Py_XDECREF(name);
    Py_XDECREF(inner);
    Py_XDECREF(split);
    if (done == 1) return Py_BuildValue("(NN)", request, tail);
    Py_XDECREF(request);
    Py_XDECREF(tail);
    if (done < 0) return NULL;
    Py_INCREF(fallback);
    return fallback;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* request_row: a text --log-requests line straight to its requests row */

/* JSON text as it is built: ASCII only (json's ensure_ascii). */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} json_t;

/* Room for n more bytes. */
static int reserve(json_t *j, Py_ssize_t n) {
    if (j->len + n <= j->cap) return 0;
    Py_ssize_t cap = j->cap ? 2 * j->cap : 256;
    while (cap < j->len + n) cap *= 2;
    char *grown = PyMem_Realloc(j->data, (size_t)cap);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    j->data = grown;
    j->cap = cap;
    return 0;
}

static int put(json_t *j, const char *text, Py_ssize_t n) {
    if (reserve(j, n) < 0) return -1;
    memcpy(j->data + j->len, text, (size_t)n);
    j->len += n;
    return 0;
}

static int put_str(json_t *j, const char *text) { return put(j, text, (Py_ssize_t)strlen(text)); }

/* text[start:end] as a JSON string, escaped as json.dumps escapes it (ensure_ascii: \\uXXXX in lower case, a pair of
 * them beyond U+FFFF). */
static int put_json_string(json_t *j, reader_t *r, Py_ssize_t start, Py_ssize_t end) {
    static const char hex[] = "0123456789abcdef";
    if (put(j, "\"", 1) < 0 || reserve(j, 12 * (end - start) + 1) < 0) return -1; /* room for the worst case */
    char *o = j->data + j->len;
    for (Py_ssize_t k = start; k < end; k++) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, k);
        if (c >= ' ' && c <= '~' && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; continue;
        case '\\': *o++ = '\\'; continue;
        case '\n': *o++ = 'n'; continue;
        case '\r': *o++ = 'r'; continue;
        case '\t': *o++ = 't'; continue;
        case '\b': *o++ = 'b'; continue;
        case '\f': *o++ = 'f'; continue;
        }
        Py_UCS4 units[2] = {c, 0};
        int n_units = 1;
        if (c > 0xFFFF) {
            units[0] = 0xD800 | ((c - 0x10000) >> 10);
            units[1] = 0xDC00 | ((c - 0x10000) & 0x3FF);
            n_units = 2;
        }
        for (int u = 0; u < n_units; u++) {
            if (u) *o++ = '\\';
            *o++ = 'u';
            for (int shift = 12; shift >= 0; shift -= 4) *o++ = hex[(units[u] >> shift) & 0xF];
        }
    }
    *o++ = '"';
    j->len = o - j->data;
    return 0;
}

/* A quoted string without escapes at r->i: 1 with its span [*start, *end), r->i after it; 0 for what the fast path
 * leaves (an escape, a triple quote, a character Python refuses in a string, no closing quote). */
static int plain_string(reader_t *r, Py_ssize_t *start, Py_ssize_t *end) {
    Py_UCS4 q = peek(r, 0);
    if (peek(r, 1) == q && peek(r, 2) == q) return 0;
    for (Py_ssize_t k = r->i + 1; k < r->n; k++) {
        Py_UCS4 c = PyUnicode_READ(r->kind, r->data, k);
        if (c == q) {
            *start = r->i + 1;
            *end = k;
            r->i = k + 1;
            return 1;
        }
        if (c == '\\' || c == '\n' || c == '\r' || c == 0 || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    }
    return 0;
}

/* Whether text[a:b] and text[c:d] are the same characters. */
static int same_span(reader_t *r, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d) {
    if (b - a != d - c) return 0;
    for (Py_ssize_t k = 0; k < b - a; k++)
        if (PyUnicode_READ(r->kind, r->data, a + k) != PyUnicode_READ(r->kind, r->data, c + k)) return 0;
    return 1;
}

#define FAST_KEYS 64 /* a dict with more keys: left to the object reader */

/* The literal at r->i written as the JSON json_text writes for the value Python reads from it: 1 done (r->i after
 * it), 0 when the fast path leaves it (anything but plain strings, decimal ints and finite floats, None/True/False,
 * and lists and dicts of these with string keys, each key once, spaces between the tokens), -1 on an error. */
static int fast_json(reader_t *r, json_t *j, int depth) {
    if (depth > MAX_DEPTH) return 0;
    Py_UCS4 c = peek(r, 0);
    if (c == '\'' || c == '"') {
        Py_ssize_t start, end;
        return plain_string(r, &start, &end) ? put_json_string(j, r, start, end) < 0 ? -1 : 1 : 0;
    }
    if (c == '[' || c == '{') {
        Py_UCS4 close = c == '[' ? ']' : '}';
        Py_ssize_t keys[2 * FAST_KEYS], n_keys = 0;
        r->i++;
        skip_spaces(r);
        if (put(j, c == '[' ? "[" : "{", 1) < 0) return -1;
        int first = 1;
        while (peek(r, 0) != close) {
            if (r->i >= r->n) return 0;
            if (!first && put(j, ", ", 2) < 0) return -1;
            first = 0;
            if (c == '{') {
                Py_ssize_t start, end;
                if ((peek(r, 0) != '\'' && peek(r, 0) != '"') || !plain_string(r, &start, &end) || n_keys == FAST_KEYS) return 0;
                for (Py_ssize_t k = 0; k < n_keys; k++)
                    if (same_span(r, keys[2 * k], keys[2 * k + 1], start, end)) return 0; /* a repeated key */
                keys[2 * n_keys] = start;
                keys[2 * n_keys + 1] = end;
                n_keys++;
                skip_spaces(r);
                if (peek(r, 0) != ':') return 0;
                r->i++;
                skip_spaces(r);
                if (put_json_string(j, r, start, end) < 0 || put(j, ": ", 2) < 0) return -1;
            }
            int done = fast_json(r, j, depth + 1);
            if (done <= 0) return done;
            skip_spaces(r);
            if (peek(r, 0) == ',') {
                r->i++;
                skip_spaces(r);
            } else if (peek(r, 0) != close) {
                return 0;
            }
        }
        r->i++;
        return put(j, c == '[' ? "]" : "}", 1) < 0 ? -1 : 1;
    }
    static const char *const words[] = {"None", "True", "False"}, *const json_words[] = {"null", "true", "false"};
    for (int w = 0; w < 3; w++) {
        Py_ssize_t len = (Py_ssize_t)strlen(words[w]), k = 0;
        while (k < len && peek(r, k) == (Py_UCS4)words[w][k]) k++;
        if (k == len && !is_name_char(peek(r, len))) {
            r->i += len;
            return put_str(j, json_words[w]) < 0 ? -1 : 1;
        }
    }
    /* a number: what read_number reads, an int written with its digits, a float as float.__repr__ writes it */
    Py_ssize_t start = r->i;
    int negative = c == '-';
    if (negative) r->i++;
    if (!is_digit(peek(r, 0)) && peek(r, 0) != '.') return 0;
    PyObject *value = read_number(r, negative);
    if (!value) {
        if (PyErr_Occurred()) return -1;
        r->unread = 0;
        return 0;
    }
    int done = 0;
    if (PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        if (isfinite(d)) {
            char *text = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            done = !text ? -1 : put_str(j, text) < 0 ? -1 : 1;
            PyMem_Free(text);
        }
    } else if (!(negative && r->i - start == 2 && peek(r, -1) == '0')) { /* (-0 is 0) */
        Py_ssize_t n = r->i - start;
        char *digits = PyMem_Malloc((size_t)n + 1);
        if (!digits) {
            Py_DECREF(value);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t k = 0; k < n; k++) digits[k] = (char)PyUnicode_READ(r->kind, r->data, start + k);
        done = put(j, digits, n) < 0 ? -1 : 1;
        PyMem_Free(digits);
    }
    Py_DECREF(value);
    return done;
}

/* The call repr at the start of `body` ("Name(field=value, …)") as the JSON of the dict reprs.parse_request_repr reads
 * from it ({"__class__": "Name", "field": value, …}), its rid when that is a plain string (*rid, a new reference, else
 * NULL; the caller releases it whatever this returns) and where it closed (*closed, the index of its ')'): 1, or 0
 * when the fast path leaves it (a value it does not take, a field named twice, a cut body, odd spacing), -1 on an
 * error. */
static int fast_request(PyObject *body, json_t *j, PyObject **rid, Py_ssize_t *closed) {
    reader_t r = {body, PyUnicode_KIND(body), PyUnicode_DATA(body), PyUnicode_GET_LENGTH(body), 0, 0};
    *rid = NULL;
    Py_ssize_t name_start = r.i;
    while (r.i < r.n && is_name_char(peek(&r, 0)) && peek(&r, 0) < 0x80) r.i++;
    if (r.i == name_start || is_digit(PyUnicode_READ(r.kind, r.data, name_start)) || peek(&r, 0) != '(') return 0;
    if (put_str(j, "{\"__class__\": ") < 0 || put_json_string(j, &r, name_start, r.i) < 0) return -1;
    r.i++;
    Py_ssize_t names[2 * FAST_KEYS], n_names = 0;
    skip_spaces(&r);
    while (peek(&r, 0) != ')') {
        Py_ssize_t start = r.i;
        while (r.i < r.n && is_name_char(peek(&r, 0)) && peek(&r, 0) < 0x80) r.i++;
        Py_ssize_t end = r.i;
        if (end == start || is_digit(PyUnicode_READ(r.kind, r.data, start)) || peek(&r, 0) != '=' || n_names == FAST_KEYS)
            return 0;
        for (Py_ssize_t k = 0; k < n_names; k++)
            if (same_span(&r, names[2 * k], names[2 * k + 1], start, end)) return 0;
        names[2 * n_names] = start;
        names[2 * n_names + 1] = end;
        n_names++;
        r.i++;
        if (put(j, ", ", 2) < 0 || put_json_string(j, &r, start, end) < 0 || put(j, ": ", 2) < 0) return -1;
        int is_rid = end - start == 3 && PyUnicode_READ(r.kind, r.data, start) == 'r' &&
                     PyUnicode_READ(r.kind, r.data, start + 1) == 'i' && PyUnicode_READ(r.kind, r.data, start + 2) == 'd';
        Py_ssize_t string_start, string_end;
        reader_t string = r;
        if (is_rid && (peek(&r, 0) == '\'' || peek(&r, 0) == '"') && plain_string(&string, &string_start, &string_end)) {
            Py_XDECREF(*rid); /* a plain string: its text is the rid */
            if (!(*rid = PyUnicode_Substring(body, string_start, string_end))) return -1;
        }
        int done = fast_json(&r, j, 0);
        if (done <= 0) return done;
        skip_spaces(&r);
        if (peek(&r, 0) == ',') {
            r.i++;
            skip_spaces(&r);
        } else if (peek(&r, 0) != ')') {
            return 0;
        }
    }
    *closed = r.i;
    return put(j, "}", 1) < 0 ? -1 : 1;
}

/* requests._int: an int as it is, a float with an integral value as an int, anything else (a bool too) None. A new
 * reference, or NULL with no exception for None. */
static PyObject *meta_int(PyObject *value) {
    if (PyBool_Check(value)) return NULL;
    if (PyLong_Check(value)) return Py_NewRef(value);
    if (PyFloat_Check(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        if (isfinite(d) && d == floor(d)) return PyLong_FromDouble(d);
    }
    return NULL;
}

/* requests._number: an int or a finite float as a float, anything else (a bool too) None. A new reference; NULL with
 * no exception for None, NULL with one for an int too large for a float (Python's math.isfinite raises then too). */
static PyObject *meta_number(PyObject *value) {
    if (PyBool_Check(value) || !(PyLong_Check(value) || PyFloat_Check(value))) return NULL;
    double d = PyLong_Check(value) ? PyLong_AsDouble(value) : PyFloat_AS_DOUBLE(value);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    return isfinite(d) ? PyFloat_FromDouble(d) : NULL;
}

/* row[column] = value (a new reference, stolen; NULL leaves the cell as it is). */
static void set_cell(PyObject *row, Py_ssize_t column, PyObject *value) {
    if (!value) return;
    PyObject *old = PyTuple_GET_ITEM(row, column);
    PyTuple_SET_ITEM(row, column, value);
    Py_DECREF(old);
}

enum { AT_SOURCE, AT_RID, AT_HEALTH, AT_REASON, AT_HISTOGRAM, AT_REQUEST, AT_EXTRA, N_AT };

/* The row requests.request_row makes of a text line's parts (`meta`, `rid` and `extra` as requests._parse_request_line
 * gives them, the request as its JSON text). A new tuple, or NULL on an error. */
static PyObject *row_of(PyObject *meta, PyObject *request_json, PyObject *rid, PyObject *extra, PyObject *meta_keys,
                        Py_ssize_t n_columns, const Py_ssize_t *at, PyObject *json_text, PyObject *prefix, PyObject *source_kind) {
    PyObject *row = PyTuple_New(n_columns), *rest = NULL;
    Py_ssize_t *ranks = PyMem_Malloc((size_t)n_columns * sizeof(Py_ssize_t));
    if (!row || !ranks) goto error;
    for (Py_ssize_t c = 0; c < n_columns; c++) {
        PyTuple_SET_ITEM(row, c, Py_NewRef(Py_None));
        ranks[c] = PY_SSIZE_T_MAX;
    }
    set_cell(row, at[AT_SOURCE], Py_NewRef(source_kind));
    set_cell(row, at[AT_REQUEST], Py_NewRef(request_json));
    if (!(rest = PyDict_Copy(meta))) goto error;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(meta, &pos, &key, &value)) { /* typed fields out of meta_info; the first of a column's keys wins */
        PyObject *typed = PyDict_GetItemWithError(meta_keys, key);
        if (!typed) {
            if (PyErr_Occurred()) goto error;
            continue;
        }
        if (!PyTuple_Check(typed) || PyTuple_GET_SIZE(typed) != 3) {
            PyErr_SetString(PyExc_ValueError, "meta_keys' values are (column, rank, is_int)");
            goto error;
        }
        Py_ssize_t column = PyLong_AsSsize_t(PyTuple_GET_ITEM(typed, 0)), rank = PyLong_AsSsize_t(PyTuple_GET_ITEM(typed, 1));
        if (PyErr_Occurred()) goto error;
        if (column < 0 || column >= n_columns) {
            PyErr_SetString(PyExc_ValueError, "a meta_info key's column is outside the row");
            goto error;
        }
        PyObject *read = PyObject_IsTrue(PyTuple_GET_ITEM(typed, 2)) ? meta_int(value) : meta_number(value);
        if (!read) {
            if (PyErr_Occurred()) goto error;
            continue; /* not a number: it stays in extra */
        }
        if (PyDict_DelItem(rest, key) < 0) {
            Py_DECREF(read);
            goto error;
        }
        if (rank < ranks[column]) {
            set_cell(row, column, read);
            ranks[column] = rank;
        } else {
            Py_DECREF(read);
        }
    }
    PyObject *histogram = PyDict_GetItemString(meta, "spec_accept_histogram");
    if (histogram && PyList_Check(histogram)) {
        PyObject *text = PyObject_CallOneArg(json_text, histogram);
        if (!text) goto error;
        set_cell(row, at[AT_HISTOGRAM], text);
        if (PyDict_DelItemString(rest, "spec_accept_histogram") < 0) goto error;
    }
    if (!PyUnicode_Check(rid)) {
        rid = PyDict_GetItemString(meta, "id");
        if (!rid) rid = Py_None;
    }
    if (PyUnicode_Check(rid)) {
        set_cell(row, at[AT_RID], Py_NewRef(rid));
        Py_ssize_t health = PyUnicode_Tailmatch(rid, prefix, 0, PY_SSIZE_T_MAX, -1);
        if (health < 0) goto error;
        set_cell(row, at[AT_HEALTH], PyBool_FromLong((long)health));
        PyObject *id = PyDict_GetItemString(rest, "id");
        if (id) {
            int same = PyObject_RichCompareBool(id, rid, Py_EQ);
            if (same < 0 || (same && PyDict_DelItemString(rest, "id") < 0)) goto error;
        }
    }
    PyObject *reason = PyDict_GetItemString(meta, "finish_reason");
    if (reason && PyDict_Check(reason)) {
        PyObject *type = PyDict_GetItemString(reason, "type");
        set_cell(row, at[AT_REASON], Py_NewRef(type ? type : Py_None));
    } else if (reason && PyUnicode_Check(reason)) {
        set_cell(row, at[AT_REASON], Py_NewRef(reason));
    }
    if (PyDict_Size(extra) && PyDict_Update(rest, extra) < 0) goto error;
    if (PyDict_Size(rest)) {
        PyObject *text = PyObject_CallOneArg(json_text, rest);
        if (!text) goto error;
        set_cell(row, at[AT_EXTRA], text);
    }
    Py_DECREF(rest);
    PyMem_Free(ranks);
    return row;
error:
    Py_XDECREF(row);
    Py_XDECREF(rest);
    PyMem_Free(ranks);
    return NULL;
}

/* request_row(message, finished, spec, default) → (row, pair_key): a text --log-requests line read straight to its
 * requests row (a tuple in requests.REQUEST_COLUMNS' order, the columns its frame gives None) and the key its lines
 * pair by, as requests.read_request_line_python reads it; None for a text that is neither `Receive: obj=…` nor
 * `Finish: obj=…`; `default` for what the fast path leaves to Python (a JSON line, a value it does not take). The call
 * repr goes straight to its JSON text; what follows it (`out={'meta_info': …}`) is read into values, as request()
 * reads it. spec: (meta_keys {key: (column, rank, is_int)}, n_columns, the columns of (source_kind, rid,
 * health_check, finish_reason, spec_accept_histogram, request, extra), json_text, the health-check rid prefix, the
 * source kind). */
static PyObject *py_request_row(PyObject *module, PyObject *args) {
    PyObject *message, *spec, *fallback, *meta_keys, *columns, *json_text, *prefix, *source_kind;
    int finished;
    Py_ssize_t n_columns, at[N_AT];
    if (!PyArg_ParseTuple(args, "UpO!O", &message, &finished, &PyTuple_Type, &spec, &fallback) ||
        !PyArg_ParseTuple(spec, "O!nO!OUU", &PyDict_Type, &meta_keys, &n_columns, &PyTuple_Type, &columns, &json_text, &prefix,
                          &source_kind) ||
        !PyArg_ParseTuple(columns, "nnnnnnn", &at[0], &at[1], &at[2], &at[3], &at[4], &at[5], &at[6]))
        return NULL;
    for (int k = 0; k < N_AT; k++) {
        if (at[k] < 0 || at[k] >= n_columns) {
            PyErr_SetString(PyExc_ValueError, "a column of the spec is outside the row");
            return NULL;
        }
    }
    Py_ssize_t start = 0, end = PyUnicode_GET_LENGTH(message);
    strip_range(message, &start, &end);
    if (start < end && PyUnicode_READ_CHAR(message, start) == '{') return Py_NewRef(fallback); /* a JSON line */
    static const char *const heads[] = {"Receive: obj=", "Finish: obj="};
    Py_ssize_t body_start = -1;
    for (int h = 0; h < 2 && body_start < 0; h++) {
        Py_ssize_t len = (Py_ssize_t)strlen(heads[h]), k = 0;
        while (k < len && start + k < end && PyUnicode_READ_CHAR(message, start + k) == (Py_UCS4)heads[h][k]) k++;
        if (k == len) body_start = start + len;
    }
    if (body_start < 0) Py_RETURN_NONE;
    PyObject *body = PyUnicode_Substring(message, body_start, end), *rid = NULL, *tail = NULL, *out = NULL, *meta = NULL;
    PyObject *extra = NULL, *request_json = NULL, *row = NULL, *key = NULL, *result = NULL;
    json_t j = {NULL, 0, 0};
    Py_ssize_t closed;
    if (!body) return NULL;
    int done = fast_request(body, &j, &rid, &closed);
    if (done > 0) { /* the keyword items after the call (none on a Receive line) */
        Py_ssize_t after = closed + 1, n = PyUnicode_GET_LENGTH(body);
        strip_range(body, &after, &n);
        done = !(tail = PyDict_New()) ? -1 : after == n ? 1 : read_tail(body, closed + 1, tail);
    }
    if (done <= 0) {
        if (done == 0) result = Py_NewRef(fallback);
        goto finish;
    }
    if (!(request_json = PyUnicode_DecodeASCII(j.data, j.len, NULL))) goto finish;
    /* out = tail.pop("out"), a dict or {}; meta = its meta_info, a dict or {} */
    out = PyDict_GetItemString(tail, "out");
    if (out) {
        Py_INCREF(out);
        if (PyDict_DelItemString(tail, "out") < 0) goto finish;
    }
    if (!out || !PyDict_Check(out)) {
        Py_XDECREF(out);
        if (!(out = PyDict_New())) goto finish;
    }
    meta = PyDict_GetItemString(out, "meta_info");
    if (meta && PyDict_Check(meta)) {
        Py_INCREF(meta);
    } else if (!(meta = PyDict_New())) {
        goto finish;
    }
    if (!rid) { /* the request's rid is not a plain string: meta_info's id */
        rid = PyDict_GetItemString(meta, "id");
        Py_INCREF(rid = rid ? rid : Py_None);
    }
    if (finished) { /* extra: the tail's other items and out's other fields (out.<name>) */
        if (!(extra = PyDict_Copy(tail))) goto finish;
        PyObject *name, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(out, &pos, &name, &value)) {
            if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "meta_info") == 0) continue;
            PyObject *out_name = PyUnicode_FromFormat("out.%S", name);
            int failed = !out_name || PyDict_SetItem(extra, out_name, value) < 0;
            Py_XDECREF(out_name);
            if (failed) goto finish;
        }
        row = row_of(meta, request_json, rid, extra, meta_keys, n_columns, at, json_text, prefix, source_kind);
    } else { /* a Receive line's row has no meta_info nor other fields */
        PyObject *none = PyDict_New();
        row = none ? row_of(none, request_json, rid, none, meta_keys, n_columns, at, json_text, prefix, source_kind) : NULL;
        Py_XDECREF(none);
    }
    if (!row) goto finish;
    if (PyUnicode_Check(rid) || rid == Py_None) { /* a rid that is not a str pairs by its JSON */
        key = Py_NewRef(rid);
    } else {
        PyObject *text = PyObject_CallOneArg(json_text, rid), *nul = PyUnicode_FromOrdinal(0);
        key = text && nul ? PyUnicode_Concat(nul, text) : NULL;
        Py_XDECREF(text);
        Py_XDECREF(nul);
        if (!key) goto finish;
    }
    result = PyTuple_Pack(2, row, key);
finish:
    PyMem_Free(j.data);
    Py_XDECREF(body);
    Py_XDECREF(rid);
    Py_XDECREF(tail);
    Py_XDECREF(out);
    Py_XDECREF(meta);
    Py_XDECREF(extra);
    Py_XDECREF(request_json);
    Py_XDECREF(row);
    Py_XDECREF(key);
    return result;
}

static PyMethodDef methods[] = {
    {"split", py_split, METH_O, "A repr body's items, split at top-level commas, and the index of its closing bracket."},
    {"literal", py_literal, METH_VARARGS, "The value of a literal repr, or the default where ast.literal_eval must decide."},
    {"request", py_request, METH_VARARGS, "A --log-requests line's call repr and what follows it, read, or the default."},
    {"request_row", py_request_row, METH_VARARGS, "A text --log-requests line's requests row and pair key, or None, or the default."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "speclogs.ingest._reprs", "speclogs' reader of Python reprs (see reprs.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__reprs(void) { return PyModule_Create(&module_def); }
