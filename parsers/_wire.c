/* A capture's bytes -> TCP and UDP segments, in one pass: the compiled
 * twin of kdiag.parsers.pcap.capture_records feeding
 * kdiag.parsers.wire.packets.segments, held to them by the tests (same
 * Segments, same counts, same examples). Its Python side and the rules it
 * follows (link types, skip reasons, what a snaplen cut leaves) are
 * documented there; this file only walks bytes.
 *
 * Every length in a capture is untrusted: each read below is checked
 * against what the file, the block or the frame holds before it is made.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* pcap.MAX_RECORD: no real record is larger. */
#define MAX_RECORD (1u << 20)
#define SHB_TYPE 0x0A0D0D0Au
#define IDB 1u
#define OPB 2u
#define SPB 3u
#define EPB 6u
#define SEG_FIELDS 17
#define NAME_SLOTS 256
#define MAX_IPV6_HEADERS 8

typedef __int128 i128;
typedef unsigned __int128 u128;

typedef struct {
    uint16_t linktype;
    int base, exp;      /* if_tsresol: base 10 or 2, its exponent */
    int64_t offset_s;   /* if_tsoffset */
} Iface;

typedef struct {
    int len;            /* 0: empty slot */
    uint8_t raw[16];
    PyObject *name;
} NameSlot;

typedef struct {
    PyObject_HEAD
    Py_buffer buf;
    int have_buf;
    PyTypeObject *seg_type;
    PyObject *counts;
    Py_ssize_t pos;
    int pcapng, big, done, header_read;
    int64_t tick_ns;
    uint16_t linktype;
    Iface *ifaces;
    Py_ssize_t n_ifaces, cap_ifaces;
    /* Records and segments not yet added to counts.lines / counts.parsed:
     * added before every skip is counted and when the capture ends. */
    Py_ssize_t lines_pending, parsed_pending;
    NameSlot names[NAME_SLOTS];
} Reader;

static PyObject *s_tcp, *s_udp, *s_lines, *s_parsed, *s_skip, *s_example;

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static inline uint16_t rd16(const Reader *r, const uint8_t *p) {
    return r->big ? be16(p) : (uint16_t)(p[1] << 8 | p[0]);
}
static inline uint32_t rd32(const Reader *r, const uint8_t *p) { return r->big ? be32(p) : le32(p); }
static inline uint64_t rd64(const Reader *r, const uint8_t *p) {
    return r->big ? ((uint64_t)be32(p) << 32 | be32(p + 4)) : ((uint64_t)le32(p + 4) << 32 | le32(p));
}

/* ------------------------------------------------------------ counting */

static int add_pending(Reader *r, PyObject *attr, Py_ssize_t *pending)
{
    if (!*pending) return 0;
    PyObject *cur = PyObject_GetAttr(r->counts, attr);
    if (!cur) return -1;
    PyObject *n = PyLong_FromSsize_t(*pending);
    PyObject *sum = n ? PyNumber_Add(cur, n) : NULL;
    Py_DECREF(cur);
    Py_XDECREF(n);
    if (!sum) return -1;
    int rc = PyObject_SetAttr(r->counts, attr, sum);
    Py_DECREF(sum);
    if (rc == 0) *pending = 0;
    return rc;
}

static int flush(Reader *r)
{
    if (add_pending(r, s_lines, &r->lines_pending) < 0) return -1;
    return add_pending(r, s_parsed, &r->parsed_pending);
}

/* counts.skip(reason) and, with text, counts.example(counts.lines, reason, text). */
static int skip(Reader *r, const char *reason, PyObject *text)
{
    if (flush(r) < 0) return -1;
    PyObject *why = PyUnicode_FromString(reason);
    if (!why) return -1;
    PyObject *got = PyObject_CallMethodOneArg(r->counts, s_skip, why);
    if (got && text) {
        Py_DECREF(got);
        PyObject *line = PyObject_GetAttr(r->counts, s_lines);
        got = line ? PyObject_CallMethodObjArgs(r->counts, s_example, line, why, text, NULL) : NULL;
        Py_XDECREF(line);
    }
    Py_DECREF(why);
    if (!got) return -1;
    Py_DECREF(got);
    return 0;
}

/* The file's own stop: one more line, its reason, and for "corrupt" what was wrong. */
static int stop(Reader *r, const char *reason, const char *problem)
{
    r->done = 1;
    r->lines_pending++;
    PyObject *text = NULL;
    if (problem && !(text = PyUnicode_FromString(problem))) return -1;
    int rc = skip(r, reason, text);
    Py_XDECREF(text);
    return rc;
}

