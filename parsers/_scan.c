/* One pass over a chunk's lines in compiled code, for the parsers' hottest
 * steps. Each function reads an Arrow string array's own buffers (32-bit
 * offsets and data, as parsers/strings.py hands them over) and fills a
 * caller's numpy array; the Python it stands in for (parsers/scan.py) is the
 * reference the tests compare it with, line for line. The GIL is let go:
 * the ingest parses chunks on several threads.
 *
 * Needs only Python's headers; built by pip (setup.py) with the system's C
 * compiler, and optional: without it the parsers run the reference.
 */

#include "_scan.h"

/* Whether d[k] begins a mangle_candidates mark: "<", "&", "`", "](" or a
 * no-break space (C2 A0). */
static inline int mangle_at(const uint8_t *d, int64_t k, int64_t e)
{
    uint8_t c = d[k];
    return c == '<' || c == '&' || c == '`' || (k + 1 < e && ((c == ']' && d[k + 1] == '(')
                                                             || (c == 0xC2 && d[k + 1] == 0xA0)));
}

/* Whether d[s, e) holds a mark: one pass, 16 bytes compared to all five
 * first bytes at once, where a call to memchr for each byte over the whole
 * line was 3 % of an async producer's log parse (2026-12-01). */
static inline int mangle_bytes(const uint8_t *d, int64_t s, int64_t e)
{
    int64_t k = s;
#ifdef __SSE2__
    const __m128i lt = _mm_set1_epi8('<'), amp = _mm_set1_epi8('&'), tick = _mm_set1_epi8('`'),
                  close = _mm_set1_epi8(']'), c2 = _mm_set1_epi8((char)0xC2);
    for (; e - k >= 16; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(d + k));
        __m128i any = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, lt), _mm_cmpeq_epi8(v, amp)),
                                   _mm_or_si128(_mm_cmpeq_epi8(v, tick),
                                                _mm_or_si128(_mm_cmpeq_epi8(v, close), _mm_cmpeq_epi8(v, c2))));
        for (unsigned hit = (unsigned)_mm_movemask_epi8(any); hit; hit &= hit - 1)
            if (mangle_at(d, k + __builtin_ctz(hit), e)) return 1;
    }
#endif
    for (; k < e; k++)
        if (mangle_at(d, k, e)) return 1;
    return 0;
}

/* mangle_candidates(offsets, first, n, data, out uint8[n]): 1 for each line
 * that chat or markdown may have changed, a superset of what
 * rdkafka_log/wrapped.unmangle's literal checks flag: it holds "<", "&", "`",
 * "](" or a no-break space (C2 A0), or its first byte past any control
 * character or space is ">" or a byte of a multi-byte character (which may be
 * Unicode whitespace before a ">"). unmangle's regex then decides, as
 * before, so the result is the reference's. */
static PyObject *mangle_candidates(PyObject *self, PyObject *args)
{
    Lines L;
    if (lines_open(args, &L, 1, 1, NULL) < 0) { lines_close(&L); return NULL; }
    uint8_t *out = (uint8_t *)L.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t s = L.o[i], e = L.o[i + 1];
        int64_t k = past_blanks(L.d, s, e);
        out[i] = (k < e && (L.d[k] == '>' || L.d[k] >= 0x80)) || mangle_bytes(L.d, s, e);
    }
    Py_END_ALLOW_THREADS
    lines_close(&L);
    Py_RETURN_NONE;
}

/* fence_candidates(offsets, first, n, data, out uint8[n]): 1 for each line
 * whose first bytes past any control character or space are "```" or
 * "~~~": a superset of the lines strace/markup.fences' regex
 * (^\s*(?:```|~~~)[^`]*$) matches, which then decides on these alone. */
static PyObject *fence_candidates(PyObject *self, PyObject *args)
{
    Lines L;
    if (lines_open(args, &L, 1, 1, NULL) < 0) { lines_close(&L); return NULL; }
    uint8_t *out = (uint8_t *)L.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t e = L.o[i + 1], k = past_blanks(L.d, L.o[i], e);
        out[i] = e - k >= 3 && ((L.d[k] == '`' && L.d[k + 1] == '`' && L.d[k + 2] == '`')
                                || (L.d[k] == '~' && L.d[k + 1] == '~' && L.d[k + 2] == '~'));
    }
    Py_END_ALLOW_THREADS
    lines_close(&L);
    Py_RETURN_NONE;
}

/* Fields of rdkafka_plain_cut's rows, as parsers/scan.py names them. */
enum { P_OK, P_MS, P_P2, P_P3, P_P4, P_THRD, P_CLOSE, P_REST, P_CAND, P_SPACE, P_FIELDS };

