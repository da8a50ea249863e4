/* speclogs' native matcher: the grammar regexes, compiled by native.py into a small program, run on Arrow
 * string-view arrays (what polars Series are made of), with captures cast to typed columns.
 *
 * It is a backtracking matcher for the regex subset the grammar compiler emits (literals, classes, greedy
 * repeats, alternation, optional groups, ^ and $), with the leftmost-first semantics of Python re and Rust
 * regex: it gives the same captures as polars' extract_groups. Whatever it cannot decide exactly (a step
 * budget exceeded, a number in a form it does not convert) it marks UNDECIDED, and the caller runs polars'
 * regex on those rows. Text is valid UTF-8 (the ingest repairs it before); classes are matched by character.
 *
 * An ordinary CPython extension module (speclogs.ingest._native), built with the package (setup.py); the
 * Python side (native.py) builds the programs and hands buffers over (the buffer protocol: numpy arrays, pyarrow
 * buffers, bytes). The matching functions release the GIL, so two parse threads match at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

enum { OP_LIT = 1, OP_SET, OP_RUN, OP_SPLIT, OP_JMP, OP_SAVE, OP_BOL, OP_EOL, OP_MATCH, OP_REST, OP_NUM, OP_SEQ };
enum { MISS = 0, HIT = 1, UNDECIDED = 2 };
enum { BT_BRANCH = 1, BT_RUN, BT_RESTORE };

typedef struct { int32_t op, a, b, c, d; } inst_t; /* SPLIT c/d, RUN/REST d: first-character sets (-1: any) */
typedef struct { int32_t kind, pc, pos, extra; } frame_t;

#define SET_BYTES 129   /* [0..127]: ASCII members; [128]: whether non-ASCII characters match */
#define FIRST_BYTES 130 /* a set, and [129]: whether the end of the text may follow */
#define MAX_FRAMES 4096
#define MAX_SLOTS 256
#define PREFETCH_ROWS 8

static inline const uint8_t *view_text(const uint8_t *views, const uint8_t *const *buffers, int64_t i, int32_t *len) {
    const uint8_t *v = views + 16 * i;
    int32_t n;
    memcpy(&n, v, 4);
    *len = n;
    if (n <= 12) return v + 4;
    int32_t buf, off;
    memcpy(&buf, v + 8, 4);
    memcpy(&off, v + 12, 4);
    return buffers[buf] + off;
}