/* ------------------------------------------------------------ the file */

typedef struct {
    i128 ts_ns;
    uint16_t linktype;
    const uint8_t *frame;
    Py_ssize_t len;
} Record;

/* 1: a record; 0: the file ended (or stopped); 2: a record counted as
 * skipped; -1: an exception. */
static int pcap_next(Reader *r, Record *rec)
{
    const uint8_t *d = r->buf.buf;
    Py_ssize_t avail = r->buf.len - r->pos, at = r->pos;
    char problem[96];
    if (!r->header_read) {
        if (avail < 24) return stop(r, "truncated", NULL) < 0 ? -1 : 0;
        r->linktype = (uint16_t)(rd32(r, d + 20) & 0xFFFF);
        r->header_read = 1;
        r->pos += 24;
        return 3;  /* the header: no record yet, read on */
    }
    if (avail == 0) return 0;
    if (avail < 16) return stop(r, "truncated", NULL) < 0 ? -1 : 0;
    const uint8_t *h = d + at;
    uint32_t sec = rd32(r, h), frac = rd32(r, h + 4), incl = rd32(r, h + 8);
    if (incl > MAX_RECORD) {
        snprintf(problem, sizeof problem, "record at byte %zd claims %u bytes", at, incl);
        return stop(r, "corrupt", problem) < 0 ? -1 : 0;
    }
    if (avail - 16 < (Py_ssize_t)incl) return stop(r, "truncated", NULL) < 0 ? -1 : 0;
    r->pos += 16 + (Py_ssize_t)incl;
    r->lines_pending++;
    rec->ts_ns = (i128)sec * 1000000000 + (i128)frac * r->tick_ns;
    rec->linktype = r->linktype;
    rec->frame = h + 16;
    rec->len = incl;
    return 1;
}

static i128 ticks_to_ns(uint64_t ticks, const Iface *f)
{
    if (f->base == 2) return (i128)(((u128)ticks * 1000000000u) >> f->exp);
    if (f->exp <= 9) {
        u128 mul = 1;
        for (int i = f->exp; i < 9; i++) mul *= 10;
        return (i128)((u128)ticks * mul);
    }
    if (f->exp - 9 > 19) return 0;  /* 10**20 > any 64-bit tick count */
    uint64_t div = 1;
    for (int i = 9; i < f->exp; i++) div *= 10;
    return (i128)(ticks / div);
}

static int add_iface(Reader *r, const uint8_t *body, Py_ssize_t n)
{
    Iface f = {rd16(r, body), 10, 6, 0};
    const uint8_t *o = body + 8;
    Py_ssize_t on = n - 8, i = 0;
    while (i + 4 <= on) {
        uint16_t code = rd16(r, o + i), ln = rd16(r, o + i + 2);
        if (code == 0) break;
        Py_ssize_t vlen = on - (i + 4) < ln ? on - (i + 4) : ln;
        if (code == 9 && vlen >= 1) {
            uint8_t v = o[i + 4];
            f.base = v & 0x80 ? 2 : 10;
            f.exp = v & 0x80 ? v & 0x7F : v;
        } else if (code == 14 && vlen >= 8) {
            f.offset_s = (int64_t)rd64(r, o + i + 4);
        }
        i += 4 + ln + ((4 - ln % 4) % 4);
    }
    if (r->n_ifaces == r->cap_ifaces) {
        Py_ssize_t cap = r->cap_ifaces ? r->cap_ifaces * 2 : 8;
        Iface *grown = PyMem_Realloc(r->ifaces, (size_t)cap * sizeof(Iface));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        r->ifaces = grown;
        r->cap_ifaces = cap;
    }
    r->ifaces[r->n_ifaces++] = f;
    return 0;
}

