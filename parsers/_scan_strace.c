/* strace's lines read in one pass: what parsers/strace/line_fields.py reads
 * with RE2 patterns (parsers/strace/grammar.py), for the lines whose head
 * the file's own layout reads (Layout.fast_head) and whose end is one of
 *   ") = 137 <0.000011>"   ") = -1 EAGAIN (Resource temporarily unavailable)"
 *   ") = 1 ([{fd=7, revents=POLLIN}]) <0.042753>"   " <unfinished ...>"
 *   " <detached ...>"
 * read as the reversed tail patterns read them (TAIL_REV_DUR and
 * TAIL_REV_NODUR, on the line's last TAIL_WINDOW bytes). Every other line
 * (signals, exits, strace's own messages, heads in another layout, ends the
 * tail patterns miss, lines cut too short) is left to line_fields (OK 0):
 * the result is the reference's, line for line (tests/test_scan_strace.py).
 */
#include "_scan.h"

#include <math.h>
#include <stdlib.h>

/* Fields of strace_lines' rows; positions are the data buffer's. */
enum {
    L_OK, L_KIND, L_PID, L_PID_OK, L_TS, L_TS_OK, L_HLEN, L_A_STOP, L_NAME, L_NAME_LEN,
    L_RET, L_RET_OK, L_DUR, L_DUR_OK, L_ERR, L_ERR_LEN, L_FIELDS
};
/* parsers/strace/schema.py's kinds. */
enum { K_SYSCALL = 0, K_UNFINISHED = 1, K_RESUMED = 2, K_DETACHED = 3 };
/* The layout code: bit 0 "[pid N] " prefixes (else "N  "), bits 1-2 the
 * timestamp (TS_*), bit 3 -T durations are the file's usual end. */
enum { TS_NONE = 0, TS_NUM = 1, TS_NUM_O = 2, TS_TOD = 3 };
#define TAIL_WINDOW 192
#define PREFETCH_LINES 16
static const int64_t ZERO[L_FIELDS];

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static inline int is_upper_(uint8_t c) { return (c >= 'A' && c <= 'Z') || c == '_'; }

/* The run of digits at d[k..e): its length (any), its value in *v when it is
 * at most 19 digits. */
static inline int64_t run_digits(const uint8_t *d, int64_t k, int64_t e, uint64_t *v)
{
    int64_t n = 0;
    uint64_t x = 0;
    while (k + n < e && is_digit(d[k + n])) {
        if (n < 19) x = x * 10 + (uint64_t)(d[k + n] - '0');
        n++;
    }
    *v = x;
    return n;
}

static const uint64_t POW10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* Microseconds of "SECONDS.FRACTION" (SECONDS of ni digits, FRACTION of nf,
 * 1-9) as values.py's seconds_us gives them: up to 6 fraction digits it
 * reads the text as a double and rounds its microseconds; that is exact
 * below 2^31 seconds, and otherwise done the same way here. More digits are
 * cut to the microsecond. */
static int64_t seconds_us(const uint8_t *d, int64_t at, int64_t len, uint64_t whole, uint64_t frac, int64_t nf)
{
    if (nf > 6)
        return (int64_t)(whole * 1000000 + frac / POW10[nf - 6]);
    if (whole < ((uint64_t)1 << 31))
        return (int64_t)(whole * 1000000 + frac * POW10[6 - nf]);
    char buf[32];
    memcpy(buf, d + at, (size_t)len);
    buf[len] = 0;
    double us = rint(strtod(buf, NULL) * 1e6);
    if (us < 9007199254740992.0)   /* 2^53 */
        return (int64_t)us;
    return (int64_t)(whole * 1000000 + frac * POW10[6 - nf]);
}

/* "DIGITS.DIGITS" at d[k..e), the first run 1..max1 digits, the second 1-9
 * and followed by `after`: the end, or -1. */
static inline int64_t decimal(const uint8_t *d, int64_t k, int64_t e, int64_t max1, uint8_t after,
                              uint64_t *whole, uint64_t *frac, int64_t *nf)
{
    int64_t ni = run_digits(d, k, e, whole);
    if (ni < 1 || ni > max1 || k + ni >= e || d[k + ni] != '.') return -1;
    k += ni + 1;
    *nf = run_digits(d, k, e, frac);
    if (*nf < 1 || *nf > 9 || k + *nf >= e || d[k + *nf] != after) return -1;
    return k + *nf;
}