static inline int char_len(uint8_t lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

/* Length in bytes of one character of `set` at s[pos], or 0 when it does not match. */
static inline int set_step(const uint8_t *set, const uint8_t *s, int32_t pos, int32_t len) {
    if (pos >= len) return 0;
    uint8_t c = s[pos];
    if (c < 0x80) return set[c] ? 1 : 0;
    if (!set[128]) return 0;
    int n = char_len(c);
    return pos + n <= len ? n : len - pos;
}

/* Whether a branch whose first-character set is `first` (-1: any) can go on at s[pos]. */
static inline int can_start(const uint8_t *firsts, int32_t first, const uint8_t *s, int32_t pos, int32_t len) {
    if (first < 0) return 1;
    const uint8_t *f = firsts + FIRST_BYTES * first;
    if (pos >= len) return f[129];
    return s[pos] < 0x80 ? f[s[pos]] : f[128];
}

/* Whether giving back part of a run that ends at `pos` could help: some position in [shortest, pos) where what
 * follows the run can start. (Digits followed by ", " never can; then no choice point is needed.) */
static inline int can_give_back(const uint8_t *firsts, int32_t first, const uint8_t *s, int32_t shortest, int32_t pos, int32_t len) {
    if (first < 0) return 1;
    for (int32_t p = shortest; p < pos; p++)
        if ((s[p] & 0xC0) != 0x80 && can_start(firsts, first, s, p, len)) return 1;
    return 0;
}

static inline int32_t step_back(const uint8_t *s, int32_t pos) {
    pos--;
    while (pos > 0 && (s[pos] & 0xC0) == 0x80) pos--;
    return pos;
}

/* One anchored match of `prog` on s[0..len); caps[2k], caps[2k+1] = span of group k (-1 when unset).
 * `budget` bounds the backtracking (each choice point taken back costs one); past it the row is UNDECIDED.
 * Dispatch is by computed goto (GCC and clang): one indirect jump per instruction kind predicts far better. */
static int run(const inst_t *prog, const uint8_t *lits, const uint8_t *sets, const uint8_t *firsts, int32_t n_slots,
               int64_t budget, const uint8_t *s, int32_t len, int32_t *caps, frame_t *stack) {
    static const void *const handlers[] = {&&bad, &&lit, &&set, &&run, &&split, &&jmp, &&save, &&bol, &&eol, &&match, &&rest, &&num, &&seq};
    for (int32_t k = 0; k < n_slots; k++) caps[k] = -1;
    int32_t sp = 0, pc = 0, pos = 0;
    const inst_t *in;
#define NEXT() do { in = &prog[pc]; goto *handlers[in->op]; } while (0)
#define PUSH(...) do { if (sp >= MAX_FRAMES) return UNDECIDED; stack[sp++] = (frame_t){__VA_ARGS__}; } while (0)
    NEXT();
lit: {
        const uint8_t *l = lits + in->a;
        int32_t n = in->b;
        if (pos + n > len) goto fail;
        const uint8_t *t = s + pos;
        int32_t k = 0;
        for (; k + 8 <= n; k += 8) { /* 8 bytes at a time: the literals between fields are 10–30 bytes long */
            uint64_t x, y;
            memcpy(&x, t + k, 8);
            memcpy(&y, l + k, 8);
            if (x != y) goto fail;
        }
        for (; k < n; k++)
            if (t[k] != l[k]) goto fail;
        pos += n;
        pc++;
        NEXT();
    }
set: {
        int n = set_step(sets + SET_BYTES * in->a, s, pos, len);
        if (!n) goto fail;
        pos += n;
        pc++;
        NEXT();
    }
run: { /* greedy; a frame remembers where the shortest allowed run ends, to give back down to */
        const uint8_t *set = sets + SET_BYTES * in->a;
        int32_t count = 0, n, shortest = in->b == 0 ? pos : -1, most = in->c < 0 ? INT32_MAX : in->c;
        while (count < most && pos < len) {
            if (s[pos] < 0x80) {
                if (!set[s[pos]]) break;
                pos++;
            } else if ((n = set_step(set, s, pos, len)) > 0) {
                pos += n;
            } else {
                break;
            }
            if (++count == in->b) shortest = pos;
        }
        if (count < in->b) goto fail;
        if (pos > shortest && can_give_back(firsts, in->d, s, shortest, pos, len)) PUSH(BT_RUN, pc, pos, shortest);
        pc++;
        NEXT();
    }
rest: { /* '.*' / '.+' (b = minimum): every character up to the end of the line */
        const uint8_t *nl = memchr(s + pos, '\n', (size_t)(len - pos));
        int32_t stop = nl ? (int32_t)(nl - s) : len, shortest = pos, k = 0;
        for (; k < in->b && shortest < stop; k++) shortest += char_len(s[shortest]);
        if (k < in->b) goto fail;
        if (shortest > stop) shortest = stop;
        pos = stop;
        if (pos > shortest) PUSH(BT_RUN, pc, pos, shortest);
        pc++;
        NEXT();
    }
split: {
        int left = can_start(firsts, in->c, s, pos, len), right = can_start(firsts, in->d, s, pos, len);
        if (left && right) {
            PUSH(BT_BRANCH, in->b, pos, 0);
            pc = in->a;
        } else if (left) {
            pc = in->a;
        } else if (right) {
            pc = in->b;
        } else {
            goto fail;
        }
        NEXT();
    }
num: { /* a captured number: '-'? (c) digits, '.' digits (b); only emitted where nothing can give it back */
        int32_t start = pos;
        if (in->c && pos < len && s[pos] == '-') pos++;
        int32_t digits = pos;
        while (pos < len && s[pos] >= '0' && s[pos] <= '9') pos++;
        if (pos == digits) goto fail;
        if (in->b && pos + 1 < len && s[pos] == '.' && s[pos + 1] >= '0' && s[pos + 1] <= '9') {
            pos += 2;
            while (pos < len && s[pos] >= '0' && s[pos] <= '9') pos++;
        }
        if (sp > 0) {
            PUSH(BT_RESTORE, in->a, caps[in->a], 0);
            PUSH(BT_RESTORE, in->a + 1, caps[in->a + 1], 0);
        }
        caps[in->a] = start;
        caps[in->a + 1] = pos;
        pc++;
        NEXT();
    }
seq: { /* fixed-width positions, each a byte (0, byte) or an ASCII-only class (1, set index) */
        const uint8_t *position = lits + in->a;
        if (pos + in->b > len) goto fail;
        for (int32_t k = 0; k < in->b; k++, position += 2) {
            uint8_t c = s[pos + k];
            if (position[0] == 0 ? c != position[1] : (c >= 0x80 || !sets[SET_BYTES * position[1] + c])) goto fail;
        }
        pos += in->b;
        pc++;
        NEXT();
    }
jmp:
    pc = in->a;
    NEXT();
save:
    if (sp > 0) PUSH(BT_RESTORE, in->a, caps[in->a], 0); /* with no choice point left a failure is final */
    caps[in->a] = pos;
    pc++;
    NEXT();
bol:
    if (pos != 0) goto fail;
    pc++;
    NEXT();
eol:
    if (pos != len) goto fail;
    pc++;
    NEXT();
match:
    return HIT;
bad:
    return UNDECIDED;
fail:
    for (;;) {
        if (sp == 0) return MISS;
        if (--budget < 0) return UNDECIDED;
        frame_t *f = &stack[--sp];
        if (f->kind == BT_RESTORE) {
            caps[f->pc] = f->pos;
            continue;
        }
        if (f->kind == BT_BRANCH) {
            pc = f->pc;
            pos = f->pos;
            NEXT();
        }
        /* BT_RUN: give back characters of the repeat until what follows can start there, and go on */
        const inst_t *r = &prog[f->pc];
        int32_t shortest = f->extra;
        pos = f->pos;
        do {
            pos = step_back(s, pos);
        } while (pos > shortest && !can_start(firsts, r->d, s, pos, len));
        if (!can_start(firsts, r->d, s, pos, len)) continue;
        if (pos > shortest) stack[sp++] = (frame_t){BT_RUN, f->pc, pos, shortest};
        pc = f->pc + 1;
        NEXT();
    }
#undef NEXT
#undef PUSH
}

/* ---------------------------------------------------------------------------------------------------------
 * Captured text → typed values. The readers are strict: a value in any other form leaves its row to polars. */

static int parse_int(const uint8_t *s, int32_t len, int64_t *out, int *valid) {
    int32_t i = 0;
    int neg = 0;
    if (i < len && s[i] == '-') { neg = 1; i++; }
    if (i == len) return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int overflow = 0;
    for (; i < len; i++) {
        uint8_t c = s[i];
        if (c < '0' || c > '9') return 0;
        if (!overflow) {
            if (v > (limit - (c - '0')) / 10) overflow = 1;
            else v = v * 10 + (c - '0');
        }
    }
    *valid = !overflow;
    *out = overflow ? 0 : (neg ? (int64_t)(0 - v) : (int64_t)v);
    return 1;
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* '-?[0-9]+(\.[0-9]+)?' with at most 2^53 as digits and at most 22 decimals: one correctly rounded division
 * of two exact doubles, the same value any correctly rounding reader (polars') gives. Else: not taken. */
static int parse_float(const uint8_t *s, int32_t len, double *out) {
    int32_t i = 0;
    int neg = 0;
    if (i < len && s[i] == '-') { neg = 1; i++; }
    uint64_t m = 0;
    int digits = 0, decimals = 0, dot = 0;
    for (; i < len; i++) {
        uint8_t c = s[i];
        if (c == '.' && !dot && digits) { dot = 1; continue; }
        if (c < '0' || c > '9') return 0;
        if (m > (1ULL << 53) / 10) return 0;
        m = m * 10 + (c - '0');
        digits++;
        decimals += dot;
    }
    if (!digits || (dot && !decimals) || decimals > 22 || m > (1ULL << 53)) return 0;
    double v = (double)m / POW10[decimals];
    *out = neg ? -v : v;
    return 1;
}

/* 'YYYY-MM-DD HH:MM:SS' → microseconds since 1970 (a second of 60 rolls over, as polars' reader does); an
 * impossible date is valid 0. Returns 0 (not taken) for any other form of 19 characters. */
static int parse_timestamp(const uint8_t *s, int32_t len, int64_t *out, int *valid) {
    static const char shape[] = "dddd-dd-dd dd:dd:dd";
    if (len != 19) return 0;
    for (int k = 0; k < 19; k++)
        if (shape[k] == 'd' ? (s[k] < '0' || s[k] > '9') : s[k] != (uint8_t)shape[k]) return 0;
#define N2(at) ((s[at] - '0') * 10 + (s[at + 1] - '0'))
    int64_t year = N2(0) * 100 + N2(2), month = N2(5), day = N2(8), hour = N2(11), minute = N2(14), second = N2(17);
#undef N2
    static const int days_in[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    *valid = month >= 1 && month <= 12 && day >= 1 && day <= days_in[month - 1] + (month == 2 && leap) && hour <= 23 &&
             minute <= 59 && second <= 60; /* (days_in is read only once month is known to be 1–12) */
    if (!*valid) return 1;
    /* days from civil (H. Hinnant): proleptic Gregorian, year 0 allowed */
    int64_t y = year - (month <= 2), era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
    int64_t doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1, doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    *out = ((days * 24 + hour) * 60 + minute) * 60 * 1000000 + second * 1000000;
    return 1;
}

/* A text capture as an Arrow string view into the source row's own data buffer (≤ 12 bytes are inlined). */
static void text_view(const uint8_t *source_view, const uint8_t *text, int32_t start, int32_t end, uint8_t *v) {
    int32_t size = end - start;
    memset(v, 0, 16);
    memcpy(v, &size, 4);
    if (size <= 12) {
        memcpy(v + 4, text + start, (size_t)size);
        return;
    }
    int32_t buf, off; /* size > 12, so the source row is not inline either */
    memcpy(&buf, source_view + 8, 4);
    memcpy(&off, source_view + 12, 4);
    off += start;
    memcpy(v + 4, text + start, 4);
    memcpy(v + 8, &buf, 4);
    memcpy(v + 12, &off, 4);
}

/* What to make of a capture group: kinds 0 int64, 1 float64, 2 pct (float64, trailing '%' dropped), 3 bool
 * (== "True"), 4 text (a string view), 5 timestamp (µs; 'YYYY-MM-DD HH:MM:SS', the shorter forms NULL). */
typedef struct { int32_t slot, kind; } wanted_t;

/* One hit's wanted captures → its 16-byte cells (numbers in bytes 0–7, bool in byte 0, text as a view) and
 * their valid flags, while the row's text is still in cache. 0 when a value is in a form these strict
 * readers do not take (the row is then left to polars). */
static int convert(const wanted_t *wanted, int32_t n_wanted, const int32_t *caps, const uint8_t *source_view,
                   const uint8_t *text, uint8_t *cells, uint8_t *valid) {
    for (int32_t c = 0; c < n_wanted; c++) {
        uint8_t *cell = cells + 16 * c;
        int32_t start = caps[wanted[c].slot], end = caps[wanted[c].slot + 1];
        memset(cell, 0, 16);
        valid[c] = 0;
        if (start < 0 || end < start) continue;
        const uint8_t *s = text + start;
        int32_t len = end - start;
        int ok = 1;
        int64_t whole = 0;
        double real = 0;
        switch (wanted[c].kind) {
        case 0:
            if (!parse_int(s, len, &whole, &ok)) return 0;
            memcpy(cell, &whole, 8);
            break;
        case 2:
            while (len > 0 && s[len - 1] == '%') len--;
            /* fall through */
        case 1:
            if (!parse_float(s, len, &real)) return 0;
            memcpy(cell, &real, 8);
            break;
        case 3:
            cell[0] = len == 4 && memcmp(s, "True", 4) == 0;
            break;
        case 5:
            if (len == 8 || len == 14) { /* 'HH:MM:SS', 'MM-DD HH:MM:SS': no date, so no timestamp */
                ok = 0;
                break;
            }
            if (!parse_timestamp(s, len, &whole, &ok)) return 0;
            memcpy(cell, &whole, 8);
            break;
        default:
            text_view(source_view, text, start, end, cell);
        }
        valid[c] = (uint8_t)ok;
    }
    return 1;
}

/* One pattern of a scope, in priority order. */
typedef struct {
    const inst_t *code;
    const uint8_t *lits, *sets, *firsts;
    int32_t n_slots;
    int32_t entry; /* first-character set of a match (-1: any): most rows are turned down on their first byte */
    const uint8_t *gate; /* the pattern's gate literal (the row must contain it), gate_len 0: none */
    int32_t gate_len;
    const wanted_t *wanted; /* the capture groups its rows keep, as cells */
    int32_t n_wanted;
    const uint8_t *anchor; /* the literal every match starts with (anchor_len 0: none): a row that does not start
                            * with it is turned down without looking for the gate in the whole row */
    int32_t anchor_len;
    int32_t near_after; /* rows this pattern wins need the near misses of the patterns before it (see below) */
} pattern_t;

/* Whether s[0..len) contains the literal g[0..n) (n > 0): memchr for its first byte, then compare (glibc's
 * memmem sets up a two-way search per call, which costs more than it saves on lines of ~150 bytes). */
static inline int contains(const uint8_t *s, int32_t len, const uint8_t *g, int32_t n) {
    const uint8_t *end = s + len - n + 1, *at = s;
    while (at < end) {
        at = memchr(at, g[0], (size_t)(end - at));
        if (!at) return 0;
        if (memcmp(at + 1, g + 1, (size_t)(n - 1)) == 0) return 1;
        at++;
    }
    return 0;
}

static inline const uint8_t *row_text(const uint8_t *views, const uint8_t *const *buffers, const int64_t *rows,
                                      int64_t offset, int64_t i, int32_t *len) {
    return view_text(views, buffers, offset + (rows ? rows[i] : i), len);
}

/* Classify rows[0..n) (all rows when rows is NULL) of a string-view array: the first pattern whose gate the row
 * contains and whose program matches wins (winner[i] = its index, -1: none, -2: undecided, polars must do
 * the row). The winner's wanted captures are converted at once into cells (16 bytes each) and cell_valid, from
 * cell_at[i] on; left[i] = 1 when one is in a form the C readers do not take (polars converts that row).
 * Each (row, pattern) whose gate the row contains (or that has none) but whose program missed, before the
 * winner, is a near miss: near_rows/near_patterns, up to near_capacity of them (*n_near counts them all: more
 * than the capacity means "call again with more room"). Only rows that nothing wins, or whose winner has
 * near_after set (the caller says which winners' near misses it reads), have near misses. A row that does not start
 * with a pattern's anchor is a near miss of it when it contains the gate. Near misses come in row order for each
 * pattern. */
static void sl_classify(const pattern_t *patterns, int32_t n_patterns, const uint8_t *views, const uint8_t *const *buffers,
                 const uint8_t *validity, int64_t offset, const int64_t *rows, int64_t n, int32_t *winner,
                 uint8_t *cells, uint8_t *cell_valid, int64_t *cell_at, uint8_t *left, int64_t *near_rows,
                 int32_t *near_patterns, int64_t near_capacity, int64_t *n_near) {
    frame_t *stack = malloc(sizeof(frame_t) * MAX_FRAMES);
    int32_t caps[MAX_SLOTS];
    int64_t used = 0, near = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_ROWS < n) { /* rows are ~160 bytes apart: without this each row waits for memory */
            int32_t ahead_len;
            const uint8_t *ahead = row_text(views, buffers, rows, offset, i + PREFETCH_ROWS, &ahead_len);
            __builtin_prefetch(ahead);
            __builtin_prefetch(ahead + 64);
            __builtin_prefetch(ahead + 128);
        }
        int64_t row = offset + (rows ? rows[i] : i);
        winner[i] = -1;
        cell_at[i] = -1;
        left[i] = 0;
        if (validity && !((validity[row >> 3] >> (row & 7)) & 1)) continue;
        if (!stack) { winner[i] = -2; continue; }
        int32_t len, turned_down = 0;
        int64_t near_before = near; /* this row's near misses start here */
        const uint8_t *s = view_text(views, buffers, row, &len);
        for (int32_t k = 0; k < n_patterns; k++) {
            const pattern_t *p = &patterns[k];
            if (p->anchor_len && (len < p->anchor_len || memcmp(s, p->anchor, (size_t)p->anchor_len) != 0)) {
                turned_down = 1;
                continue;
            }
            if (p->gate_len && !contains(s, len, p->gate, p->gate_len)) continue;
            int st = MISS;
            if (can_start(p->firsts, p->entry, s, 0, len)) {
                st = p->n_slots > MAX_SLOTS ? UNDECIDED
                                            : run(p->code, p->lits, p->sets, p->firsts, p->n_slots, 16 + 8 * (int64_t)len, s,
                                                  len, caps, stack);
            }
            if (st == HIT) {
                winner[i] = k;
                cell_at[i] = used;
                left[i] = !convert(p->wanted, p->n_wanted, caps, views + 16 * row, s, cells + 16 * used, cell_valid + used);
                used += p->n_wanted;
                if (!p->near_after) near = near_before; /* the caller reads none of them (e.g. 0.5.9's prefill lines, won by
                                                           the second of two prefill patterns: 240k of a 2M-line log) */
                break;
            }
            if (st == UNDECIDED) {
                winner[i] = -2;
                break;
            }
            if (near < near_capacity) {
                near_rows[near] = i;
                near_patterns[near] = k;
            }
            near++;
        }
        if (turned_down && (winner[i] == -1 || (winner[i] >= 0 && patterns[winner[i]].near_after))) {
            for (int32_t k = 0, before = winner[i] < 0 ? n_patterns : winner[i]; k < before; k++) {
                const pattern_t *p = &patterns[k];
                if (!p->anchor_len || (len >= p->anchor_len && memcmp(s, p->anchor, (size_t)p->anchor_len) == 0)) continue;
                if (p->gate_len && !contains(s, len, p->gate, p->gate_len)) continue;
                if (near < near_capacity) {
                    near_rows[near] = i;
                    near_patterns[near] = k;
                }
                near++;
            }
        }
    }
    free(stack);
    *n_near = near;
}

/* The cells of rows pick[0..n) into columns, in one pass over them (a pass per column would read every row's
 * cells once per column): for column c, width[c] bytes of each cell (1 bool, 8 number, 16 string view) into
 * out[c] and its valid flag into valid[c]. */
static void sl_cells(const uint8_t *cells, const uint8_t *cell_valid, const int64_t *cell_at, const int64_t *pick, int64_t n,
              int32_t n_columns, const int32_t *width, uint8_t *const *out, uint8_t *const *valid) {
    for (int64_t j = 0; j < n; j++) {
        int64_t at = cell_at[pick[j]];
        for (int32_t c = 0; c < n_columns; c++) {
            const uint8_t *cell = cells + 16 * (at + c);
            valid[c][j] = cell_valid[at + c];
            if (width[c] == 16) memcpy(out[c] + 16 * j, cell, 16);
            else if (width[c] == 8) memcpy(out[c] + 8 * j, cell, 8);
            else out[c][j] = cell[0];
        }
    }
}

/* Copies of n string views whose text lives in new_data alone (one buffer, sized by the caller), so that a
 * small captured value does not keep the whole chunk's text alive. */
static void sl_own_views(const uint8_t *views, const uint8_t *const *buffers, int64_t n, uint8_t *out_views,
                  uint8_t *new_data) {
    int32_t at = 0, zero = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *v = views + 16 * i;
        uint8_t *o = out_views + 16 * i;
        memcpy(o, v, 16);
        int32_t size;
        memcpy(&size, v, 4);
        if (size <= 12) continue;
        int32_t len;
        memcpy(new_data + at, view_text(views, buffers, i, &len), (size_t)size);
        memcpy(o + 8, &zero, 4);
        memcpy(o + 12, &at, 4);
        at += size;
    }
}

/* The lines of buf[0..len) as Arrow string views into buf itself (data buffer `buffer_index`): a line ends at
 * '\n' (not included), a '\r' before it is dropped, a last line without '\n' counts. With out_views NULL it only
 * counts them; it writes at most `capacity` views and flags. flags[i] (with out_views) tells what lines.py must look at: LINE_ODD (a '\r', ESC or '^[[' inside, or
 * a kubectl '[pod/' prefix), LINE_UNBRACKETED (does not start with '['), LINE_TOO_LONG (over max_bytes). */
enum { LINE_ODD = 1, LINE_UNBRACKETED = 2, LINE_TOO_LONG = 4 };

static int64_t sl_split_lines(const uint8_t *buf, int64_t len, int32_t buffer_index, int64_t max_bytes, uint8_t *out_views,
                       uint8_t *flags, int64_t capacity) {
    int64_t lines = 0, start = 0;
    while (start < len) {
        const uint8_t *nl = memchr(buf + start, '\n', (size_t)(len - start));
        int64_t end = nl ? nl - buf : len, next = nl ? end + 1 : len;
        if (out_views && lines < capacity) { /* room for `capacity` lines; past it only counts */
            int64_t stop = end > start && buf[end - 1] == '\r' ? end - 1 : end, size = stop - start;
            const uint8_t *line = buf + start;
            uint8_t f = 0;
            if (size == 0 || line[0] != '[') f |= LINE_UNBRACKETED;
            if (size > max_bytes) f |= LINE_TOO_LONG;
            if (memchr(line, '\r', (size_t)size) || memchr(line, 0x1b, (size_t)size) ||
                (size >= 5 && memcmp(line, "[pod/", 5) == 0))
                f |= LINE_ODD;
            for (const uint8_t *caret = line; !(f & LINE_ODD) && (caret = memchr(caret, '^', (size_t)(line + size - caret)));
                 caret++)
                if (caret + 2 < line + size && caret[1] == '[' && caret[2] == '[') f |= LINE_ODD;
            flags[lines] = f;
            int32_t size32 = (int32_t)size, offset = (int32_t)start;
            uint8_t *v = out_views + 16 * lines;
            memset(v, 0, 16);
            memcpy(v, &size32, 4);
            if (size <= 12) {
                memcpy(v + 4, line, (size_t)size);
            } else {
                memcpy(v + 4, line, 4);
                memcpy(v + 8, &buffer_index, 4);
                memcpy(v + 12, &offset, 4);
            }
        }
        lines++;
        start = next;
    }
    return lines;
}

/* ---------------------------------------------------------------------------------------------------------
 * The Python module: buffers in (bytes, numpy arrays, pyarrow buffers), sizes checked before any C loop runs. */

typedef struct {
    Py_buffer *views;
    int n;
} held_t;

static void release_all(held_t *held) {
    for (int k = 0; k < held->n; k++) PyBuffer_Release(&held->views[k]);
    PyMem_Free(held->views);
    held->views = NULL;
    held->n = 0;
}

/* A buffer of at least `need` bytes from obj (writable when asked); NULL with an exception set otherwise. */
static const void *take(held_t *held, PyObject *obj, Py_ssize_t need, int writable, const char *what) {
    Py_buffer *grown = PyMem_Realloc(held->views, sizeof(Py_buffer) * (size_t)(held->n + 1));
    if (!grown) return PyErr_NoMemory(), NULL;
    held->views = grown;
    Py_buffer *view = &held->views[held->n];
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return NULL;
    held->n++;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", what, view->len, need);
        return NULL;
    }
    return view->buf;
}

