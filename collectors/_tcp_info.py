"""struct tcp_info as the running kernel returns it, and the pidfd calls
that read it from another process's socket without stopping it."""
from __future__ import annotations

import ctypes
import errno
import os
import struct

SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
TCP_INFO_BUF = 512

TCP_STATES = {
    1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
    6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
    11: "CLOSING", 12: "NEW_SYN_RECV",
}

# struct tcp_info (include/uapi/linux/tcp.h): (key, offset, struct format).
# The kernel copies min(its size, the buffer) and reports the length, so a
# field is decoded only when it lies wholly inside what was returned: older
# kernels return a shorter struct, newer ones append fields.
# Keys carry the kernel's unit; fields without a unit suffix count segments
# or events.
_U8, _U16, _U32, _U64 = "B", "H", "I", "Q"
TCP_INFO_LAYOUT: tuple[tuple[str, int, str], ...] = (
    ("state", 0, _U8),
    ("ca_state", 1, _U8),
    ("retransmits", 2, _U8),
    ("probes", 3, _U8),
    ("backoff", 4, _U8),
    ("options", 5, _U8),
    # byte 6: snd_wscale:4, rcv_wscale:4; byte 7: delivery_rate_app_limited:1,
    # fastopen_client_fail:2 (decoded below)
    ("rto_us", 8, _U32),
    ("ato_us", 12, _U32),
    ("snd_mss_bytes", 16, _U32),
    ("rcv_mss_bytes", 20, _U32),
    ("unacked", 24, _U32),
    ("sacked", 28, _U32),
    ("lost", 32, _U32),
    ("retrans", 36, _U32),
    ("fackets", 40, _U32),
    ("last_data_sent_ms", 44, _U32),
    # 48 last_ack_sent: never filled in by Linux
    ("last_data_recv_ms", 52, _U32),
    ("last_ack_recv_ms", 56, _U32),
    ("pmtu_bytes", 60, _U32),
    ("rcv_ssthresh_bytes", 64, _U32),
    ("rtt_us", 68, _U32),
    ("rttvar_us", 72, _U32),
    ("snd_ssthresh", 76, _U32),
    ("snd_cwnd", 80, _U32),
    ("advmss_bytes", 84, _U32),
    ("reordering", 88, _U32),
    ("rcv_rtt_us", 92, _U32),
    ("rcv_space_bytes", 96, _U32),
    ("total_retrans", 100, _U32),
    ("pacing_rate_bytes_s", 104, _U64),
    ("max_pacing_rate_bytes_s", 112, _U64),
    ("bytes_acked", 120, _U64),
    ("bytes_received", 128, _U64),
    ("segs_out", 136, _U32),
    ("segs_in", 140, _U32),
    ("notsent_bytes", 144, _U32),
    ("min_rtt_us", 148, _U32),
    ("data_segs_in", 152, _U32),
    ("data_segs_out", 156, _U32),
    ("delivery_rate_bytes_s", 160, _U64),
    ("busy_time_us", 168, _U64),
    ("rwnd_limited_us", 176, _U64),
    ("sndbuf_limited_us", 184, _U64),
    ("delivered", 192, _U32),
    ("delivered_ce", 196, _U32),
    ("bytes_sent", 200, _U64),
    ("bytes_retrans", 208, _U64),
    ("dsack_dups", 216, _U32),
    ("reord_seen", 220, _U32),
    ("rcv_ooopack", 224, _U32),
    ("snd_wnd_bytes", 228, _U32),
    ("rcv_wnd_bytes", 232, _U32),
    ("rehash", 236, _U32),
    ("total_rto", 240, _U16),
    ("total_rto_recoveries", 242, _U16),
    ("total_rto_time_ms", 244, _U32),
)
_LAYOUT = tuple((k, off, struct.Struct("=" + f)) for k, off, f in TCP_INFO_LAYOUT)


def decode_tcp_info(buf: bytes) -> dict[str, int]:
    """The fields of struct tcp_info that ``buf`` holds whole."""
    n = len(buf)
    out: dict[str, int] = {}
    for key, off, st in _LAYOUT:
        if off + st.size > n:
            break
        out[key] = st.unpack_from(buf, off)[0]
        if off == 5 and n >= 8:
            out["snd_wscale"] = buf[6] & 0x0F
            out["rcv_wscale"] = buf[6] >> 4
            out["delivery_rate_app_limited"] = buf[7] & 0x01
            out["fastopen_client_fail"] = (buf[7] >> 1) & 0x03
    return out


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(nr: int, *args: int) -> int:
    r = _libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def pidfd_open(pid: int) -> int:
    return _syscall(SYS_PIDFD_OPEN, pid, 0)


def pidfd_getfd(pidfd: int, fd: int) -> int:
    return _syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)



def errno_text(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, str(e.errno))
    text = f"{name} {e.strerror or e}"
    if e.errno in (errno.EPERM, errno.EACCES):
        text += " (needs root or ptrace rights over the target)"
    elif e.errno == errno.ENOSYS:
        text += " (kernel before 5.6 has no pidfd_getfd)"
    return text
