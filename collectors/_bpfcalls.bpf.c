// The in-kernel half of the bpfcalls tracer (kdiag.collectors.bpfcalls):
// the producer's socket, log and wait syscalls, one binary record per call,
// filtered by process in the kernel.
//
// bpftrace's program (kdiag.collectors.bpftrace) runs its predicates in
// bpftrace's own bytecode, and its records are text formatted in bpftrace's
// process. Here a program on each per-syscall tracepoint the record needs
// (no other call of any process runs one) answers "not the traced process"
// with one comparison, keeps a call's entry on the thread itself (task
// storage), and the record is a struct the loader (_bpfcalls.c) writes out
// as it is. Where those tracepoints cannot be attached, the loader hangs
// the raw sys_enter/sys_exit programs at the end instead.
//
// The record carries what bpftrace's record carries (see
// kdiag/collectors/_bpftrace_records.py: the same call codes and fields), so
// both become the same strace text; and, which bpftrace's does not, a socket
// write's first HEAD bytes, the Kafka request header that names it.
//
// Kernel structures are declared here only as far as they are read; CO-RE
// (preserve_access_index) finds each field in the running kernel's BTF.
// sk_type and sk_protocol are plain u16 fields from Linux 5.6 on; task
// storage in tracing programs needs 5.11.

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "_bpfcalls.h"

#define __pra __attribute__((preserve_access_index))

struct pt_regs { unsigned long r10, r8, r9, dx, si, di, orig_ax, cx, ax, ip; } __pra;
struct qstr { const unsigned char *name; } __pra;
struct dentry { struct qstr d_name; } __pra;
struct path { struct dentry *dentry; } __pra;
struct inode { unsigned short i_mode; unsigned long i_ino; } __pra;
struct in6_addr { union { __u32 u6_addr32[4]; } in6_u; } __pra;
struct sock_common {
    __be32 skc_daddr; __be32 skc_rcv_saddr; __be16 skc_dport; __u16 skc_num;
    unsigned short skc_family; struct in6_addr skc_v6_daddr; struct in6_addr skc_v6_rcv_saddr;
} __pra;
struct sock { struct sock_common __sk_common; __u16 sk_type; __u16 sk_protocol; } __pra;
struct socket { struct sock *sk; } __pra;
struct file { struct inode *f_inode; void *private_data; struct path f_path; } __pra;
struct fdtable { unsigned int max_fds; struct file **fd; } __pra;
struct files_struct { struct fdtable *fdt; } __pra;
struct thread_struct { unsigned long fsbase; } __pra;
struct task_struct { struct files_struct *files; int exit_code; int tgid; struct thread_struct thread; } __pra;
struct pollfd { int fd; short events; short revents; };
struct __kernel_timespec { long long tv_sec; long long tv_nsec; };

char LICENSE[] SEC("license") = "GPL";

// The call in progress on a thread (code 0: none), and the file its last
// call named: a producer calls on the same socket thousands of times, and
// naming it again is most of a record's cost in the kernel.
struct entry { __u64 ts; __u64 a[4]; __u32 code; struct file *last; struct fdid id; __u64 libc; };

struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 16 << 20); } records SEC(".maps");
// The processes the traced one forked (itself is cfg.tgid).
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1024); __type(key, __u32); __type(value, __u8); }
    tgids SEC(".maps");
// Each thread's entry, kept on the thread itself (no hash to look it up
// in, freed with the thread).
struct { __uint(type, BPF_MAP_TYPE_TASK_STORAGE); __uint(map_flags, BPF_F_NO_PREALLOC); __type(key, int);
         __type(value, struct entry); } entries SEC(".maps");
// [0] records the ring buffer had no room for
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, __u64); }
    lost SEC(".maps");

// Set by the loader before it loads the program (struct cfg in _bpfcalls.h).
const volatile struct cfg cfg = {};
// Set once the traced process forks another: only then is the map asked.
__u32 forked = 0;

// Runs on every syscall of every process: the common answer, no, must be cheap.
static __always_inline int traced(void)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (tgid == cfg.tgid)
        return 1;
    return forked && bpf_map_lookup_elem(&tgids, &tgid) != 0;
}

static __always_inline struct entry *enter(__u32 code, __u64 a0, __u64 a1, __u64 a2, __u64 a3)
{
    struct entry *e = bpf_task_storage_get(&entries, bpf_get_current_task_btf(), 0,
                                           BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!e)
        return 0;
    e->ts = bpf_ktime_get_ns();
    e->code = code;
    e->a[0] = a0;
    e->a[1] = a1;
    e->a[2] = a2;
    e->a[3] = a3;
    return e;
}