/* The return value "137", "-1", "0x7f1a34009ba3", "3</etc/ld.so.cache>" at
 * d[a..b), as values.py's parse_ret reads it: 1 when it is a number. */
static int parse_ret(const uint8_t *d, int64_t a, int64_t b, int64_t *ret)
{
    int64_t lt = find(d, a, b, '<');
    if (lt >= 0) b = lt;
    int64_t n = b - a, k;
    if (n < 1) return 0;
    for (k = a; k < b && is_digit(d[k]); k++) ;
    if (k == b && n <= 18) {
        uint64_t v;
        run_digits(d, a, b, &v);
        *ret = (int64_t)v;
        return 1;
    }
    if (d[a] == '-' && n >= 2 && n <= 19) {
        for (k = a + 1; k < b && is_digit(d[k]); k++) ;
        if (k < b) return 0;
        uint64_t v;
        run_digits(d, a + 1, b, &v);
        *ret = -(int64_t)v;
        return 1;
    }
    if (d[a] == '0' && n > 2 && n <= 18 && (d[a + 1] == 'x' || d[a + 1] == 'X')) {
        uint64_t v = 0;
        for (k = a + 2; k < b; k++) {
            uint8_t c = d[k];
            int h = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (h < 0) return 0;
            v = (v << 4) | (uint64_t)h;
        }
        *ret = (int64_t)v;   /* two's complement, as the reference reads hex */
        return 1;
    }
    return 0;
}

/* The end of a completed call, read backwards from e as TAIL_REV_DUR (dur)
 * or TAIL_REV_NODUR reads the reversed window [lo, e):
 *   ^(>\d{1,9}\.\d{1,9}< )?  (\)[^()]*\( )?  ([A-Z_][A-Z0-9_]* )?  [0-9?>][^ ]* = +\)
 * Each part is deterministic (a greedy run stops where the next literal
 * must start), and a failed optional part leaves a byte no later part can
 * start with, so one forward-only reading is the pattern's. Returns the
 * position of the ")" that closes the arguments, or -1. */
static int64_t call_end(const uint8_t *d, int64_t lo, int64_t e, int dur, int64_t *r)
{
    int64_t p = e - 1, q;
    if (dur) {
        /* forwards " <SECONDS.FRACTION>", each 1-9 digits */
        int64_t k = p - 1;
        if (p < lo || d[p] != '>') return -1;
        while (k >= lo && is_digit(d[k])) k--;
        if (k < lo || d[k] != '.') return -1;
        k--;
        while (k >= lo && is_digit(d[k])) k--;
        if (k < lo + 1 || d[k] != '<' || d[k - 1] != ' ') return -1;
        uint64_t whole = 0, frac = 0;
        int64_t nf = 0;
        if (decimal(d, k + 1, e, 9, '>', &whole, &frac, &nf) != p) return -1;
        r[L_DUR] = seconds_us(d, k + 1, p - k - 1, whole, frac, nf);
        r[L_DUR_OK] = 1;
        p = k - 2;
    }
    int64_t err_lo = -1, err_hi = -1;
    if (p >= lo && d[p] == ')') {   /* " (detail)" */
        q = p - 1;
        while (q >= lo && d[q] != '(' && d[q] != ')') q--;
        if (q < lo + 1 || d[q] != '(' || d[q - 1] != ' ') return -1;
        p = q - 2;
    }
    if (p >= lo && is_upper_(d[p])) {   /* " ERRNO" */
        err_hi = p + 1;
        q = p - 1;
        while (q >= lo && (is_upper_(d[q]) || is_digit(d[q]))) q--;
        if (q < lo || d[q] != ' ') return -1;
        err_lo = q + 1;
        p = q - 1;
    }
    if (p < lo || !(is_digit(d[p]) || d[p] == '?' || d[p] == '>')) return -1;
    int64_t v_hi = p + 1;
    q = p - 1;
    while (q >= lo && d[q] != ' ') q--;
    int64_t v_lo = q + 1;
    /* " = " then more blanks, then ")" */
    if (q - 2 < lo || d[q - 1] != '=' || d[q - 2] != ' ') return -1;
    q -= 3;
    while (q >= lo && d[q] == ' ') q--;
    if (q < lo || d[q] != ')') return -1;
    r[L_RET_OK] = parse_ret(d, v_lo, v_hi, &r[L_RET]);
    /* ERRNO, "^ (E[A-Z0-9_]+)", on the errno-and-detail part */
    if (err_lo >= 0 && d[err_lo] == 'E' && err_hi - err_lo >= 2) {
        r[L_ERR] = err_lo;
        r[L_ERR_LEN] = err_hi - err_lo;
    }
    return q;
}