static int pcapng_next(Reader *r, Record *rec)
{
    const uint8_t *d = r->buf.buf;
    Py_ssize_t avail = r->buf.len - r->pos, at = r->pos;
    const uint8_t *p = d + at;
    char problem[96];
    if (avail == 0) return 0;
    int shb = avail >= 4 && be32(p) == SHB_TYPE;
    if (avail < (shb ? 12 : 8)) return stop(r, "truncated", NULL) < 0 ? -1 : 0;
    if (shb) {
        if (be32(p + 8) == 0x1A2B3C4Du) r->big = 1;
        else if (le32(p + 8) == 0x1A2B3C4Du) r->big = 0;
        else {
            snprintf(problem, sizeof problem, "section at byte %zd has no byte-order magic", at);
            return stop(r, "corrupt", problem) < 0 ? -1 : 0;
        }
    }
    uint32_t btype = rd32(r, p), blen = rd32(r, p + 4);
    if (blen < 12 || blen % 4 || blen > MAX_RECORD + 64) {
        snprintf(problem, sizeof problem, "block at byte %zd claims %u bytes", at, blen);
        return stop(r, "corrupt", problem) < 0 ? -1 : 0;
    }
    if (avail < (Py_ssize_t)blen) return stop(r, "truncated", NULL) < 0 ? -1 : 0;
    r->pos += blen;
    const uint8_t *body = p + 8;
    Py_ssize_t n = (Py_ssize_t)blen - 12;
    if (btype == SHB_TYPE) {
        r->n_ifaces = 0;
    } else if (btype == IDB) {
        if (n >= 8 && add_iface(r, body, n) < 0) return -1;
    } else if (btype == EPB || btype == OPB) {
        r->lines_pending++;
        if (n < 20) return skip(r, "malformed", NULL) < 0 ? -1 : 2;
        uint32_t iface = btype == EPB ? rd32(r, body) : rd16(r, body);
        uint32_t hi = rd32(r, body + 4), lo = rd32(r, body + 8), caplen = rd32(r, body + 12);
        if ((Py_ssize_t)iface >= r->n_ifaces || 20 + (int64_t)caplen > (int64_t)n)
            return skip(r, "malformed", NULL) < 0 ? -1 : 2;
        const Iface *f = &r->ifaces[iface];
        rec->ts_ns = ticks_to_ns((uint64_t)hi << 32 | lo, f) + (i128)f->offset_s * 1000000000;
        rec->linktype = f->linktype;
        rec->frame = body + 20;
        rec->len = caplen;
        return 1;
    } else if (btype == SPB) {
        r->lines_pending++;
        return skip(r, "no_timestamp", NULL) < 0 ? -1 : 2;
    }
    return 3;  /* a block that is no record: read on */
}

/* ------------------------------------------------------------ packets */

static PyObject *name_of(Reader *r, const uint8_t *raw, int len)
{
    unsigned h = len;
    for (int i = 0; i < len; i++) h = h * 31 + raw[i];
    NameSlot *s = &r->names[(h ^ (h >> 8)) % NAME_SLOTS];
    if (s->len == len && memcmp(s->raw, raw, len) == 0) {
        Py_INCREF(s->name);
        return s->name;
    }
    char text[INET6_ADDRSTRLEN];
    if (!inet_ntop(len == 4 ? AF_INET : AF_INET6, raw, text, sizeof text)) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    PyObject *name = PyUnicode_FromString(text);
    if (!name) return NULL;
    Py_XSETREF(s->name, name);
    s->len = len;
    memcpy(s->raw, raw, len);
    Py_INCREF(name);
    return name;
}

static PyObject *ts_object(i128 v)
{
    if (v >= INT64_MIN && v <= INT64_MAX) return PyLong_FromLongLong((long long)v);
    PyObject *hi = PyLong_FromLongLong((long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)(u128)v);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *up = hi && shift ? PyNumber_Lshift(hi, shift) : NULL;
    PyObject *out = up && lo ? PyNumber_Add(up, lo) : NULL;
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(up);
    return out;
}

static inline PyObject *opt_int(long v, int have)
{
    if (!have) Py_RETURN_NONE;
    return PyLong_FromLong(v);
}

typedef struct {
    int tcp;
    uint16_t sport, dport, flags, window;
    uint32_t seq, ack;
    int wscale, mss, sack_ok, has_wscale, has_mss, has_ts;
    uint32_t tsval, tsecr;
    Py_ssize_t payload_len, data_at, data_end;  /* data: frame[data_at:data_end], clamped */
} Fields;