/* Patterns: one scope's programs in priority order, laid out once (see classify in native.py). */
typedef struct {
    PyObject_HEAD
    pattern_t *table;
    int32_t n;
    int32_t most_cells;
    held_t held;
} PatternsObject;

static void Patterns_dealloc(PatternsObject *self) {
    release_all(&self->held);
    PyMem_Free(self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Patterns([(code int32[k*5], lits, sets, firsts, n_slots, entry, gate, wanted int32[2*m], anchor, near_after), …]) */
static int Patterns_init(PatternsObject *self, PyObject *args, PyObject *kwds) {
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "O", &specs)) return -1;
    PyObject *seq = PySequence_Fast(specs, "Patterns() takes a sequence of pattern tuples");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->table = PyMem_Calloc((size_t)(n ? n : 1), sizeof(pattern_t));
    if (!self->table) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    self->n = (int32_t)n;
    self->most_cells = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *code, *lits, *sets, *firsts, *gate, *wanted, *anchor;
        int n_slots, entry, near_after;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "OOOOiiOOOp;pattern tuple", &code, &lits, &sets, &firsts,
                              &n_slots, &entry, &gate, &wanted, &anchor, &near_after))
            goto fail;
        pattern_t *p = &self->table[k];
        held_t *h = &self->held;
        if (!(p->code = take(h, code, 20, 0, "code")) || !(p->lits = take(h, lits, 0, 0, "lits")) ||
            !(p->sets = take(h, sets, SET_BYTES, 0, "sets")) || !(p->firsts = take(h, firsts, 0, 0, "firsts")) ||
            !(p->gate = take(h, gate, 0, 0, "gate")) || !(p->wanted = take(h, wanted, 0, 0, "wanted")) ||
            !(p->anchor = take(h, anchor, 0, 0, "anchor")))
            goto fail;
        p->n_slots = n_slots;
        p->entry = entry;
        p->gate_len = (int32_t)h->views[h->n - 3].len;
        p->n_wanted = (int32_t)(h->views[h->n - 2].len / (Py_ssize_t)sizeof(wanted_t));
        p->anchor_len = (int32_t)h->views[h->n - 1].len;
        p->near_after = near_after;
        if (p->n_wanted > self->most_cells) self->most_cells = p->n_wanted;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

