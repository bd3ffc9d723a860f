/* The user-space half of the bpfcalls tracer (kdiag.collectors.bpfcalls):
 * loads _bpfcalls.bpf.o with libbpf, attaches it to one process, and
 * writes the records from its ring buffer to a file as they are, with no
 * formatting: the formatting waits until tracing has stopped, so the
 * traced host pays only a copy per call. Python's signals stop it.
 *
 * A record on file is struct rec up to its name, then name_len bytes of
 * name and data_len bytes of data (the layout is RECORD in bpfcalls.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "_bpfcalls.h"
/* BPF_OBJECT: _bpfcalls.bpf.o, compiled and written out by setup.py */
#include "_bpfcalls_object.h"

/* The program wakes the loader only once a MiB waits (WAKE_BYTES there);
 * a 16 MiB ring holds 1.5 s of the busiest producer measured. */
#define POLL_MS 50
/* 17 calls' entries, 16 exits, and the process events */
#define MAX_LINKS 64

struct sink {
    FILE *out;
    unsigned long long records, bytes, over_budget, budget;
};

static int on_record(void *ctx, void *raw, size_t size)
{
    struct sink *s = ctx;
    const struct rec *r = raw;
    size_t head = REC_HEAD;
    if (size < head)
        return 0;
    size_t nl = r->name_len < NAME ? r->name_len : NAME;
    size_t dl = r->data_len < DATA ? r->data_len : DATA;
    if (head + NAME + dl > size)       /* a small record's data never passes its end */
        dl = size > head + NAME ? size - head - NAME : 0;
    size_t n = head + nl + dl;
    if (s->budget && s->bytes + n > s->budget) {
        s->over_budget++;
        return 0;
    }
    struct rec copy;
    memcpy(&copy, r, head);
    copy.name_len = (uint16_t)nl;
    copy.data_len = (uint16_t)dl;
    fwrite(&copy, 1, head, s->out);
    fwrite(r->name, 1, nl, s->out);
    fwrite(r->data, 1, dl, s->out);
    s->records++;
    s->bytes += n;
    return 0;
}

static PyObject *fail(const char *what, int err)
{
    PyErr_Format(PyExc_OSError, "%s: %s", what, strerror(err < 0 ? -err : err));
    return NULL;
}

/* The program reads x86-64 syscall numbers and registers. */
static int supported(void)
{
    struct utsname u;
    return uname(&u) == 0 && strcmp(u.machine, "x86_64") == 0;
}

/* The per-syscall tracepoints' programs (section tp/syscalls/...), or the
 * raw sys_enter/sys_exit ones that stand in for them (tp_btf/sys_...). */
static int per_syscall(const struct bpf_program *p)
{
    return strncmp(bpf_program__section_name(p), "tp/syscalls/", 12) == 0;
}

static int raw_syscalls(const struct bpf_program *p)
{
    const char *s = bpf_program__section_name(p);
    return strcmp(s, "tp_btf/sys_enter") == 0 || strcmp(s, "tp_btf/sys_exit") == 0;
}

static int uprobe_program(const struct bpf_program *p)
{
    const char *s = bpf_program__section_name(p);
    return strcmp(s, "uprobe") == 0 || strcmp(s, "uretprobe") == 0;
}

/* Where the loader hangs the uprobes: libc's path as this process reaches
 * it, the GOT slot of errno's offset, and each call's probe: its place in
 * the file and its cookie (_bpfcalls.h). */
struct uprobes {
    const char *path;
    unsigned long long errno_slot;
    Py_ssize_t n;
    unsigned long long offset[32];
    unsigned long long cookie[32];
};

static void detach(struct bpf_link **links, int *n_links)
{
    for (int i = 0; i < *n_links; i++)
        bpf_link__destroy(links[i]);
    *n_links = 0;
}

/* The object opened for ``pid``, loaded and attached with one set of
 * hooks (``raw``: the raw tracepoints; ``up``: uprobes, else the
 * per-syscall tracepoints), or NULL with a Python error set. */