/* rdkafka_plain_cut(offsets, first, n, data, out int64[n, P_FIELDS]): each
 * line cut as librdkafka's stderr format lays it out,
 * "%%%i|%u.%03u|%s|%s| %s" (rd_kafka_log_print()), with the message's
 * " [thrd:NAME]: " and "BROKER: " cut at their first "]" and " ". Positions
 * are into data. OK is 0 where the line is not of that shape; the facility
 * and the broker name are left to the caller's patterns. */
static PyObject *rdkafka_plain_cut(PyObject *self, PyObject *args)
{
    Lines L;
    if (lines_open(args, &L, sizeof(int64_t), P_FIELDS, NULL) < 0) { lines_close(&L); return NULL; }
    int64_t *out = (int64_t *)L.out.buf;
    const uint8_t *d = L.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t *r = out + i * P_FIELDS;
        int64_t s = L.o[i], e = L.o[i + 1];
        memset(r, 0, P_FIELDS * sizeof *r);
        r[P_CLOSE] = r[P_SPACE] = -1;
        if (e - s < 10 || d[s] != '%' || d[s + 2] != '|' || d[s + 1] < '0' || d[s + 1] > '7')
            continue;
        int64_t p2 = find(d, s + 3, e, '|');
        int64_t p3 = p2 < 0 ? -1 : find(d, p2 + 1, e, '|');
        int64_t p4 = p3 < 0 ? -1 : find(d, p3 + 1, e, '|');
        if (p4 < 0 || p4 + 1 >= e || d[p4 + 1] != ' ')
            continue;
        /* "%u.%03u": 1 to 12 digits, ".", 3 digits. */
        int64_t ts_len = p2 - s - 3;
        if (ts_len < 5 || ts_len > 16)
            continue;
        int64_t ms = 0;
        int good = 1;
        for (int64_t c = 0; c < ts_len && good; c++) {
            uint8_t b = d[s + 3 + c];
            if (c == ts_len - 4) good = b == '.';
            else if (b >= '0' && b <= '9') ms = ms * 10 + (b - '0');
            else good = 0;
        }
        if (!good)
            continue;
        r[P_OK] = 1;
        r[P_MS] = ms;
        r[P_P2] = p2;
        r[P_P3] = p3;
        r[P_P4] = p4;
        int64_t rest = p4 + 2;
        if (e - p4 - 1 >= 7 && memcmp(d + p4 + 1, " [thrd:", 7) == 0) {
            int64_t close = find(d, p4 + 8, e, ']');
            r[P_CLOSE] = close;
            if (close >= 0 && close + 2 < e && d[close + 1] == ':' && d[close + 2] == ' ') {
                r[P_THRD] = 1;
                rest = close + 3;
            }
        }
        r[P_REST] = rest;
        int64_t space = find(d, rest, e, ' ');
        r[P_SPACE] = space;
        r[P_CAND] = space >= 0 && space - 1 > rest && d[space - 1] == ':';
    }
    Py_END_ALLOW_THREADS
    lines_close(&L);
    Py_RETURN_NONE;
}

/* n bytes from src to dst in fixed 32-byte moves where both have room
 * for the rounded-up length (the source read past the piece but inside its
 * buffer; the bytes written past it are the next piece's to overwrite):
 * glibc's memcpy, chosen and dispatched for each call, cost more than the
 * copy for pieces of 5-100 bytes. */
static inline void copy_piece(uint8_t *dst, const uint8_t *src, int64_t n, int64_t dst_room, int64_t src_room)
{
    int64_t r = (n + 31) & ~(int64_t)31;
    if (r > dst_room || r > src_room) {
        memcpy(dst, src, (size_t)n);
        return;
    }
    for (int64_t k = 0; k < r; k += 32) memcpy(dst + k, src + k, 32);
}

/* An optional sel, args[at]: int64 indices of the lines to read (all n
 * when absent or None), each checked to lie among them. Reading the chosen
 * lines where they lie spares a take() that copied every one of their
 * texts (the scans' positions are into data all the same). */
typedef struct { Py_buffer sel; const int64_t *at; Py_ssize_t n; } Sel;

static int sel_take(PyObject *args, Py_ssize_t at, Sel *S, Py_ssize_t n)
{
    memset(S, 0, sizeof *S);
    S->n = n;
    if (PyTuple_GET_SIZE(args) <= at || PyTuple_GET_ITEM(args, at) == Py_None)
        return 0;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, at), &S->sel, PyBUF_SIMPLE) < 0)
        return -1;
    S->at = (const int64_t *)S->sel.buf;
    S->n = S->sel.len / (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t t = 0; t < S->n; t++)
        if (S->at[t] < 0 || S->at[t] >= n) {
            PyErr_SetString(PyExc_ValueError, "sel: a line index outside the lines");
            return -1;
        }
    return 0;
}

