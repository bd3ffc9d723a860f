"""The numbers the cause rules and the verdict share: one place, so that the
rules, the sentences quoting them and the benchmark's SQL agree."""

# Linux's TCP_DELACK_MIN: the shortest a receiver delays an ACK (HZ/25).
DELAYED_ACK_MS = 40.0
# A stall counts as the delayed-ACK timer when the wait beyond the path RTT
# is in this range. Request/response traffic keeps Linux's ACK delay near
# TCP_ATO_MIN (40 ms; 40-48 ms measured here, p99 under 55 ms). The upper
# bound keeps out what only looks alike: a broker throttle (~100 ms in the
# throttled lab, which a 150 ms bound took for nagle_in_path) and RTO
# stalls (205-250 ms in the packet-loss lab). Peers that delay ACKs longer
# (BSD and macOS 100 ms, Windows 200 ms) are not covered.
NAGLE_EXCESS_MIN_MS = 30.0
NAGLE_EXCESS_MAX_MS = 70.0
# A request slower than this is worth explaining at all.
SLOW_MS = 10.0
# Requests sent in one write that wait as long as the split ones rule Nagle
# out, from this many on: one alone can be a request whose first writes came
# before an attached tracer did (the slow-broker lab has 5 in 30 messages).
ONE_WRITE_MIN = 3
# ... and "as long" is at least this share of the split ones' median wait.
ONE_WRITE_WAIT_SHARE = 0.5
# A request no larger than this leaves in one TLS record and one segment
# (an ApiVersionRequest is 25-70 bytes): Nagle holds nothing of it back
# when nothing unacknowledged precedes it.
ONE_RECORD_BYTES = 200
# A cause names the verdict when it explains at least this share of requests.
DOMINANT_SHARE = 0.5
# A cause is listed as contributing from this share on.
CONTRIBUTING_SHARE = 0.1
# A tail cause (a few requests, long stalls) names the verdict when its
# requests take this share of all the time spent.
TAIL_TIME_SHARE = 0.25
# A slow wait is the network when the path round trip is at least this
# share of it.
NETWORK_RTT_SHARE = 0.5
# A slow request is the client's CPU when its thread waited for a core (run-
# queue wait, schedstat) for at least this share of its wait.
CPU_STARVED_SHARE = 0.5
# A slow request is the broker's quota when the broker reported a throttle
# time of at least this share of the request's wait around its response.
THROTTLE_SHARE = 0.5
# A path round trip this long, given alone (a ping, a traceroute: no
# request seen), names network_latency: every request pays at least one
# round trip, and this is most of any latency a producer is called slow
# for. A shorter path alone decides nothing.
PATH_ALONE_SLOW_MS = 50.0
# The first SYN is retransmitted after TCP_TIMEOUT_INIT (1 s): a handshake
# this long held at least one retransmit (Linux: 1 s, then 3 s, 7 s, ...).
SYN_RETRANSMIT_MS = 900.0
