/* What the compiled scans share: the lines of an Arrow string array as
 * they take them, and small readers of bytes. */
#ifndef KDIAG_SCAN_H
#define KDIAG_SCAN_H
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE   /* memmem */
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The buffers of n lines: offsets[first .. first + n] into data. */
typedef struct {
    Py_buffer off, data, out;
    const int32_t *o;
    const uint8_t *d;
    Py_ssize_t first, n;
} Lines;

/* The lines' buffers checked: offsets inside data, out large enough for n
 * lines of out_per_line items of out_item bytes. */
static inline int lines_check(Lines *L, Py_ssize_t out_item, Py_ssize_t out_per_line)
{
    if (L->first < 0 || L->n < 0 || L->off.len < (L->first + L->n + 1) * (Py_ssize_t)sizeof(int32_t)
        || L->out.len < L->n * out_item * out_per_line) {
        PyErr_SetString(PyExc_ValueError, "buffers too small for the lines asked for");
        return -1;
    }
    L->o = (const int32_t *)L->off.buf + L->first;
    L->d = (const uint8_t *)L->data.buf;
    /* Arrow's offsets rise: the first and the last bound the rest. */
    if (L->o[0] < 0 || L->o[L->n] > L->data.len || L->o[0] > L->o[L->n]) {
        PyErr_SetString(PyExc_ValueError, "offsets outside the data buffer");
        return -1;
    }
    return 0;
}

/* The arguments every scan takes: (offsets, first, n, data, out), and a
 * flag after them where ``flag`` is not NULL. ``out`` must hold n lines of
 * out_per_line items of out_item bytes. */
static inline int lines_open(PyObject *args, Lines *L, Py_ssize_t out_item, Py_ssize_t out_per_line, int *flag)
{
    memset(L, 0, sizeof *L);
    int parsed = flag ? PyArg_ParseTuple(args, "y*nny*w*i", &L->off, &L->first, &L->n, &L->data, &L->out, flag)
                      : PyArg_ParseTuple(args, "y*nny*w*", &L->off, &L->first, &L->n, &L->data, &L->out);
    if (!parsed)
        return -1;
    return lines_check(L, out_item, out_per_line);
}

static inline void lines_close(Lines *L)
{
    if (L->off.obj) PyBuffer_Release(&L->off);
    if (L->data.obj) PyBuffer_Release(&L->data);
    if (L->out.obj) PyBuffer_Release(&L->out);
}

/* The first c in d[from, to), or -1. The fields it ends are mostly short:
 * one 16-byte compare (SSE2, every x86-64 has it) finds most ends without
 * a call to memchr, whose calls were 3 % of a log's parse. */
static inline int64_t find(const uint8_t *d, int64_t from, int64_t to, uint8_t c)
{
    if (from >= to) return -1;
#ifdef __SSE2__
    if (to - from >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(d + from));
        unsigned hit = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)c)));
        if (hit) return from + __builtin_ctz(hit);
        from += 16;
    }
#endif
    const uint8_t *p = memchr(d + from, c, (size_t)(to - from));
    return p ? (int64_t)(p - d) : -1;
}

/* The first byte at or after k that is not a control character or a space
 * (a superset of RE2's and Arrow's leading whitespace), or e. */
static inline int64_t past_blanks(const uint8_t *d, int64_t k, int64_t e)
{
    while (k < e && d[k] <= 0x20) k++;
    return k;
}

/* Digits at d[k..e): how many (stopping at max + 1), their value in *v. */
static inline int64_t digits(const uint8_t *d, int64_t k, int64_t e, int64_t max, int64_t *v)
{
    int64_t n = 0, x = 0;
    while (k + n < e && n <= max && d[k + n] >= '0' && d[k + n] <= '9') { x = x * 10 + (d[k + n] - '0'); n++; }
    *v = x;
    return n;
}

/* Whether d[k, e) begins with lit. A literal of a few bytes is compared in
 * a loop: a call to memcmp for each cost more than the compare (memcmp in
 * sent_received was 3 % of an async producer's log parse, 2026-12-01);
 * a longer one, such as "Produce MessageSet with ", by memcmp, which the
 * loop was slower than (topic_lines 0.78 -> 0.89 ms a chunk). */
static inline int starts(const uint8_t *d, int64_t k, int64_t e, const char *lit)
{
    size_t n = strlen(lit);
    if (e - k < (int64_t)n) return 0;
    if (n > 8) return memcmp(d + k, lit, n) == 0;
    for (size_t j = 0; j < n; j++)
        if (d[k + j] != (uint8_t)lit[j]) return 0;
    return 1;
}

/* parsers/_scan_strace.c */
PyObject *strace_lines(PyObject *self, PyObject *args);
PyObject *first_fds(PyObject *self, PyObject *args);
PyObject *quoted_data(PyObject *self, PyObject *args);
PyObject *edge_bytes(PyObject *self, PyObject *args);
PyObject *ends_with(PyObject *self, PyObject *args);

#endif