/* plain_columns(offsets, first, n, data, cut int64[n, P_FIELDS], sel int64[k]
 * or None): the strings of the plain lines sel picks (all when None), cut
 * as rdkafka_plain_cut found them, as five Arrow string columns (facility,
 * client, thread, broker, text), each an (offsets int32[k + 1], data) pair
 * of bytearrays; then each line's level (int8), where its broker candidate
 * differs from the candidate before it (uint8: the caller's pattern needs
 * to see only those), and how many facilities hold a byte outside
 * [A-Za-z0-9_-] (plain.py's _FACILITY). A thread or a broker the line
 * lacks is empty (the caller makes it null); the text follows the broker
 * where the line has one (P_CAND) and the caller's pattern agrees. One
 * pass copies each line's five pieces while it is in cache: five passes
 * over a chunk of lines, one a column, cost three times the copying. */
enum { C_FAC, C_CLIENT, C_THREAD, C_BROKER, C_TEXT, C_COLS };

static inline void plain_pieces(const int64_t *r, int64_t s, int64_t e, int64_t lo[C_COLS], int64_t hi[C_COLS])
{
    lo[C_FAC] = r[P_P2] + 1;      hi[C_FAC] = r[P_P3];
    lo[C_CLIENT] = r[P_P3] + 1;   hi[C_CLIENT] = r[P_P4];
    if (r[P_THRD] == 1) { lo[C_THREAD] = r[P_P4] + 8; hi[C_THREAD] = r[P_CLOSE]; }
    else lo[C_THREAD] = hi[C_THREAD] = s;
    if (r[P_CAND] == 1) { lo[C_BROKER] = r[P_REST]; hi[C_BROKER] = r[P_SPACE] - 1; }
    else lo[C_BROKER] = hi[C_BROKER] = s;
    lo[C_TEXT] = r[P_CAND] == 1 ? r[P_SPACE] + 1 : r[P_REST];
    hi[C_TEXT] = e;
}