static PyObject *Patterns_most_cells(PatternsObject *self, void *closure) { return PyLong_FromLong(self->most_cells); }

static PyGetSetDef Patterns_getset[] = {
    {"most_cells", (getter)Patterns_most_cells, NULL, "the most cells one row's match fills", NULL},
    {NULL},
};

static PyTypeObject PatternsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "speclogs.ingest._native.Patterns",
    .tp_basicsize = sizeof(PatternsObject),
    .tp_dealloc = (destructor)Patterns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One scope's programs in priority order, laid out for classify().",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Patterns_init,
    .tp_getset = Patterns_getset,
};

/* The data buffers of a string-view array as a C array of pointers (PyMem_Free it). */
static const uint8_t **data_pointers(held_t *held, PyObject *data) {
    PyObject *seq = PySequence_Fast(data, "data buffers must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const uint8_t **ptrs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint8_t *));
    if (!ptrs) {
        Py_DECREF(seq);
        return (const uint8_t **)PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (!(ptrs[k] = take(held, PySequence_Fast_GET_ITEM(seq, k), 0, 0, "data buffer"))) {
            PyMem_Free(ptrs);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return ptrs;
}

/* classify(patterns, views, data, validity|None, offset, n, winner, cells, cell_valid, cell_at, left, near_rows,
 * near_patterns) → number of near misses (more than near_rows holds: call again with more room) */
static PyObject *py_classify(PyObject *module, PyObject *args) {
    PatternsObject *patterns;
    PyObject *views_o, *data_o, *validity_o, *winner_o, *cells_o, *cell_valid_o, *cell_at_o, *left_o, *near_rows_o, *near_patterns_o;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "O!OOOnnOOOOOOO", &PatternsType, &patterns, &views_o, &data_o, &validity_o, &offset, &n,
                          &winner_o, &cells_o, &cell_valid_o, &cell_at_o, &left_o, &near_rows_o, &near_patterns_o))
        return NULL;
    if (offset < 0 || n < 0) return PyErr_Format(PyExc_ValueError, "offset and n must be >= 0");
    held_t held = {NULL, 0};
    const uint8_t **data = NULL, *views, *validity = NULL;
    int32_t *winner;
    uint8_t *cells, *cell_valid, *left;
    int64_t *cell_at, *near_rows, n_near = 0;
    int32_t *near_patterns;
    Py_ssize_t cells_needed = n * patterns->most_cells;
    if (!(views = take(&held, views_o, 16 * (offset + n), 0, "views"))) goto fail;
    if (validity_o != Py_None && !(validity = take(&held, validity_o, (offset + n + 7) / 8, 0, "validity"))) goto fail;
    if (!(data = data_pointers(&held, data_o))) goto fail;
    if (!(winner = (int32_t *)take(&held, winner_o, 4 * n, 1, "winner")) ||
        !(cells = (uint8_t *)take(&held, cells_o, 16 * cells_needed, 1, "cells")) ||
        !(cell_valid = (uint8_t *)take(&held, cell_valid_o, cells_needed, 1, "cell_valid")) ||
        !(cell_at = (int64_t *)take(&held, cell_at_o, 8 * n, 1, "cell_at")) ||
        !(left = (uint8_t *)take(&held, left_o, n, 1, "left")) ||
        !(near_rows = (int64_t *)take(&held, near_rows_o, 0, 1, "near_rows")) ||
        !(near_patterns = (int32_t *)take(&held, near_patterns_o, 0, 1, "near_patterns")))
        goto fail;
    int64_t capacity = held.views[held.n - 2].len / 8;
    if (held.views[held.n - 1].len / 4 < capacity) capacity = held.views[held.n - 1].len / 4;
    Py_BEGIN_ALLOW_THREADS
    sl_classify(patterns->table, patterns->n, views, data, validity, offset, NULL, n, winner, cells, cell_valid, cell_at,
                left, near_rows, near_patterns, capacity, &n_near);
    Py_END_ALLOW_THREADS
    PyMem_Free(data);
    release_all(&held);
    return PyLong_FromLongLong(n_near);
fail:
    PyMem_Free(data);
    release_all(&held);
    return NULL;
}

/* cells(cells, cell_valid, cell_at, pick, widths, outs, valids): the cells of rows `pick` into one column each */
static PyObject *py_cells(PyObject *module, PyObject *args) {
    PyObject *cells_o, *cell_valid_o, *cell_at_o, *pick_o, *widths_o, *outs_o, *valids_o;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &cells_o, &cell_valid_o, &cell_at_o, &pick_o, &widths_o, &outs_o, &valids_o))
        return NULL;
    held_t held = {NULL, 0};
    PyObject *widths = NULL, *outs = NULL, *valids = NULL;
    int32_t *width = NULL;
    uint8_t **out = NULL, **valid = NULL;
    const uint8_t *cells, *cell_valid;
    const int64_t *cell_at, *pick;
    if (!(cells = take(&held, cells_o, 0, 0, "cells")) || !(cell_valid = take(&held, cell_valid_o, 0, 0, "cell_valid")) ||
        !(cell_at = take(&held, cell_at_o, 0, 0, "cell_at")) || !(pick = take(&held, pick_o, 0, 0, "pick")))
        goto fail;
    Py_ssize_t n = held.views[3].len / 8, rows = held.views[2].len / 8;
    if (!(widths = PySequence_Fast(widths_o, "widths")) || !(outs = PySequence_Fast(outs_o, "outs")) ||
        !(valids = PySequence_Fast(valids_o, "valids")))
        goto fail;
    Py_ssize_t n_columns = PySequence_Fast_GET_SIZE(widths);
    if (PySequence_Fast_GET_SIZE(outs) != n_columns || PySequence_Fast_GET_SIZE(valids) != n_columns) {
        PyErr_SetString(PyExc_ValueError, "widths, outs and valids differ in length");
        goto fail;
    }
    width = PyMem_Calloc((size_t)(n_columns + 1), sizeof(int32_t));
    out = PyMem_Calloc((size_t)(n_columns + 1), sizeof(uint8_t *));
    valid = PyMem_Calloc((size_t)(n_columns + 1), sizeof(uint8_t *));
    if (!width || !out || !valid) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t c = 0; c < n_columns; c++) {
        long w = PyLong_AsLong(PySequence_Fast_GET_ITEM(widths, c));
        if (w != 1 && w != 8 && w != 16) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a width is 1, 8 or 16");
            goto fail;
        }
        width[c] = (int32_t)w;
        if (!(out[c] = (uint8_t *)take(&held, PySequence_Fast_GET_ITEM(outs, c), w * n, 1, "out")) ||
            !(valid[c] = (uint8_t *)take(&held, PySequence_Fast_GET_ITEM(valids, c), n, 1, "valid")))
            goto fail;
    }
    /* every picked row must have its cells inside the buffers */
    for (Py_ssize_t j = 0; j < n; j++) {
        if (pick[j] < 0 || pick[j] >= rows || cell_at[pick[j]] < 0 ||
            16 * (cell_at[pick[j]] + n_columns) > held.views[0].len || cell_at[pick[j]] + n_columns > held.views[1].len) {
            PyErr_SetString(PyExc_ValueError, "a picked row has no cells");
            goto fail;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    sl_cells(cells, cell_valid, cell_at, pick, n, (int32_t)n_columns, width, out, valid);
    Py_END_ALLOW_THREADS
    PyMem_Free(width);
    PyMem_Free(out);
    PyMem_Free(valid);
    Py_XDECREF(widths);
    Py_XDECREF(outs);
    Py_XDECREF(valids);
    release_all(&held);
    Py_RETURN_NONE;
fail:
    PyMem_Free(width);
    PyMem_Free(out);
    PyMem_Free(valid);
    Py_XDECREF(widths);
    Py_XDECREF(outs);
    Py_XDECREF(valids);
    release_all(&held);
    return NULL;
}

/* own_views(views, data, n, out_views, new_data): copies of n views whose text lives in new_data alone */
static PyObject *py_own_views(PyObject *module, PyObject *args) {
    PyObject *views_o, *data_o, *out_o, *new_data_o;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOnOO", &views_o, &data_o, &n, &out_o, &new_data_o)) return NULL;
    held_t held = {NULL, 0};
    const uint8_t **data = NULL, *views;
    uint8_t *out, *new_data;
    if (n < 0 || !(views = take(&held, views_o, 16 * n, 0, "views")) || !(data = data_pointers(&held, data_o)) ||
        !(out = (uint8_t *)take(&held, out_o, 16 * n, 1, "out_views")) ||
        !(new_data = (uint8_t *)take(&held, new_data_o, 0, 1, "new_data")))
        goto fail;
    int64_t needed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t size;
        memcpy(&size, views + 16 * i, 4);
        if (size > 12) needed += size;
    }
    if (needed > held.views[held.n - 1].len) {
        PyErr_SetString(PyExc_ValueError, "new_data is too small for the texts");
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    sl_own_views(views, data, n, out, new_data);
    Py_END_ALLOW_THREADS
    PyMem_Free(data);
    release_all(&held);
    Py_RETURN_NONE;
fail:
    PyMem_Free(data);
    release_all(&held);
    return NULL;
}

/* split_lines(data, max_bytes, views, flags) → lines in data; views/flags (16 and 1 bytes a line) get at most as
 * many lines as flags holds. count_lines(data) → lines in data. */
static PyObject *py_split_lines(PyObject *module, PyObject *args) {
    PyObject *data_o, *views_o, *flags_o;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "OnOO", &data_o, &max_bytes, &views_o, &flags_o)) return NULL;
    held_t held = {NULL, 0};
    const uint8_t *data;
    uint8_t *views, *flags;
    if (!(data = take(&held, data_o, 0, 0, "data")) || !(flags = (uint8_t *)take(&held, flags_o, 0, 1, "flags"))) goto fail;
    Py_ssize_t len = held.views[0].len, capacity = held.views[1].len;
    if (len >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "split_lines takes less than 2 GiB at a time (string views hold 32-bit offsets)");
        goto fail;
    }
    if (!(views = (uint8_t *)take(&held, views_o, 16 * capacity, 1, "views"))) goto fail;
    int64_t found;
    Py_BEGIN_ALLOW_THREADS
    found = sl_split_lines(data, len, 0, max_bytes, views, flags, capacity);
    Py_END_ALLOW_THREADS
    release_all(&held);
    return PyLong_FromLongLong(found);