/* The head in the file's layout (Layout.fast_head): pid prefix, timestamp
 * and the token after them, a call's "name(" or "<... name resumed>".
 * Returns where the arguments start, or -1 for any other line. */
static int64_t head(const uint8_t *d, int64_t s, int64_t e, int code, int64_t *r)
{
    int64_t k = s, n;
    uint64_t v;
    if (!(code & 1)) {              /* "2482  " */
        n = run_digits(d, k, e, &v);
        if (n < 1 || n > 9 || k + n >= e || d[k + n] != ' ') return -1;
        r[L_PID] = (int64_t)v;
        r[L_PID_OK] = 1;
        for (k += n; k < e && d[k] == ' '; k++) ;
    } else if (k < e && d[k] == '[') {   /* "[pid  5940] " */
        if (!starts(d, k, e, "[pid ")) return -1;
        for (k += 5; k < e && d[k] == ' '; k++) ;
        n = run_digits(d, k, e, &v);
        if (n < 1 || n > 9 || !starts(d, k + n, e, "] ")) return -1;
        r[L_PID] = (int64_t)v;
        r[L_PID_OK] = 1;
        k += n + 2;
    }
    int ts = (code >> 1) & 3;
    if (ts == TS_NUM || ts == TS_NUM_O) {   /* "1795314016.121249 ", -r's "     0.000288 " */
        if (ts == TS_NUM)
            while (k < e && d[k] == ' ') k++;
        uint64_t whole = 0, frac = 0;
        int64_t nf = 0, end = decimal(d, k, e, 10, ' ', &whole, &frac, &nf);
        if (end < 0) return -1;
        r[L_TS] = seconds_us(d, k, end - k, whole, frac, nf);
        r[L_TS_OK] = 1;
        k = end + 1;
    } else if (ts == TS_TOD) {   /* "02:24:05.260276 ", "02:24:05 " */
        if (e - k < 9 || !is_digit(d[k]) || !is_digit(d[k + 1]) || d[k + 2] != ':' || !is_digit(d[k + 3])
            || !is_digit(d[k + 4]) || d[k + 5] != ':' || !is_digit(d[k + 6]) || !is_digit(d[k + 7]))
            return -1;
        int64_t secs = ((d[k] - '0') * 10 + d[k + 1] - '0') * 3600 + ((d[k + 3] - '0') * 10 + d[k + 4] - '0') * 60
                       + (d[k + 6] - '0') * 10 + d[k + 7] - '0';
        uint64_t frac = 0;
        int64_t nf = 0;
        k += 8;
        if (d[k] == '.') {
            nf = run_digits(d, k + 1, e, &frac);
            if (nf < 1 || nf > 9) return -1;
            k += 1 + nf;
        }
        if (k >= e || d[k] != ' ') return -1;
        r[L_TS] = secs * 1000000 + (int64_t)(nf > 6 ? frac / POW10[nf - 6] : frac * POW10[6 - nf]);
        r[L_TS_OK] = 1;
        k++;
    }
    if (k >= e) return -1;
    uint8_t c = d[k];
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '?') {   /* "write(" */
        int64_t j = k + 1;
        while (j < e && ((d[j] >= 'A' && d[j] <= 'Z') || (d[j] >= 'a' && d[j] <= 'z') || is_digit(d[j])
                         || d[j] == '_' || d[j] == '?'))
            j++;
        if (j >= e || d[j] != '(') return -1;
        r[L_NAME] = k;
        r[L_NAME_LEN] = j - k;
        r[L_KIND] = K_SYSCALL;
        return j + 1;
    }
    if (starts(d, k, e, "<... ")) {   /* "<... read resumed>" */
        int64_t gt = find(d, k + 5, e, '>');
        if (gt < 0 || gt + 1 - k < 13 || memcmp(d + gt - 7, "resumed>", 8) != 0) return -1;
        for (int64_t j = k; j < gt; j++)
            if (d[j] >= 0x80) return -1;   /* the name is cut by characters, not bytes */
        r[L_NAME] = k + 5;
        r[L_NAME_LEN] = gt - 8 - (k + 5) > 0 ? gt - 8 - (k + 5) : 0;
        r[L_KIND] = K_RESUMED;
        return gt + 1;
    }
    return -1;
}