static PyObject *plain_columns(PyObject *self, PyObject *args)
{
    Lines L;
    memset(&L, 0, sizeof L);
    Sel S;
    memset(&S, 0, sizeof S);
    PyObject *five = PyTuple_GetSlice(args, 0, 5), *result = NULL, *bufs[2 * C_COLS] = {0};
    PyObject *level = NULL, *fresh = NULL;
    int opened = five ? lines_open(five, &L, sizeof(int64_t), P_FIELDS, NULL) : -1;
    Py_XDECREF(five);
    if (opened < 0 || sel_take(args, 5, &S, L.n) < 0) goto done;
    const int64_t *at = S.at, *cut = (const int64_t *)L.out.buf;
    Py_ssize_t k = S.n;
    int64_t size[C_COLS] = {0};
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; ok && t < k; t++) {
        Py_ssize_t i = at ? at[t] : t;
        const int64_t *r = cut + i * P_FIELDS;
        int64_t s = L.o[i], e = L.o[i + 1], lo[C_COLS], hi[C_COLS];
        plain_pieces(r, s, e, lo, hi);
        ok = r[P_OK] == 1;
        for (int c = 0; ok && c < C_COLS; c++) {
            ok = s <= lo[c] && lo[c] <= hi[c] && hi[c] <= e;
            size[c] += hi[c] - lo[c];
        }
    }
    Py_END_ALLOW_THREADS
    for (int c = 0; ok && c < C_COLS; c++) ok = size[c] <= INT32_MAX;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "plain_columns: a line not cut as plain");
        goto done;
    }
    for (int c = 0; c < C_COLS; c++) {
        bufs[2 * c] = PyByteArray_FromStringAndSize(NULL, (k + 1) * (Py_ssize_t)sizeof(int32_t));
        bufs[2 * c + 1] = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size[c] + 32);
        if (!bufs[2 * c] || !bufs[2 * c + 1]) goto done;
    }
    level = PyByteArray_FromStringAndSize(NULL, k);
    fresh = PyByteArray_FromStringAndSize(NULL, k);
    if (!level || !fresh) goto done;
    int8_t *lv = (int8_t *)PyByteArray_AS_STRING(level);
    uint8_t *fr = (uint8_t *)PyByteArray_AS_STRING(fresh);
    Py_ssize_t bad_facility = 0;
    int32_t *off[C_COLS];
    uint8_t *dst[C_COLS];
    for (int c = 0; c < C_COLS; c++) {
        off[c] = (int32_t *)PyByteArray_AS_STRING(bufs[2 * c]);
        dst[c] = (uint8_t *)PyByteArray_AS_STRING(bufs[2 * c + 1]);
        off[c][0] = 0;
    }
    Py_BEGIN_ALLOW_THREADS
    int64_t pos[C_COLS] = {0}, prev_lo = -1, prev_len = -1;
    for (Py_ssize_t t = 0; t < k; t++) {
        Py_ssize_t i = at ? at[t] : t;
        int64_t s = L.o[i], e = L.o[i + 1], lo[C_COLS], hi[C_COLS];
        if (t + 16 < k) __builtin_prefetch(L.d + L.o[at ? at[t + 16] : t + 16]);
        plain_pieces(cut + i * P_FIELDS, s, e, lo, hi);
        lv[t] = (int8_t)(L.d[s + 1] - '0');
        for (int64_t j = lo[C_FAC]; j < hi[C_FAC]; j++) {
            uint8_t b = L.d[j];
            if (!((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == '_' || b == '-')) {
                bad_facility++;
                break;
            }
        }
        fr[t] = 0;
        if (cut[i * P_FIELDS + P_CAND] == 1) {
            int64_t n = hi[C_BROKER] - lo[C_BROKER];
            fr[t] = n != prev_len || memcmp(L.d + lo[C_BROKER], L.d + prev_lo, (size_t)n) != 0;
            prev_lo = lo[C_BROKER];
            prev_len = n;
        }
        for (int c = 0; c < C_COLS; c++) {
            int64_t m = hi[c] - lo[c];
            copy_piece(dst[c] + pos[c], L.d + lo[c], m, size[c] + 32 - pos[c], L.data.len - lo[c]);
            pos[c] += m;
            off[c][t + 1] = (int32_t)pos[c];
        }
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_New(2 * C_COLS + 3);
    for (int c = 0; result && c < 2 * C_COLS; c++) {
        PyTuple_SET_ITEM(result, c, bufs[c]);
        bufs[c] = NULL;
    }
    if (result) {
        PyTuple_SET_ITEM(result, 2 * C_COLS, level);
        PyTuple_SET_ITEM(result, 2 * C_COLS + 1, fresh);
        level = fresh = NULL;
        PyObject *bad = PyLong_FromSsize_t(bad_facility);
        if (!bad) Py_CLEAR(result);
        else PyTuple_SET_ITEM(result, 2 * C_COLS + 2, bad);
    }
done:
    for (int c = 0; c < 2 * C_COLS; c++) Py_XDECREF(bufs[c]);
    Py_XDECREF(level);
    Py_XDECREF(fresh);
    if (S.sel.obj) PyBuffer_Release(&S.sel);
    lines_close(&L);
    return result;
}

/* needle_flags(offsets, first, n, data, out uint32[n], needles, anywhere):
 * bit k of each line's flags set when needles[k] (bytes) begins the line,
 * or, where anywhere[k] is nonzero, stands anywhere in it; what Arrow's
 * starts_with and match_substring tell, in one pass instead of one a
 * needle. At most 32 needles. */
/* Whether x (m >= 1 bytes) stands in d[0, n): memchr for its anchor, the
 * byte of x least likely in text (at offset a of x), then a compare. glibc's
 * memmem builds a table for each needle on every call, which cost more than
 * the search in lines of ~100 bytes; anchoring on x's first byte stopped at
 * every space for " in xmit queue" (memcmp was 8.5 % of a log's parse). */
static inline int contains(const uint8_t *d, int64_t n, const uint8_t *x, int64_t m, int64_t a)
{
    const uint8_t *p = d + a, *end = d + n - m + 1 + a;
    while (p < end && (p = memchr(p, x[a], (size_t)(end - p))) != NULL) {
        /* The needle's first and last bytes before a call to memcmp: most
         * anchors found are not the needle, and the call cost more than the
         * compare (a fifth of an async producer's log parse). */
        const uint8_t *q = p - a;
        if (q[0] == x[0] && q[m - 1] == x[m - 1] && (m <= 2 || memcmp(q + 1, x + 1, (size_t)(m - 2)) == 0))
            return 1;
        p++;
    }
    return 0;
}

/* How often a byte stands in log text, roughly: space and the common
 * lowercase letters most, rarer letters and punctuation less. */
static int byte_rank(uint8_t c)
{
    static const char common[] = " etaoinsrhldcumfpgwybv";   /* most common first */
    const char *at = c ? strchr(common, c) : NULL;
    if (at) return 100 - (int)(at - common);
    if (c >= '0' && c <= '9') return 60;
    /* librdkafka's lines hold several of each ("[thrd:ssl://h:9093/1]: "). */
    if (c && strchr(":/.|[](),", c)) return 55;
    if (c >= 'a' && c <= 'z') return 50;
    return 40;
}

static int64_t anchor_of(const uint8_t *x, int64_t m)
{
    int64_t best = 0;
    for (int64_t j = 1; j < m; j++)
        if (byte_rank(x[j]) < byte_rank(x[best])) best = j;
    return best;
}

static PyObject *needle_flags(PyObject *self, PyObject *args)
{
    Lines L;
    memset(&L, 0, sizeof L);
    PyObject *needles, *skip, *lines = PyTuple_GetSlice(args, 0, 5);   /* the scan's usual five */
    Py_buffer anywhere = {0};
    int opened = lines ? lines_open(lines, &L, sizeof(uint32_t), 1, NULL) : -1;
    Py_XDECREF(lines);
    if (opened < 0 || !PyArg_ParseTuple(args, "OOOOOO!y*", &skip, &skip, &skip, &skip, &skip, &PyTuple_Type,
                                        &needles, &anywhere)) {
        lines_close(&L);
        return NULL;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(needles);
    const char *nd[32];
    Py_ssize_t nl[32];
    int64_t at[32];
    int bad = k > 32 || anywhere.len < k;
    for (Py_ssize_t j = 0; !bad && j < k; j++) {
        PyObject *b = PyTuple_GET_ITEM(needles, j);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) == 0) bad = 1;
        else {
            nd[j] = PyBytes_AS_STRING(b);
            nl[j] = PyBytes_GET_SIZE(b);
            at[j] = anchor_of((const uint8_t *)nd[j], nl[j]);
        }
    }
    if (bad) {
        PyBuffer_Release(&anywhere);
        lines_close(&L);
        PyErr_SetString(PyExc_ValueError, "needle_flags: needles not 1 to 32 non-empty bytes");
        return NULL;
    }
    const uint8_t *any = (const uint8_t *)anywhere.buf;
    uint32_t *out = (uint32_t *)L.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < L.n; i++) {
        int64_t s = L.o[i], e = L.o[i + 1];
        uint32_t f = 0;
        for (Py_ssize_t j = 0; j < k; j++) {
            if (nl[j] > e - s) continue;
            if (any[j] ? contains(L.d + s, e - s, (const uint8_t *)nd[j], nl[j], at[j])
                       : L.d[s] == (uint8_t)nd[j][0] && memcmp(L.d + s, nd[j], (size_t)nl[j]) == 0)
                f |= (uint32_t)1 << j;
        }
        out[i] = f;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&anywhere);
    lines_close(&L);
    Py_RETURN_NONE;
}