static struct bpf_object *attach(int pid, int raw, const struct uprobes *up, struct bpf_link **links, int *n_links)
{
    int err;
    LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = "kdiag_bpfcalls");
    struct bpf_object *obj = bpf_object__open_mem(BPF_OBJECT, sizeof(BPF_OBJECT), &opts);
    if (!obj) {
        fail("opening the BPF object", errno);
        return NULL;
    }
    /* cfg, the program's only read-only data: which process to trace */
    struct bpf_map *ro = NULL, *m;
    bpf_object__for_each_map(m, obj) {
        const char *nm = bpf_map__name(m);
        size_t l = strlen(nm);
        if (l >= 7 && strcmp(nm + l - 7, ".rodata") == 0)
            ro = m;
    }
    struct cfg cfg = {.tgid = (uint32_t)pid, .errno_slot = up ? up->errno_slot : 0};
    if (!ro || bpf_map__set_initial_value(ro, &cfg, sizeof(cfg))) {
        fail("naming the process to trace", ro ? errno : ENOENT);
        goto fail;
    }
    struct bpf_program *p;
    bpf_object__for_each_program(p, obj) {
        if (uprobe_program(p))
            bpf_program__set_autoload(p, up != NULL);
        else if (per_syscall(p) || raw_syscalls(p))
            bpf_program__set_autoload(p, up ? 0 : raw ? raw_syscalls(p) : per_syscall(p));
    }
    if ((err = bpf_object__load(obj))) {
        fail("loading the BPF programs", err);
        goto fail;
    }
    bpf_object__for_each_program(p, obj) {
        if (!bpf_program__autoload(p) || uprobe_program(p))
            continue;
        if (*n_links >= MAX_LINKS) {
            PyErr_SetString(PyExc_RuntimeError, "more BPF programs than the loader has room for");
            goto fail;
        }
        struct bpf_link *l = bpf_program__attach(p);
        if (!l) {
            PyErr_Format(PyExc_OSError, "attaching %s: %s", bpf_program__name(p), strerror(errno));
            goto fail;
        }
        links[(*n_links)++] = l;
    }
    /* Opened on the process: the kernel filters a uprobe by the process's
     * memory, so each fires in every thread of it, and only there. */
    for (Py_ssize_t i = 0; up && i < up->n; i++) {
        int code = (int)(up->cookie[i] & ((1 << COOKIE_CODE_BITS) - 1));
        for (int ret = 0; ret < (code == CODE_EXIT_GROUP ? 1 : 2); ret++) {
            if (*n_links >= MAX_LINKS) {
                PyErr_SetString(PyExc_RuntimeError, "more BPF programs than the loader has room for");
                goto fail;
            }
            LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret, .bpf_cookie = up->cookie[i]);
            p = bpf_object__find_program_by_name(obj, ret ? "call_return" : "call_entry");
            struct bpf_link *l = p ? bpf_program__attach_uprobe_opts(p, pid, up->path, up->offset[i], &uo) : NULL;
            if (!l) {
                PyErr_Format(PyExc_OSError, "attaching a uprobe at %s+0x%llx: %s", up->path, up->offset[i],
                             strerror(errno));
                goto fail;
            }
            links[(*n_links)++] = l;
        }
    }
    return obj;
fail:
    detach(links, n_links);
    bpf_object__close(obj);
    return NULL;
}