static PyObject *make_segment(Reader *r, const Record *rec, const uint8_t *src, const uint8_t *dst, int alen,
                              const Fields *f)
{
    PyObject *v[SEG_FIELDS] = {NULL};
    Py_ssize_t lo = f->data_at < rec->len ? f->data_at : rec->len;
    Py_ssize_t hi = f->data_end < rec->len ? f->data_end : rec->len;
    if (hi < lo) hi = lo;
    v[0] = ts_object(rec->ts_ns);
    v[1] = name_of(r, src, alen);
    v[2] = PyLong_FromLong(f->sport);
    v[3] = name_of(r, dst, alen);
    v[4] = PyLong_FromLong(f->dport);
    v[5] = f->tcp ? s_tcp : s_udp;
    Py_INCREF(v[5]);
    v[6] = PyLong_FromUnsignedLong(f->seq);
    v[7] = PyLong_FromUnsignedLong(f->ack);
    v[8] = PyLong_FromLong(f->flags);
    v[9] = PyLong_FromLong(f->window);
    v[10] = opt_int(f->wscale, f->has_wscale);
    v[11] = PyLong_FromSsize_t(f->payload_len);
    v[12] = PyBytes_FromStringAndSize((const char *)rec->frame + lo, hi - lo);
    v[13] = opt_int(f->mss, f->has_mss);
    v[14] = f->sack_ok ? Py_True : Py_False;
    Py_INCREF(v[14]);
    v[15] = f->has_ts ? PyLong_FromUnsignedLong(f->tsval) : (Py_INCREF(Py_None), Py_None);
    v[16] = f->has_ts ? PyLong_FromUnsignedLong(f->tsecr) : (Py_INCREF(Py_None), Py_None);
    int ok = 1;
    for (int i = 0; i < SEG_FIELDS; i++) ok &= v[i] != NULL;
    PyObject *seg = ok ? r->seg_type->tp_alloc(r->seg_type, SEG_FIELDS) : NULL;
    if (!seg) {
        for (int i = 0; i < SEG_FIELDS; i++) Py_XDECREF(v[i]);
        return NULL;
    }
    for (int i = 0; i < SEG_FIELDS; i++) PyTuple_SET_ITEM(seg, i, v[i]);
    return seg;
}

/* packets._tcp_options over opts[0:n]. */
static void tcp_options(const uint8_t *o, Py_ssize_t n, Fields *f)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t kind = o[i];
        if (kind == 0) break;
        if (kind == 1) {
            i++;
            continue;
        }
        if (i + 1 >= n) break;
        uint8_t ln = o[i + 1];
        if (ln < 2 || i + ln > n) break;
        if (kind == 2 && ln == 4) {
            f->mss = be16(o + i + 2);
            f->has_mss = 1;
        } else if (kind == 3 && ln == 3) {
            f->wscale = o[i + 2] < 14 ? o[i + 2] : 14;
            f->has_wscale = 1;
        } else if (kind == 4) {
            f->sack_ok = 1;
        } else if (kind == 8 && ln == 10) {
            f->tsval = be32(o + i + 2);
            f->tsecr = be32(o + i + 6);
            f->has_ts = 1;
        }
        i += ln;
    }
}

static int is_ip_ethertype(uint16_t t) { return t == 0x0800 || t == 0x86DD; }

static int null_family(uint32_t v) { return v == 2 || v == 10 || v == 24 || v == 28 || v == 30; }

/* packets.network_offset: >= 0, or a skip reason in *why. */
static Py_ssize_t network_offset(uint16_t lt, const uint8_t *f, Py_ssize_t n, const char **why)
{
    switch (lt) {
    case 1: {
        Py_ssize_t off = 12;
        while (off + 2 <= n) {
            uint16_t t = be16(f + off);
            if (t != 0x8100 && t != 0x88A8 && t != 0x9100) break;
            off += 4;
        }
        if (n < off + 2) {
            *why = "cut_short";
            return -1;
        }
        if (is_ip_ethertype(be16(f + off))) return off + 2;
        *why = "not_ip";
        return -1;
    }
    case 0:
    case 108:
        if (n < 4) {
            *why = "cut_short";
            return -1;
        }
        if (null_family(le32(f)) || null_family(be32(f))) return 4;
        *why = "not_ip";
        return -1;
    case 101: case 12: case 14: case 228: case 229:
        return 0;
    case 113:
    case 276: {
        Py_ssize_t size = lt == 113 ? 16 : 20, at = lt == 113 ? 14 : 0;
        if (n < size) {
            *why = "cut_short";
            return -1;
        }
        if (is_ip_ethertype(be16(f + at))) return size;
        *why = "not_ip";
        return -1;
    }
    default:
        *why = "unsupported_link";
        return -1;
    }
}