/* Bytes [p, e) are UTF-8 as RFC 3629 has it (what Arrow's full validation
 * accepts): no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_ok(const uint8_t *p, const uint8_t *e)
{
    while (p < e) {
        if (e - p >= 8) {   /* eight ASCII bytes at once */
            uint64_t w;
            memcpy(&w, p, 8);
            if (!(w & 0x8080808080808080ULL)) { p += 8; continue; }
        }
        uint8_t c = *p;
        if (c < 0x80) { p++; continue; }
        Py_ssize_t len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
        else return 0;
        if (e - p < len || p[1] < lo || p[1] > hi) return 0;
        for (Py_ssize_t k = 2; k < len; k++)
            if ((p[k] & 0xC0) != 0x80) return 0;
        p += len;
    }
    return 1;
}

/* split_lines(block, data_out uint8[len(block)], offsets_out int32[count("\n") + 2])
 * -> (lines, data bytes, longest line, is UTF-8): the block's lines as an
 * Arrow string array's buffers, each line without its "\n" and a "\r"
 * before it, as kdiag/ingest/lines._to_chunk makes them with numpy. The
 * longest line is measured with its "\r". Lines is -1 when offsets_out
 * holds too few (the caller counts the lines and asks again). */
static PyObject *split_lines(PyObject *self, PyObject *args)
{
    Py_buffer in = {0}, data = {0}, offs = {0};
    if (!PyArg_ParseTuple(args, "y*w*w*", &in, &data, &offs))
        return NULL;
    const uint8_t *b = (const uint8_t *)in.buf;
    uint8_t *out = (uint8_t *)data.buf;
    int32_t *o = (int32_t *)offs.buf;
    Py_ssize_t len = in.len, cap = offs.len / (Py_ssize_t)sizeof(int32_t), n = 0, at = 0, longest = 0;
    int ok = 1, fits = len <= INT32_MAX && data.len >= len;
    if (fits) {
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t s = 0;
        o[0] = 0;
        for (;;) {
            const uint8_t *nl = s < len ? memchr(b + s, '\n', (size_t)(len - s)) : NULL;
            Py_ssize_t e = nl ? (Py_ssize_t)(nl - b) : len;
            if (n + 2 > cap) { n = -1; break; }
            Py_ssize_t keep = e - s - (e > s && b[e - 1] == '\r');
            if (e - s > longest) longest = e - s;
            memcpy(out + at, b + s, (size_t)keep);
            if (ok) ok = utf8_ok(out + at, out + at + keep);
            at += keep;
            o[++n] = (int32_t)at;
            if (!nl) break;
            s = e + 1;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "split_lines: the data buffer too small, or a block past 2 GiB");
        return NULL;
    }
    return Py_BuildValue("nnnO", n, at, longest, ok ? Py_True : Py_False);
}