static __always_inline struct entry *entry_of(void)
{
    return bpf_task_storage_get(&entries, bpf_get_current_task_btf(), 0, 0);
}

// Room for a record of ``size`` bytes (REC_SMALL, REC_SEND or a whole
// struct rec: with log text), or null, counted as lost.
static __always_inline struct rec *reserve(__u64 size)
{
    struct rec *r;
    if (size == sizeof(*r))
        r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
    else if (size == REC_SEND)
        r = bpf_ringbuf_reserve(&records, REC_SEND, 0);
    else
        r = bpf_ringbuf_reserve(&records, REC_SMALL, 0);
    if (!r) {
        __u32 k = 0;
        __u64 *n = bpf_map_lookup_elem(&lost, &k);
        if (n)
            __sync_fetch_and_add(n, 1);
    }
    return r;
}

// A record of the call ``e`` for its exit, of ``size`` bytes (see reserve).
static __always_inline struct rec *begin(struct entry *e, __u32 kind, long ret, __u64 size)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct rec *r = reserve(size);
    if (!r) {
        e->code = 0;
        return 0;
    }
    __u64 now = bpf_ktime_get_ns();
    r->ts = e->ts;
    r->dur = now - e->ts;
    r->ret = ret;
    r->a[0] = e->a[0]; r->a[1] = e->a[1]; r->a[2] = e->a[2]; r->a[3] = e->a[3];
    r->tid = tid;
    r->code = e->code;
    r->kind = kind;
    r->count = 0;
    __builtin_memset(&r->id, 0, sizeof(r->id));
    r->extra = 0; r->name_len = 0; r->data_len = 0;
    e->code = 0;
    return r;
}

// Waking the loader for each record costs the traced thread more than the
// rest of the record (an interrupt to the loader's CPU): it is woken once
// this much waits, else it finds the records when its poll times out.
#define WAKE_BYTES (1 << 20)