fail:
    release_all(&held);
    return NULL;
}

static PyObject *py_count_lines(PyObject *module, PyObject *data_o) {
    held_t held = {NULL, 0};
    const uint8_t *data = take(&held, data_o, 0, 0, "data");
    if (!data) {
        release_all(&held);
        return NULL;
    }
    int64_t found;
    Py_ssize_t len = held.views[0].len;
    Py_BEGIN_ALLOW_THREADS
    found = sl_split_lines(data, len, 0, 0, NULL, NULL, 0);
    Py_END_ALLOW_THREADS
    release_all(&held);
    return PyLong_FromLongLong(found);
}

/* The flaws of a chunk of text: its NUL bytes, and whether it is valid UTF-8 as Python's strict decoder has it
 * (no overlong forms, no surrogates, nothing above U+10FFFF). */
static void sl_text_flaws(const uint8_t *s, Py_ssize_t n, Py_ssize_t *nuls, int *valid) {
    Py_ssize_t i = 0, zeros = 0;
    int ok = 1;
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (i < n) {
        if (i + 32 <= n) { /* 32 ASCII bytes without a NUL at a time: the usual text (a word has a NUL byte when
                            * (w - ones) & ~w & highs, exactly) */
            uint64_t w[4];
            memcpy(w, s + i, 32);
            uint64_t high = (w[0] | w[1] | w[2] | w[3]) & highs;
            uint64_t zero = ((w[0] - ones) & ~w[0]) | ((w[1] - ones) & ~w[1]) | ((w[2] - ones) & ~w[2]) | ((w[3] - ones) & ~w[3]);
            if (!(high | (zero & highs))) {
                i += 32;
                continue;
            }
        }
        if (i + 8 <= n) { /* eight at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & highs) && !((w - ones) & ~w & highs)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            zeros += c == 0;
            i++;
            continue;
        }
        if (!ok) {
            i++;
            continue;
        }
        int need;
        uint32_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) need = 2, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) need = 2, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) need = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) need = 3, hi = 0x8F;
        else {
            ok = 0;
            i++;
            continue;
        }
        if (i + need >= n) { /* cut at the end */
            ok = 0;
            i++;
            continue;
        }
        if (s[i + 1] < lo || s[i + 1] > hi) {
            ok = 0;
            i++;
            continue;
        }
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) ok = 0;
        i += ok ? need + 1 : 1;
    }
    *nuls = zeros;
    *valid = ok;
}