/* The event reads' arguments: the scan's usual six (offsets, first, n,
 * data, out, flag) and, optionally, sel (see sel_take), out's rows then one
 * per index. */
static int sel_open(PyObject *args, Lines *L, Sel *S, Py_ssize_t per_line, int *flag)
{
    memset(S, 0, sizeof *S);
    memset(L, 0, sizeof *L);
    PyObject *six = PyTuple_GetSlice(args, 0, 6);
    int opened = six ? lines_open(six, L, sizeof(int64_t), 0, flag) : -1;
    Py_XDECREF(six);
    if (opened < 0 || sel_take(args, 6, S, L->n) < 0) return -1;
    if (L->out.len < S->n * (Py_ssize_t)sizeof(int64_t) * per_line) {
        PyErr_SetString(PyExc_ValueError, "out too small for the lines asked for");
        return -1;
    }
    return 0;
}

static void sel_close(Lines *L, Sel *S)
{
    if (S->sel.obj) PyBuffer_Release(&S->sel);
    lines_close(L);
}

/* Fields of sent_received's rows. */
enum { S_OK, S_REQ, S_REQ_END, S_API, S_API_OK, S_SIZE, S_CORR, S_RTT_OK, S_RTT_N, S_RTT_F, S_FIELDS };

/* sent_received(offsets, first, n, data, out int64[n, S_FIELDS], recv[, sel]):
 * librdkafka's request lines, as rdkafka_broker.c prints them:
 *   send: "Sent %sRequest (v%hd, %zu bytes @ %zu, CorrId %d)" (no "v%hd, "
 *         before v0.8.5, no " @ %zu" before v0.9.2)
 *   recv: "Received %sResponse (v%hd, %zu bytes, CorrId %d, rtt %.2fms)"
 *         (no "v%hd, " and no rtt before v0.8.5)
 * read as rdkafka_log/patterns.EVENTS' "send" and "recv" patterns read them
 * (their digit counts included). OK is 1 only where the text is surely one
 * and every value is exact here: the rtt as RTT_N / 10^RTT_F while RTT_N
 * is below 2^53. Any other text is left to the pattern (OK 0). */