/* packets._ipv6_transport: 0 with *nxt, *at, *end, or -1 with *why. */
static int ipv6_transport(const uint8_t *f, Py_ssize_t n, Py_ssize_t off, int *nxt, Py_ssize_t *at,
                          Py_ssize_t *end, const char **why)
{
    uint16_t plen = be16(f + off + 4);
    *end = plen ? off + 40 + plen : n;
    *nxt = f[off + 6];
    *at = off + 40;
    for (int k = 0; k < MAX_IPV6_HEADERS; k++) {
        int h = *nxt;
        if (h == 44) {
            *why = "fragment";
            return -1;
        }
        if (h != 0 && h != 43 && h != 60 && h != 51) return 0;
        if (n < *at + 2) {
            *why = "cut_short";
            return -1;
        }
        Py_ssize_t size = h == 51 ? ((Py_ssize_t)f[*at + 1] + 2) * 4 : ((Py_ssize_t)f[*at + 1] + 1) * 8;
        *nxt = f[*at];
        *at += size;
        if (*at > *end) {
            *why = "bad_ip";
            return -1;
        }
    }
    *why = "bad_ip";
    return -1;
}

/* packets.segment_of: a Segment, or NULL with *why (or an exception). */
static PyObject *segment_of(Reader *r, const Record *rec, const char **why)
{
    const uint8_t *f = rec->frame;
    Py_ssize_t n = rec->len;
    Py_ssize_t off = network_offset(rec->linktype, f, n, why);
    if (off < 0) return NULL;
    if (n < off + 20) {
        *why = "cut_short";
        return NULL;
    }
    int proto, alen;
    Py_ssize_t at, end;
    const uint8_t *src, *dst;
    int ver = f[off] >> 4;
    if (ver == 4) {
        Py_ssize_t ihl = (f[off] & 0x0F) * 4, total = be16(f + off + 2);
        if (total == 0) total = n - off;
        if (ihl < 20 || total < ihl) {
            *why = "bad_ip";
            return NULL;
        }
        if (be16(f + off + 6) & 0x3FFF) {
            *why = "fragment";
            return NULL;
        }
        proto = f[off + 9];
        src = f + off + 12;
        dst = f + off + 16;
        alen = 4;
        at = off + ihl;
        end = off + total;
    } else if (ver == 6) {
        if (n < off + 40) {
            *why = "cut_short";
            return NULL;
        }
        if (ipv6_transport(f, n, off, &proto, &at, &end, why) < 0) return NULL;
        src = f + off + 8;
        dst = f + off + 24;
        alen = 16;
    } else {
        *why = "bad_ip";
        return NULL;
    }
    Fields x;
    memset(&x, 0, sizeof x);
    if (proto == 6) {
        if (n < at + 20) {
            *why = "cut_short";
            return NULL;
        }
        const uint8_t *t = f + at;
        x.tcp = 1;
        x.sport = be16(t);
        x.dport = be16(t + 2);
        x.seq = be32(t + 4);
        x.ack = be32(t + 8);
        x.flags = t[13];
        x.window = be16(t + 14);
        Py_ssize_t thl = (t[12] >> 4) * 4;
        if (thl < 20 || at + thl > end) {
            *why = "bad_tcp";
            return NULL;
        }
        if (thl == 32 && n >= at + 24 && memcmp(t + 20, "\x01\x01\x08\x0a", 4) == 0) {
            if (n >= at + 32) {
                x.tsval = be32(t + 24);
                x.tsecr = be32(t + 28);
                x.has_ts = 1;
            }
        } else if (thl > 20) {
            Py_ssize_t stop_at = at + thl < n ? at + thl : n;
            if (stop_at > at + 20) tcp_options(t + 20, stop_at - (at + 20), &x);
        }
        x.payload_len = end - at - thl;
        x.data_at = at + thl;
        x.data_end = end;
    } else if (proto == 17) {
        if (n < at + 8) {
            *why = "cut_short";
            return NULL;
        }
        x.sport = be16(f + at);
        x.dport = be16(f + at + 2);
        x.payload_len = end - at - 8 > 0 ? end - at - 8 : 0;
        x.data_at = at + 8;
        x.data_end = end;
    } else {
        *why = "other_transport";
        return NULL;
    }
    return make_segment(r, rec, src, dst, alen, &x);
}