static __always_inline void submit(void *r)
{
    __u64 waiting = bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA);
    bpf_ringbuf_submit(r, waiting >= WAKE_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline struct file *file_of(long fd)
{
    // The task as BTF types it: its fields are plain loads the verifier
    // guards, where each bpf_probe_read_kernel was a helper call.
    struct task_struct *t = bpf_get_current_task_btf();
    struct fdtable *fdt = t->files->fdt;
    if (fd < 0 || fd >= fdt->max_fds)
        return 0;
    struct file **fds = fdt->fd;
    struct file *f = 0;
    // an index the verifier cannot bound: read by the helper
    bpf_core_read(&f, sizeof(f), fds + fd);
    return f;
}

#define S_IFMT 0xf000
#define S_IFSOCK 0xc000
#define S_IFIFO 0x1000

// The fd as strace -yy names it: its inode, and for a socket its endpoints.
static __always_inline void name_fd(struct rec *r, struct entry *e, long fd)
{
    struct file *f = file_of(fd);
    if (!f)
        return;
    if (f == e->last) {
        r->id = e->id;
        return;
    }
    struct fdid *id = &r->id;
    struct inode *in = BPF_CORE_READ(f, f_inode);
    id->mode = BPF_CORE_READ(in, i_mode) & S_IFMT;
    id->ino = BPF_CORE_READ(in, i_ino);
    if (id->mode == S_IFSOCK) {
        struct socket *so = BPF_CORE_READ(f, private_data);
        struct sock *sk = BPF_CORE_READ(so, sk);
        id->fam = BPF_CORE_READ(sk, __sk_common.skc_family);
        id->typ = BPF_CORE_READ(sk, sk_type);
        id->proto = BPF_CORE_READ(sk, sk_protocol);
        id->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
        id->rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
        id->la = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
        id->ra = BPF_CORE_READ(sk, __sk_common.skc_daddr);
        BPF_CORE_READ_INTO(&id->la6, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32);
        BPF_CORE_READ_INTO(&id->ra6, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32);
        // Connected, it names itself the same way until it is closed (a new
        // file, whose address may repeat: closing forgets it, see on_exit_plain).
        if (id->rport) {
            e->last = f;
            e->id = *id;
        }
    } else if (id->mode != S_IFIFO && in) {
        const unsigned char *nm = BPF_CORE_READ(f, f_path.dentry, d_name.name);
        long n = bpf_probe_read_kernel_str(r->name, NAME, nm);
        r->name_len = n > 0 ? n - 1 : 0;
    }
}

static __always_inline void on_exit_fd(struct entry *e, long ret, int by_ret)
{
    struct rec *r = begin(e, KIND_F, ret, REC_SMALL);
    if (!r)
        return;
    name_fd(r, e, by_ret ? ret : (long)r->a[0]);
    submit(r);
}

// The first HEAD bytes a socket write sent (writev, sendmsg: of its first
// iovec), as strace -s HEAD keeps them: a Kafka client's request begins its
// write, and its header names the request. One bounded read of the bytes.
static __always_inline void keep_head(struct rec *r, long ret)
{
    const void *buf = (const void *)r->a[1];
    __u64 len = r->a[2];
    if (r->code == 3 || r->code == 7) {
        const void *vec = buf;
        if (r->code == 7) {
            // struct user_msghdr: msg_name, msg_namelen, msg_iov, msg_iovlen
            struct { __u64 name; __u32 namelen, pad; __u64 iov, iovlen; } msg = {};
            if (bpf_probe_read_user(&msg, sizeof(msg), buf) || !msg.iovlen)
                return;
            vec = (const void *)msg.iov;
            r->extra = msg.iovlen > 0x7fffffff ? 0x7fffffff : (__s32)msg.iovlen;
        } else if (!len) {
            return;
        }
        struct { __u64 base, len; } iov = {};
        if (bpf_probe_read_user(&iov, sizeof(iov), vec))
            return;
        buf = (const void *)iov.base;
        len = iov.len;
    }
    r->count = len > 0xffffffff ? 0xffffffff : len;
    __u64 n = len < (__u64)ret ? len : (__u64)ret;
    if (n > HEAD)
        n = HEAD;
    if (bpf_probe_read_user(r->data, n, buf) == 0)
        r->data_len = n;
}

// write, writev, sendto, sendmsg
static __always_inline void on_exit_write(struct entry *e, long ret)
{
    long fd = (long)e->a[0];
    int log = e->code == 1 && fd >= 0 && fd <= 2;
    struct rec *r = log ? begin(e, KIND_D, ret, sizeof(struct rec)) : begin(e, KIND_F, ret, REC_SEND);
    if (!r)
        return;
    if (log) {
        // librdkafka's log lines: their first DATA bytes, as strace -s 256 keeps
        __u64 n = r->a[2];
        r->count = n > 0xffffffff ? 0xffffffff : n;
        if (n > DATA)
            n = DATA;
        if (bpf_probe_read_user(r->data, n, (void *)r->a[1]) == 0)
            r->data_len = n;
    } else {
        name_fd(r, e, fd);
        if (ret > 0 && r->id.mode == S_IFSOCK)
            keep_head(r, ret);
    }
    submit(r);
}

static __always_inline void on_exit_sockopt(struct entry *e, long ret)
{
    struct rec *r = begin(e, KIND_F, ret, REC_SMALL);
    if (!r)
        return;
    name_fd(r, e, (long)r->a[0]);
    // the int the option holds: set before the call, got after it
    bpf_probe_read_user(&r->extra, 4, (void *)r->a[3]);
    submit(r);
}

static __always_inline void on_exit_poll(struct entry *e, long ret, int ppoll)
{
    struct rec *r = begin(e, KIND_P, ret, REC_SMALL);
    if (!r)
        return;
    __u64 nfds = r->a[1];
    r->a[1] = r->a[0];      // poll(ufds, nfds, timeout): the record keeps nfds first, as bpftrace's
    r->a[0] = nfds;
    r->count = nfds;
    __u64 n = nfds < POLLS ? nfds : POLLS;
    if (bpf_probe_read_user(r->data, n * sizeof(struct pollfd), (void *)r->a[1]) == 0)
        r->data_len = n * sizeof(struct pollfd);
    if (ppoll) {
        // the timeout in ms, -1 for none, as poll() takes it
        struct __kernel_timespec ts = {};
        if (r->a[2] == 0 || bpf_probe_read_user(&ts, sizeof(ts), (void *)r->a[2]))
            r->a[2] = (__u64)-1;
        else
            r->a[2] = (__u64)ts.tv_sec * 1000 + (__u64)ts.tv_nsec / 1000000;
    }
    submit(r);
}

static __always_inline void on_exit_connect(struct entry *e, long ret)
{
    struct rec *r = begin(e, KIND_C, ret, REC_SMALL);
    if (!r)
        return;
    name_fd(r, e, (long)r->a[0]);
    r->extra = (__s32)r->a[2];
    // the address asked for: family, port, v4 or v6 address
    if (bpf_probe_read_user(r->data, 28, (void *)r->a[1]) == 0)
        r->data_len = 28;
    submit(r);
}

static __always_inline void on_exit_plain(struct entry *e, long ret)
{
    struct rec *r = begin(e, KIND_X, ret, REC_SMALL);
    if (!r)
        return;
    e->last = 0;
    submit(r);
}

static __always_inline void event(__u32 kind, long code)
{
    struct rec *r = reserve(REC_SMALL);
    if (!r)
        return;
    __builtin_memset(r, 0, REC_HEAD);
    r->ts = bpf_ktime_get_ns();
    r->tid = (__u32)bpf_get_current_pid_tgid();
    r->kind = kind;
    r->ret = code;
    submit(r);
}

// The record of the call ``e`` began with, as it returns ``ret``.
static __always_inline void leave(struct entry *e, long ret)
{
    switch (e->code) {
    case 1: case 3: case 5: case 7: on_exit_write(e, ret); break;
    case 11: on_exit_poll(e, ret, 0); break;
    case 12: on_exit_poll(e, ret, 1); break;
    case 15: on_exit_connect(e, ret); break;
    case 16: on_exit_fd(e, ret, 1); break;
    case 17: case 18: on_exit_sockopt(e, ret); break;
    case 19: on_exit_plain(e, ret); break;
    default: on_exit_fd(e, ret, 0);
    }
}

// The hooks, one pair per call the record carries, on the per-syscall
// tracepoints: a call no pair names (futex, mmap, any other process's
// getppid...) runs no program at all, and only the traced process's calls
// get past traced(). Their context is the event's record, as
// /sys/kernel/tracing/events/syscalls/sys_enter_write/format lays it out:
//   field:int __syscall_nr;  offset:8;  size:4;  signed:1;
//   field:unsigned int fd;   offset:16; size:8;  signed:0;   (each argument 8 bytes)
// and sys_exit_write's
//   field:long ret;          offset:16; size:8;  signed:1;
// A call's arguments past its own are not in the record: they are kept as 0.
struct sc_enter { __u64 common; long nr; __u64 args[6]; };
struct sc_exit { __u64 common; long nr; long ret; };

#define ARG(c, i, nargs) ((nargs) > (i) ? (c)->args[i] : 0)

#define HOOK(call, CODE, nargs)                                                         \
SEC("tp/syscalls/sys_enter_" #call)                                                     \
int enter_##call(struct sc_enter *c)                                                    \
{                                                                                       \
    if (traced())                                                                       \
        enter(CODE, ARG(c, 0, nargs), ARG(c, 1, nargs), ARG(c, 2, nargs), ARG(c, 3, nargs)); \
    return 0;                                                                           \
}                                                                                       \
SEC("tp/syscalls/sys_exit_" #call)                                                      \
int exit_##call(struct sc_exit *c)                                                      \
{                                                                                       \
    if (!traced())                                                                      \
        return 0;                                                                       \
    struct entry *e = entry_of();                                                       \
    /* not its own entry: one from before the hooks were all attached */                \
    if (e && e->code == (CODE))                                                         \
        leave(e, c->ret);                                                               \
    return 0;                                                                           \
}

HOOK(write, 1, 3)
HOOK(read, 2, 3)
HOOK(writev, 3, 3)
HOOK(sendto, 5, 4)
HOOK(recvfrom, 6, 4)
HOOK(sendmsg, 7, 3)
HOOK(recvmsg, 8, 3)
HOOK(poll, 11, 3)
HOOK(ppoll, 12, 4)
HOOK(epoll_wait, 13, 4)
HOOK(epoll_pwait, 14, 4)
HOOK(connect, 15, 3)
HOOK(socket, 16, 3)
HOOK(setsockopt, 17, 4)
HOOK(getsockopt, 18, 4)
HOOK(close, 19, 1)

SEC("tp/syscalls/sys_enter_exit_group")
int enter_exit_group(struct sc_enter *c)
{
    if (traced())
        event(KIND_G, (long)c->args[0]);
    return 0;
}

// Or uprobes in the process's libc (collectors/_libc_probes.py): a breakpoint
// in the traced process's own pages, which no other process meets. The
// loader hangs this pair on each call's function, the call's code and the
// probe's place in libc as the probe's cookie (COOKIE_CODE_BITS). libc's
// calling convention puts the fourth argument in rcx (the syscall's is in
// r10).
SEC("uprobe")
int call_entry(struct pt_regs *ctx)
{
    __u64 cookie = bpf_get_attach_cookie(ctx);
    __u32 code = cookie & ((1 << COOKIE_CODE_BITS) - 1);
    if (!traced())
        return 0;
    if (code == CODE_EXIT_GROUP) {
        event(KIND_G, (long)(int)ctx->di);
        return 0;
    }
    struct entry *e = enter(code, ctx->di, ctx->si, ctx->dx, ctx->cx);
    // the kernel sets ip to the probe's address for the handler: less the
    // probe's place in libc, libc's base in this process
    if (e)
        e->libc = ctx->ip - (cookie >> COOKIE_CODE_BITS);
    return 0;
}

// Calls from code 11 on (poll ... close) return an int: the upper half of
// rax is not theirs.
#define RETURNS_INT(code) ((code) >= 11)

// libc returns -1 and keeps the error in errno, at the thread pointer plus
// an offset in libc's GOT (cfg.errno_slot): the record holds -errno, as the
// syscall returned it.
static __always_inline long errno_of(struct entry *e)
{
    long long tpoff = 0;
    int err = 0;
    if (!cfg.errno_slot || bpf_probe_read_user(&tpoff, sizeof(tpoff), (void *)(e->libc + cfg.errno_slot)))
        return -1;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    unsigned long tp = BPF_CORE_READ(t, thread.fsbase);
    if (bpf_probe_read_user(&err, sizeof(err), (void *)(tp + tpoff)) || err <= 0)
        return -1;
    return -err;
}

SEC("uretprobe")
int call_return(struct pt_regs *ctx)
{
    __u32 code = bpf_get_attach_cookie(ctx) & ((1 << COOKIE_CODE_BITS) - 1);
    struct entry *e = entry_of();
    if (!e || e->code != code)
        return 0;
    long ret = RETURNS_INT(code) ? (long)(int)ctx->ax : (long)ctx->ax;
    leave(e, ret == -1 ? errno_of(e) : ret);
    return 0;
}

// Where the per-syscall tracepoints cannot be attached (the loader falls
// back to these): one program for every call of every process, which asks
// the call's number first, before traced() and any map lookup.

// x86-64 syscall numbers -> _bpftrace_records.CALLS codes
static __always_inline __u32 code_of(long id)
{
    switch (id) {
    case 1: return 1;       // write
    case 0: return 2;       // read
    case 20: return 3;      // writev
    case 44: return 5;      // sendto
    case 45: return 6;      // recvfrom
    case 46: return 7;      // sendmsg
    case 47: return 8;      // recvmsg
    case 7: return 11;      // poll
    case 271: return 12;    // ppoll
    case 232: return 13;    // epoll_wait
    case 281: return 14;    // epoll_pwait
    case 42: return 15;     // connect
    case 41: return 16;     // socket
    case 54: return 17;     // setsockopt
    case 55: return 18;     // getsockopt
    case 3: return 19;      // close
    }
    return 0;
}
#define NR_EXIT_GROUP 231

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
    if (id == NR_EXIT_GROUP) {
        if (traced())
            event(KIND_G, (long)regs->di);
        return 0;
    }
    __u32 code = code_of(id);
    // regs is the kernel's own (BTF): read in place, not copied by a helper
    if (code && traced())
        enter(code, regs->di, regs->si, regs->dx, regs->r10);
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
    // the call's number, as the kernel keeps it for the exit (syscall_get_nr)
    if (!code_of(regs->orig_ax) || !traced())
        return 0;
    struct entry *e = entry_of();
    if (e && e->code)
        leave(e, ret);
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *t)
{
    if (traced())
        event(KIND_E, BPF_CORE_READ(t, exit_code) >> 8);
    return 0;
}

// strace -f follows what the process forks; so does the tracer.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 tgid = BPF_CORE_READ(parent, tgid);
    if (tgid != cfg.tgid && !bpf_map_lookup_elem(&tgids, &tgid))
        return 0;
    __u32 kid = BPF_CORE_READ(child, tgid);
    if (kid == tgid)    // a thread
        return 0;
    __u8 one = 1;
    bpf_map_update_elem(&tgids, &kid, &one, BPF_ANY);
    forked = 1;
    return 0;
}
