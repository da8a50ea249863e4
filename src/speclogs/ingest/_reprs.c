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

static PyMethodDef methods[] = {
    {"split", py_split, METH_O, "A repr body's items, split at top-level commas, and the index of its closing bracket."},
    {"literal", py_literal, METH_VARARGS, "The value of a literal repr, or the default where ast.literal_eval must decide."},
    {"request", py_request, METH_VARARGS, "A --log-requests line's call repr and what follows it, read, or the default."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "speclogs.ingest._reprs", "speclogs' reader of Python reprs (see reprs.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__reprs(void) { return PyModule_Create(&module_def); }