/* text_flaws(data) → (NUL bytes, valid UTF-8): one pass, without the GIL. */
static PyObject *py_text_flaws(PyObject *module, PyObject *data_o) {
    held_t held = {NULL, 0};
    const uint8_t *data = take(&held, data_o, 0, 0, "data");
    if (!data) {
        release_all(&held);
        return NULL;
    }
    Py_ssize_t len = held.views[0].len, nuls;
    int valid;
    Py_BEGIN_ALLOW_THREADS
    sl_text_flaws(data, len, &nuls, &valid);
    Py_END_ALLOW_THREADS
    release_all(&held);
    return Py_BuildValue("(nO)", nuls, valid ? Py_True : Py_False);
}

/* joined(parts) → bytes: the parts (buffers) one after the other, copied without the GIL. */
static PyObject *py_joined(PyObject *module, PyObject *parts) {
    PyObject *seq = PySequence_Fast(parts, "joined takes a sequence of buffers");
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), total = 0;
    held_t held = {NULL, 0};
    PyObject *out = NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (!take(&held, PySequence_Fast_GET_ITEM(seq, k), 0, 0, "part")) goto done;
        total += held.views[k].len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *to = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) {
        memcpy(to, held.views[k].buf, (size_t)held.views[k].len);
        to += held.views[k].len;
    }
    Py_END_ALLOW_THREADS