static inline int ends(const uint8_t *d, int64_t s, int64_t e, const char *lit, int64_t n)
{
    return e - s >= n && memcmp(d + e - n, lit, (size_t)n) == 0;
}

/* strace_lines(offsets, first, n, data, out int64[L_FIELDS, n], code): each
 * line's fields where line_fields would read the same (OK 1; a field's
 * values are one row of out), code the file's Layout (see above). */
PyObject *strace_lines(PyObject *self, PyObject *args)
{
    Lines L;
    int code;
    if (lines_open(args, &L, sizeof(int64_t), L_FIELDS, &code) < 0) { lines_close(&L); return NULL; }
    int64_t *out = (int64_t *)L.out.buf;
    const uint8_t *d = L.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t r[L_FIELDS], s = L.o[i], e = L.o[i + 1];
        memcpy(r, ZERO, sizeof r);   /* not "= {0}": gcc zeroes that with rep stos, slow to start */
        /* A line's end is read after its head: in a block that is not in
         * the cache, that load waited for memory on every line (a third of
         * the scan's time) until asked for lines ahead. */
        if (i + PREFETCH_LINES < L.n) __builtin_prefetch(d + L.o[i + PREFETCH_LINES + 1] - 1);
        int64_t a = head(d, s, e, code, r);
        if (a < 0) goto done;
        r[L_HLEN] = a - s;
        int64_t stop = -1;
        /* both end "...>"; a call's duration ends in a digit and ">" */
        int dots = r[L_KIND] == K_SYSCALL && e - s >= 15 && d[e - 2] == '.';
        if (dots && ends(d, s, e, "<unfinished ...>", 16)) {
            if (e - 16 < a) goto done;   /* the reference calls it truncated */
            stop = e - (ends(d, s, e, " <unfinished ...>", 17) ? 17 : 16);
            r[L_KIND] = K_UNFINISHED;
        } else if (dots && ends(d, s, e, " <detached ...>", 15)) {
            stop = e - 15;
            r[L_KIND] = K_DETACHED;
        }
        if (stop >= 0) {
            r[L_A_STOP] = (stop > a ? stop : a) - s;
            r[L_OK] = 1;
            goto done;
        }
        int64_t lo = e - s > TAIL_WINDOW ? e - TAIL_WINDOW : s;
        int dur = (code >> 3) & 1;
        for (int attempt = 0; attempt < 2 && stop < 0; attempt++, dur = !dur) {
            memset(r + L_RET, 0, (L_FIELDS - L_RET) * sizeof *r);
            stop = call_end(d, lo, e, dur, r);
        }
        if (stop < a) {   /* neither pattern, or ")" inside the head: the reference's */
            memset(r + L_RET, 0, (L_FIELDS - L_RET) * sizeof *r);
            goto done;
        }
        r[L_A_STOP] = stop - s;
        r[L_OK] = 1;
    done:
        if (!r[L_OK]) memset(r, 0, sizeof r);
        for (int f = 0; f < L_FIELDS; f++) out[f * L.n + i] = r[f];
    }
    Py_END_ALLOW_THREADS
    lines_close(&L);
    Py_RETURN_NONE;
}

/* Fields of first_fds' rows. */
enum { F_RUN, F_FD, F_ANNOTATED, F_INFO, F_INFO_LEN, F_FIELDS };

