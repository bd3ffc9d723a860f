/* A record of the bpfcalls tracer, shared by the BPF program
 * (_bpfcalls.bpf.c), its loader (_bpfcalls.c) and the converter
 * (bpfcalls.py, which reads struct rec, the #defines and the enum from this
 * file with _c_layout.py: keep to what that reads, fixed-width types,
 * nested structs, arrays sized by a number or a #define). */
#ifndef KDIAG_BPFCALLS_H
#define KDIAG_BPFCALLS_H

#include <linux/types.h>

#define DATA 256
#define NAME 64
#define POLLS 4
/* Reserved for a record without log text: its name and up to SMALL_DATA bytes. */
#define SMALL_DATA 32
/* A socket write's first bytes kept: a Kafka request header names the
 * request (size 4, api key 2, version 2, correlation id 4, client id length
 * 2), and a typical client id (kafka-python-producer-1, rdkafka) fits in the
 * 50 bytes left; a client id cut short still leaves the api and correlation
 * id. */
#define HEAD 64
enum { KIND_F = 1, KIND_D, KIND_P, KIND_C, KIND_X, KIND_E, KIND_G };
/* A uprobe's cookie: the call code in its low byte (CODE_EXIT_GROUP: libc's
 * _exit, which makes the process's exit_group), the probe's address in
 * libc's addresses above it. */
#define CODE_EXIT_GROUP 255
#define COOKIE_CODE_BITS 8

/* What names an fd, as strace -yy does: its inode's number and mode; a
 * socket's family, type, protocol, ports, and IPv4 and IPv6 addresses as
 * the kernel holds them. */
struct fdid {
    __u64 ino;
    __u32 mode;
    __s32 fam, typ, proto, lport, rport;
    __u32 la, ra, la6[4], ra6[4];
};

struct rec {
    __u64 ts;          /* entry, CLOCK_MONOTONIC ns (bpf_ktime_get_ns) */
    __u64 dur;         /* ns from entry to exit */
    __s64 ret;
    __u64 a[4];        /* the call's first four arguments as it got them */
    __u32 tid;
    __u16 code;        /* _bpftrace_records.CALLS code; E and G: none */
    __u16 kind;        /* KIND_* */
    __u32 count;       /* D: bytes the call wrote; P: nfds; F, a socket write
                          with data: its bytes (writev, sendmsg: its first iovec's) */
    struct fdid id;
    __s32 extra;       /* getsockopt/setsockopt: the int value; C: address length;
                          sendmsg: msg_iovlen */
    __u16 name_len;    /* a file's last path component (files only) */
    __u16 data_len;    /* bytes of data used: D text, P pollfds, C sockaddr, F a
                          socket write's first HEAD bytes */
    char name[NAME];
    __u8 data[DATA];
};

/* What the loader tells the program before it loads it. */
struct cfg {
    __u32 tgid;        /* the process traced */
    __u32 pad;
    __u64 errno_slot;  /* uprobes: the GOT slot of errno's offset from the thread pointer, in libc's
                          addresses (collectors/_libc_probes.py); 0 unknown */
};

#define REC_HEAD __builtin_offsetof(struct rec, name)
#define REC_SMALL (REC_HEAD + NAME + SMALL_DATA)
/* Reserved for a write that may be a socket's: room for its HEAD bytes. */
#define REC_SEND (REC_HEAD + NAME + HEAD)

#endif