static PyObject *sent_received(PyObject *self, PyObject *args)
{
    Lines L;
    Sel S;
    int recv;
    if (sel_open(args, &L, &S, S_FIELDS, &recv) < 0) { sel_close(&L, &S); return NULL; }
    const char *head = recv ? "Received " : "Sent ", *suffix = recv ? "Response" : "Request";
    int64_t slen = recv ? 8 : 7;
    int64_t *out = (int64_t *)L.out.buf;
    const uint8_t *d = L.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < S.n; t++) {
        Py_ssize_t i = S.at ? S.at[t] : t;
        int64_t *r = out + t * S_FIELDS, s = L.o[i], e = L.o[i + 1], k, v, m;
        memset(r, 0, S_FIELDS * sizeof *r);
        if (!starts(d, s, e, head)) continue;
        k = s + (int64_t)strlen(head);
        int64_t w = k;   /* the API name and its suffix: letters up to " (" */
        while (w < e && ((d[w] >= 'A' && d[w] <= 'Z') || (d[w] >= 'a' && d[w] <= 'z'))) w++;
        if (w - k <= slen || memcmp(d + w - slen, suffix, (size_t)slen) != 0 || !starts(d, w, e, " ("))
            continue;
        r[S_REQ] = k;
        r[S_REQ_END] = w - slen;
        k = w + 2;
        if (k < e && d[k] == 'v') {
            m = digits(d, k + 1, e, 4, &v);
            if (m < 1 || m > 4 || !starts(d, k + 1 + m, e, ", ")) continue;
            r[S_API] = v;
            r[S_API_OK] = 1;
            k += 1 + m + 2;
        }
        m = digits(d, k, e, 18, &v);
        if (m < 1 || m > 18 || !starts(d, k + m, e, " bytes")) continue;
        r[S_SIZE] = v;
        k += m + 6;
        if (!recv && starts(d, k, e, " @ ")) {
            m = digits(d, k + 3, e, 19, &v);
            if (m < 1) continue;
            k += 3 + m;
            while (k < e && d[k] >= '0' && d[k] <= '9') k++;   /* "[0-9]+": any length */
        }
        if (!starts(d, k, e, ", CorrId ")) continue;
        k += 9;
        int neg = k < e && d[k] == '-';
        m = digits(d, k + neg, e, 10, &v);
        if (m < 1 || m > 10) continue;
        r[S_CORR] = neg ? -v : v;
        k += neg + m;
        if (recv && starts(d, k, e, ", rtt ")) {
            int64_t ip, fp = 0, f = 0;
            m = digits(d, k + 6, e, 12, &ip);
            if (m < 1 || m > 12) continue;
            k += 6 + m;
            if (k < e && d[k] == '.') {
                f = digits(d, k + 1, e, 6, &fp);
                if (f < 1 || f > 6) continue;
                k += 1 + f;
            }
            if (!starts(d, k, e, "ms)")) continue;
            int64_t scale = 1;
            for (int64_t j = 0; j < f; j++) scale *= 10;
            int64_t num = ip * scale + fp;
            if (num >= ((int64_t)1 << 53)) continue;   /* not exact as a double: the pattern's */
            r[S_RTT_OK] = 1;
            r[S_RTT_N] = num;
            r[S_RTT_F] = f;
        } else if (!starts(d, k, e, ")")) {
            continue;
        }
        r[S_OK] = 1;
    }
    Py_END_ALLOW_THREADS
    sel_close(&L, &S);
    Py_RETURN_NONE;
}

/* RE2's \s: what \S+ stops at. */
static inline int re2_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'; }

/* Fields of topic_lines' rows. OK: 1 read, 2 surely not the event (the
 * text is "TOPIC [PARTITION]: " and then something else), 0 unsure. */
enum { T_OK, T_TOPIC, T_TOPIC_END, T_PART, T_MSGS, T_SIZE, T_FIELDS };

/* topic_lines(offsets, first, n, data, out int64[n, T_FIELDS], msgset[, sel]):
 * the lines a partition's messages make, as rdkafka_msgset_writer.c and
 * rdkafka_request.c print them:
 *   produce: "%s [%"PRId32"]: Produce MessageSet with %i message(s) (%"PRIusz" bytes, ..."
 *   msgset:  "%s [%"PRId32"]: MessageSet with %i message(s) (MsgId %"PRIu64", BaseSeq %"PRId32") delivered"
 * read as the "produce" and "msgset" patterns of rdkafka_log/patterns read
 * them; a MessageSet that met an error is left to the pattern. */
static PyObject *topic_lines(PyObject *self, PyObject *args)
{
    Lines L;
    Sel S;
    int msgset;
    if (sel_open(args, &L, &S, T_FIELDS, &msgset) < 0) { sel_close(&L, &S); return NULL; }
    const char *what = msgset ? "MessageSet with " : "Produce MessageSet with ";
    int64_t *out = (int64_t *)L.out.buf;
    const uint8_t *d = L.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < S.n; t++) {
        Py_ssize_t i = S.at ? S.at[t] : t;
        int64_t *r = out + t * T_FIELDS, s = L.o[i], e = L.o[i + 1], k = s, m, v;
        memset(r, 0, T_FIELDS * sizeof *r);
        while (k < e && !re2_space(d[k])) k++;
        if (k == s || !starts(d, k, e, " [")) continue;
        r[T_TOPIC] = s;
        r[T_TOPIC_END] = k;
        k += 2;
        int neg = k < e && d[k] == '-';
        m = digits(d, k + neg, e, 10, &v);
        if (m < 1 || m > 10 || !starts(d, k + neg + m, e, "]: ")) continue;
        r[T_PART] = neg ? -v : v;
        k += neg + m + 3;
        if (!starts(d, k, e, what)) { r[T_OK] = 2; continue; }
        k += (int64_t)strlen(what);
        m = digits(d, k, e, 9, &v);
        if (m < 1 || m > 9 || !starts(d, k + m, e, " message(s)")) continue;
        r[T_MSGS] = v;
        k += m + 11;
        if (!msgset) {
            if (!starts(d, k, e, " (")) continue;
            m = digits(d, k + 2, e, 18, &v);
            if (m < 1 || m > 18 || !starts(d, k + 2 + m, e, " bytes")) continue;
            r[T_SIZE] = v;
        } else {
            if (starts(d, k, e, " (")) {   /* "(?: \([^)]*\))?": to the first ")" */
                const uint8_t *close = memchr(d + k + 2, ')', (size_t)(e - k - 2));
                if (!close) continue;
                k = (int64_t)(close - d) + 1;
            }
            if (!starts(d, k, e, " delivered")) continue;
        }
        r[T_OK] = 1;
    }
    Py_END_ALLOW_THREADS
    sel_close(&L, &S);
    Py_RETURN_NONE;
}