static PyObject *trace(PyObject *self, PyObject *args)
{
    int pid;
    const char *out_path;
    PyObject *ready;
    unsigned long long budget;
    int raw = 0;
    PyObject *probes = Py_None;
    if (!PyArg_ParseTuple(args, "isOK|pO", &pid, &out_path, &ready, &budget, &raw, &probes))
        return NULL;
    struct uprobes up = {0}, *use_up = NULL;
    if (probes != Py_None) {
        PyObject *list;
        if (!PyArg_ParseTuple(probes, "sKO!", &up.path, &up.errno_slot, &PyList_Type, &list))
            return NULL;
        up.n = PyList_GET_SIZE(list);
        if (up.n > 32) {
            PyErr_SetString(PyExc_ValueError, "at most 32 uprobes");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < up.n; i++) {
            if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "KK", &up.offset[i], &up.cookie[i]))
                return NULL;
        }
        use_up = &up;
    }
    PyObject *result = NULL;
    struct bpf_object *obj = NULL;
    struct bpf_link *links[MAX_LINKS];
    int n_links = 0;
    struct ring_buffer *rb = NULL;
    struct sink sink = {0};
    char fell_back[256] = "";
    sink.budget = budget;
    int err;
    if (!supported()) {
        PyErr_SetString(PyExc_OSError, "the program reads x86-64 syscalls only");
        goto out;
    }
    /* Uprobes where asked for (a failure is the caller's to handle); else the
     * per-syscall tracepoints where the kernel has them
     * (CONFIG_FTRACE_SYSCALLS), else the raw ones, which every kernel with
     * syscall tracepoints has. */
    if (use_up) {
        if (!(obj = attach(pid, 0, use_up, links, &n_links)))
            goto out;
    } else {
        if (!raw) {
            obj = attach(pid, 0, NULL, links, &n_links);
            if (!obj) {
                /* Kept for the status: a fallback is the host's cost, and
                 * its cause (a missing tracepoint, a limit) is the user's
                 * to know. */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyObject *text = value ? PyObject_Str(value) : NULL;
                const char *c = text ? PyUnicode_AsUTF8(text) : NULL;
                snprintf(fell_back, sizeof fell_back, "%s", c ? c : "the per-syscall tracepoints could not be attached");
                Py_XDECREF(text);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                raw = 1;
            }
        }
        if (!obj && !(obj = attach(pid, 1, NULL, links, &n_links)))
            goto out;
    }
    sink.out = fopen(out_path, "wb");
    if (!sink.out) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, out_path);
        goto out;
    }
    setvbuf(sink.out, NULL, _IOFBF, 1 << 20);
    rb = ring_buffer__new(bpf_map__fd(bpf_object__find_map_by_name(obj, "records")), on_record, &sink, NULL);
    if (!rb) {
        fail("opening the ring buffer", errno);
        goto out;
    }
    PyObject *r = PyObject_CallNoArgs(ready);
    if (!r)
        goto out;
    Py_DECREF(r);

    int stopped = 0;
    while (!stopped) {
        Py_BEGIN_ALLOW_THREADS
        err = ring_buffer__poll(rb, POLL_MS);
        Py_END_ALLOW_THREADS
        if (err < 0 && err != -EINTR) {
            fail("reading the ring buffer", err);
            goto out;
        }
        /* SIGINT or SIGTERM: Python's handler runs here; an exception
         * it raises stops the trace, and what is left is still read. */
        if (PyErr_CheckSignals() < 0) {
            PyErr_Clear();
            stopped = 1;
        }
    }
    detach(links, &n_links);
    ring_buffer__consume(rb);
    uint32_t zero = 0;
    uint64_t lost = 0;
    bpf_map_lookup_elem(bpf_map__fd(bpf_object__find_map_by_name(obj, "lost")), &zero, &lost);
    if (fflush(sink.out)) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, out_path);
        goto out;
    }
    /* The processes it forked (the tracepoints follow them; a uprobe hung on
     * this process's memory does not). */
    unsigned long long forks = 0;
    uint32_t key, next, *prev = NULL;
    int tgids = bpf_map__fd(bpf_object__find_map_by_name(obj, "tgids"));
    while (forks < 1024 && bpf_map_get_next_key(tgids, prev, &next) == 0) {
        key = next;
        prev = &key;
        forks++;
    }
    result = Py_BuildValue("{sKsKsKsKsssKsz}", "records", sink.records, "bytes", sink.bytes, "lost_events",
                           (unsigned long long)lost, "over_budget", sink.over_budget, "hooks",
                           use_up ? "uprobes in libc" : raw ? "raw syscall tracepoints" : "per-syscall tracepoints",
                           "forked", forks, "hooks_fallback", fell_back[0] ? fell_back : NULL);
out:
    detach(links, &n_links);
    if (rb)
        ring_buffer__free(rb);
    if (sink.out)
        fclose(sink.out);
    bpf_object__close(obj);
    return result;
}

static PyMethodDef methods[] = {
    {"trace", trace, METH_VARARGS,
     "trace(pid, out_path, ready, max_bytes, raw=False, uprobes=None) -> dict: traces until a signal's handler "
     "raises; raw: on the raw syscall tracepoints, not the per-syscall ones; uprobes: (libc path, errno's GOT "
     "slot, [(file offset, cookie), ...]) to hook libc's functions instead"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bpfcalls", NULL, -1, methods};

PyMODINIT_FUNC PyInit__bpfcalls(void) { return PyModule_Create(&module); }