/* first_fds(offsets, first, n, data, out int64[F_FIELDS, n]): the first
 * argument of each row's arguments read as rows.py's _first_fd reads it:
 * "7<TCP:[...]>, " "3, " "3</etc/ld.so.cache>" "1</dev/pts/0<char 136:0>>, ".
 * RUN: its 1-9 digits, followed by the end, "," or "<" (else 0); FD their
 * value; ANNOTATED: a "<" follows them; INFO, INFO_LEN: the -y annotation between "<" and the ">" before
 * the first ">, " (or the last byte, a ">"), INFO -1 when there is none
 * after "<" or it is empty of a closing ">". Whether an unannotated integer
 * is an fd depends on the call: the caller asks. */
PyObject *first_fds(PyObject *self, PyObject *args)
{
    Lines L;
    if (lines_open(args, &L, sizeof(int64_t), F_FIELDS, NULL) < 0) { lines_close(&L); return NULL; }
    int64_t *out = (int64_t *)L.out.buf;
    const uint8_t *d = L.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t s = L.o[i], e = L.o[i + 1], k = s, v = 0, run = 0, ann = 0, info = -1, info_len = 0;
        while (k < e && k - s < 10 && is_digit(d[k])) { v = v * 10 + (d[k] - '0'); k++; }
        run = k - s;
        if (run >= 1 && run <= 9 && (k == e || d[k] == ',' || d[k] == '<')) {
            if (k < e && d[k] == '<') {
                ann = 1;
                int64_t g = k, end = -1;   /* the first ">, " */
                while ((g = find(d, g + 1, e - 2, '>')) >= 0 && (d[g + 1] != ',' || d[g + 2] != ' ')) ;
                end = g >= 0 ? g - s : (d[e - 1] == '>' ? e - 1 - s : -1);
                if (end > run) {
                    info = k + 1;
                    info_len = end - run - 1;
                }
            }
        } else {
            run = 0;
            v = 0;
        }
        out[F_RUN * L.n + i] = run;
        out[F_FD * L.n + i] = v;
        out[F_ANNOTATED * L.n + i] = ann;
        out[F_INFO * L.n + i] = info;
        out[F_INFO_LEN * L.n + i] = info_len;
    }
    Py_END_ALLOW_THREADS
    lines_close(&L);
    Py_RETURN_NONE;
}

/* quoted_data(offsets, first, n, data, out int64[Q_FIELDS, n], mask uint8[n],
 * data_out): the first C string of each masked row's arguments, as rows.py's
 * _data finds it (QUOTED: the text between the first '"' and the next '"'
 * not escaped by a backslash) and decodes it where its only escapes are
 * \n \t \r \" (the log lines a program writes): Q_STATUS 1, the text at
 * data_out[Q_AT .. Q_AT + Q_LEN). Q_STATUS 2: other escapes, which the
 * caller decodes from the raw text at data[Q_AT .. Q_AT + Q_LEN); 0: no
 * string. */
enum { Q_STATUS, Q_AT, Q_LEN, Q_FIELDS };