done:
    release_all(&held);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"classify", py_classify, METH_VARARGS, "First matching pattern per row, its captures converted to cells."},
    {"cells", py_cells, METH_VARARGS, "Picked rows' cells into columns."},
    {"own_views", py_own_views, METH_VARARGS, "String views copied so their text lives in one new buffer."},
    {"split_lines", py_split_lines, METH_VARARGS, "Lines of a chunk as string views into it, with odd-line flags."},
    {"count_lines", py_count_lines, METH_O, "Lines of a chunk."},
    {"text_flaws", py_text_flaws, METH_O, "NUL bytes of a chunk, and whether it is valid UTF-8."},
    {"joined", py_joined, METH_O, "Buffers joined into one bytes object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "speclogs.ingest._native",
    "speclogs' native matcher (see native.py): the grammar programs run on Arrow string views.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&PatternsType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Py_INCREF(&PatternsType);
    if (PyModule_AddObject(module, "Patterns", (PyObject *)&PatternsType) < 0) {
        Py_DECREF(&PatternsType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "SET_BYTES", SET_BYTES) < 0 || PyModule_AddIntConstant(module, "FIRST_BYTES", FIRST_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "LINE_ODD", LINE_ODD) < 0 || PyModule_AddIntConstant(module, "LINE_UNBRACKETED", LINE_UNBRACKETED) < 0 ||
        PyModule_AddIntConstant(module, "LINE_TOO_LONG", LINE_TOO_LONG) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