static PyObject *hex_head(const uint8_t *f, Py_ssize_t n)
{
    static const char digits[] = "0123456789abcdef";
    char out[129];
    Py_ssize_t k = n < 64 ? n : 64;
    for (Py_ssize_t i = 0; i < k; i++) {
        out[2 * i] = digits[f[i] >> 4];
        out[2 * i + 1] = digits[f[i] & 15];
    }
    return PyUnicode_FromStringAndSize(out, 2 * k);
}

/* ------------------------------------------------------------ the iterator */

static PyObject *reader_next(Reader *r)
{
    while (!r->done) {
        Record rec;
        int got = r->pcapng ? pcapng_next(r, &rec) : pcap_next(r, &rec);
        if (got < 0) return NULL;
        if (got == 0) break;
        if (got != 1) continue;
        const char *why = NULL;
        PyObject *seg = segment_of(r, &rec, &why);
        if (seg) {
            r->parsed_pending++;
            return seg;
        }
        if (PyErr_Occurred()) return NULL;
        int quiet = !strcmp(why, "other_transport") || !strcmp(why, "not_ip") || !strcmp(why, "fragment");
        PyObject *text = quiet ? NULL : hex_head(rec.frame, rec.len);
        if (!quiet && !text) return NULL;
        int rc = skip(r, why, text);
        Py_XDECREF(text);
        if (rc < 0) return NULL;
    }
    r->done = 1;
    if (flush(r) < 0) return NULL;
    return NULL;
}

static void reader_dealloc(Reader *r)
{
    if (r->have_buf) PyBuffer_Release(&r->buf);
    PyMem_Free(r->ifaces);
    for (int i = 0; i < NAME_SLOTS; i++) Py_XDECREF(r->names[i].name);
    Py_XDECREF(r->seg_type);
    Py_XDECREF(r->counts);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kdiag.parsers._wire.Segments",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The segments of a capture's bytes, counting what is skipped on the counts given.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)reader_next,
};

static PyObject *segments(PyObject *self, PyObject *args)
{
    PyObject *data, *counts;
    PyTypeObject *seg_type;
    if (!PyArg_ParseTuple(args, "OO!O", &data, &PyType_Type, &seg_type, &counts)) return NULL;
    /* Segments are built as the tuples they are: the type must add nothing to a tuple. */
    if (!PyType_IsSubtype(seg_type, &PyTuple_Type) || seg_type->tp_basicsize != PyTuple_Type.tp_basicsize
        || seg_type->tp_itemsize != PyTuple_Type.tp_itemsize || seg_type->tp_dictoffset) {
        PyErr_SetString(PyExc_TypeError, "segments: the segment type must be a plain tuple subclass");
        return NULL;
    }
    Reader *r = PyObject_New(Reader, &ReaderType);
    if (!r) return NULL;
    memset((char *)r + sizeof(PyObject), 0, sizeof(Reader) - sizeof(PyObject));
    Py_INCREF(seg_type);
    r->seg_type = seg_type;
    Py_INCREF(counts);
    r->counts = counts;
    if (PyObject_GetBuffer(data, &r->buf, PyBUF_SIMPLE) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    r->have_buf = 1;
    const uint8_t *d = r->buf.buf;
    if (r->buf.len < 4) goto neither;
    uint32_t m = be32(d);
    if (m == SHB_TYPE) {
        r->pcapng = 1;
    } else if (m == 0xD4C3B2A1u || m == 0xA1B2C3D4u) {
        r->big = m == 0xA1B2C3D4u;
        r->tick_ns = 1000;
    } else if (m == 0x4D3CB2A1u || m == 0xA1B23C4Du) {
        r->big = m == 0xA1B23C4Du;
        r->tick_ns = 1;
    } else {
        goto neither;
    }
    return (PyObject *)r;
neither:
    Py_DECREF(r);
    PyErr_SetString(PyExc_ValueError, "segments: neither pcap nor pcapng");
    return NULL;
}

static PyMethodDef methods[] = {
    {"segments", segments, METH_VARARGS, "segments(data, Segment, counts): an iterator of a capture's segments."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wire(void)
{
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    if (!(s_tcp = PyUnicode_InternFromString("tcp")) || !(s_udp = PyUnicode_InternFromString("udp"))
        || !(s_lines = PyUnicode_InternFromString("lines")) || !(s_parsed = PyUnicode_InternFromString("parsed"))
        || !(s_skip = PyUnicode_InternFromString("skip")) || !(s_example = PyUnicode_InternFromString("example")))
        return NULL;
    return PyModule_Create(&module);
}