/* copy_out_many(buffers tuple, buf int64[n], start int64[n], length int64[n],
 * offsets_out int32[n + 1], data_out): the pieces
 * buffers[buf[i]][start[i], start[i] + length[i]) one after another, as an
 * Arrow string or binary array's offsets and data: what parsers/strings.views
 * makes through string views and a cast. Several buffers: strace's
 * arguments, most in the block's lines, a few joined from two lines in a
 * buffer of their own. */
static PyObject *copy_out_many(PyObject *self, PyObject *args)
{
    PyObject *bufs;
    Py_buffer bi = {0}, start = {0}, length = {0}, offs = {0}, out = {0};
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*w*", &PyTuple_Type, &bufs, &bi, &start, &length, &offs, &out))
        return NULL;
    Py_ssize_t nb = PyTuple_GET_SIZE(bufs), got = 0;
    Py_buffer *src = nb ? PyMem_Calloc((size_t)nb, sizeof(Py_buffer)) : NULL;
    int ok = nb == 0 || src != NULL;
    for (; ok && got < nb; got++)
        ok = PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, got), &src[got], PyBUF_SIMPLE) == 0;
    if (!ok && got) got--;   /* the one that failed holds nothing */
    Py_ssize_t n = start.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *b = (const int64_t *)bi.buf, *st = (const int64_t *)start.buf, *ln = (const int64_t *)length.buf;
    int32_t *o = (int32_t *)offs.buf;
    uint8_t *dst = (uint8_t *)out.buf;
    ok = ok && length.len == start.len && bi.len == start.len && offs.len >= (n + 1) * (Py_ssize_t)sizeof(int32_t);
    int64_t at = 0;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            ok = b[i] >= 0 && b[i] < nb && st[i] >= 0 && ln[i] >= 0 && st[i] + ln[i] <= src[b[i]].len
                 && at + ln[i] <= out.len && at + ln[i] <= INT32_MAX;
            at += ok ? ln[i] : 0;
        }
        at = 0;
        o[0] = 0;
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            copy_piece(dst + at, (const uint8_t *)src[b[i]].buf + st[i], ln[i], out.len - at, src[b[i]].len - st[i]);
            at += ln[i];
            o[i + 1] = (int32_t)at;
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t j = 0; j < got; j++) PyBuffer_Release(&src[j]);
    PyMem_Free(src);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&start);
    PyBuffer_Release(&length);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&out);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "copy_out_many: a piece outside its buffer, or output buffers too small");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"plain_columns", plain_columns, METH_VARARGS, "five string columns of librdkafka's plain lines, in one pass"},
    {"mangle_candidates", mangle_candidates, METH_VARARGS, "Lines chat or markdown may have changed."},
    {"rdkafka_plain_cut", rdkafka_plain_cut, METH_VARARGS, "librdkafka stderr lines cut by byte position."},
    {"sent_received", sent_received, METH_VARARGS, "librdkafka's Sent and Received lines read."},
    {"topic_lines", topic_lines, METH_VARARGS, "librdkafka's Produce MessageSet and MessageSet lines read."},
    {"copy_out_many", copy_out_many, METH_VARARGS, "Pieces of several buffers as an Arrow string array's buffers."},
    {"split_lines", split_lines, METH_VARARGS, "A block's lines as an Arrow string array's buffers."},
    {"fence_candidates", fence_candidates, METH_VARARGS, "Lines that may be markdown code fences."},
    {"needle_flags", needle_flags, METH_VARARGS, "Which needles begin, or stand in, each line."},
    {"quoted_data", quoted_data, METH_VARARGS, "The first C string of strace's arguments, decoded."},
    {"ends_with", ends_with, METH_VARARGS, "Which lines end with a suffix."},
    {"edge_bytes", edge_bytes, METH_VARARGS, "Whether a line starts, or one ends, with a byte."},
    {"first_fds", first_fds, METH_VARARGS, "The first argument of strace's calls read as an fd."},
    {"strace_lines", strace_lines, METH_VARARGS, "strace's lines read where the file's layout reads them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void)
{
    return PyModule_Create(&module);
}