PyObject *quoted_data(PyObject *self, PyObject *args)
{
    Lines L = {0};
    Py_buffer mask = {0}, dout = {0};
    int ok = PyArg_ParseTuple(args, "y*nny*w*y*w*", &L.off, &L.first, &L.n, &L.data, &L.out, &mask, &dout)
             && lines_check(&L, sizeof(int64_t), Q_FIELDS) == 0;
    if (ok && (mask.len < L.n || dout.len < L.o[L.n] - L.o[0])) {
        PyErr_SetString(PyExc_ValueError, "quoted_data: mask or output data too small");
        ok = 0;
    }
    if (ok) {
        int64_t *out = (int64_t *)L.out.buf;
        const uint8_t *d = L.d, *m = (const uint8_t *)mask.buf;
        uint8_t *w = (uint8_t *)dout.buf;
        Py_BEGIN_ALLOW_THREADS
        int64_t at = 0;
        for (Py_ssize_t i = 0; i < L.n; i++) {
            int64_t s = L.o[i], e = L.o[i + 1], status = 0, q0 = 0, len = 0;
            int64_t k = m[i] ? find(d, s, e, '"') : -1;
            if (k >= 0) {
                int hard = 0;
                q0 = ++k;
                while (k < e && d[k] != '"') {
                    if (d[k] == '\\') {
                        if (k + 1 >= e) break;
                        uint8_t x = d[k + 1];
                        hard |= !(x == 'n' || x == 't' || x == 'r' || x == '"');
                        k += 2;
                    } else {
                        k++;
                    }
                }
                if (k < e && d[k] == '"') {   /* the closing '"' (not a lone '\' at the end) */
                    status = hard ? 2 : 1;
                    len = k - q0;
                    if (!hard) {   /* decoded into the output */
                        int64_t j = q0, o = at;
                        while (j < k) {
                            uint8_t c = d[j];
                            if (c == '\\') {
                                uint8_t x = d[j + 1];
                                w[o++] = x == 'n' ? '\n' : x == 't' ? '\t' : x == 'r' ? '\r' : '"';
                                j += 2;
                            } else {
                                const uint8_t *b = memchr(d + j, '\\', (size_t)(k - j));
                                int64_t run = b ? (int64_t)(b - d) - j : k - j;
                                memcpy(w + o, d + j, (size_t)run);
                                o += run;
                                j += run;
                            }
                        }
                        q0 = at;
                        len = o - at;
                        at = o;
                    }
                }
            }
            out[Q_STATUS * L.n + i] = status;
            out[Q_AT * L.n + i] = q0;
            out[Q_LEN * L.n + i] = len;
        }
        Py_END_ALLOW_THREADS
    }
    lines_close(&L);
    if (mask.obj) PyBuffer_Release(&mask);
    if (dout.obj) PyBuffer_Release(&dout);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* edge_bytes(offsets, first, n, data, out uint8[2], bytes): out[0] 1 when a
 * line starts with the byte bytes & 0xff, out[1] when one ends with the
 * byte bytes >> 8 (a pasted excerpt's quote marker, a CRLF file's "\r"). */
PyObject *edge_bytes(PyObject *self, PyObject *args)
{
    Lines L;
    int bytes;
    if (lines_open(args, &L, 0, 0, &bytes) < 0) { lines_close(&L); return NULL; }
    uint8_t *out = (uint8_t *)L.out.buf, f = (uint8_t)(bytes & 0xff), l = (uint8_t)(bytes >> 8);
    if (L.out.len < 2) {
        lines_close(&L);
        PyErr_SetString(PyExc_ValueError, "edge_bytes: out holds 2 bytes");
        return NULL;
    }
    int first = 0, last = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n && !(first && last); i++) {
        int64_t s = L.o[i], e = L.o[i + 1];
        if (i + PREFETCH_LINES < L.n) __builtin_prefetch(L.d + L.o[i + PREFETCH_LINES + 1] - 1);
        if (e > s) {
            first |= L.d[s] == f;
            last |= L.d[e - 1] == l;
        }
    }
    Py_END_ALLOW_THREADS
    out[0] = (uint8_t)first;
    out[1] = (uint8_t)last;
    lines_close(&L);
    Py_RETURN_NONE;
}

/* ends_with(offsets, first, n, data, out uint8[n], suffix): out[i] set to 1
 * where line i ends with suffix (left as it was elsewhere, so that several
 * suffixes add up). */
PyObject *ends_with(PyObject *self, PyObject *args)
{
    Lines L = {0};
    Py_buffer suffix = {0};
    int ok = PyArg_ParseTuple(args, "y*nny*w*y*", &L.off, &L.first, &L.n, &L.data, &L.out, &suffix)
             && lines_check(&L, 1, 1) == 0;
    if (ok && suffix.len < 1) {
        PyErr_SetString(PyExc_ValueError, "ends_with: an empty suffix");
        ok = 0;
    }
    if (ok) {
        uint8_t *out = (uint8_t *)L.out.buf;
        const uint8_t *x = (const uint8_t *)suffix.buf, *d = L.d;
        int64_t m = suffix.len;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < L.n; i++) {
            int64_t e = L.o[i + 1];
            if (i + PREFETCH_LINES < L.n) __builtin_prefetch(d + L.o[i + PREFETCH_LINES + 1] - 1);
            if (e - L.o[i] >= m && d[e - 1] == x[m - 1] && memcmp(d + e - m, x, (size_t)m) == 0)
                out[i] = 1;
        }
        Py_END_ALLOW_THREADS
    }
    lines_close(&L);
    if (suffix.obj) PyBuffer_Release(&suffix);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}
