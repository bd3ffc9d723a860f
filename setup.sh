#!/usr/bin/env bash
# Installs everything kdiag and its tests need on a fresh Debian machine:
# the real strace and bpftrace, TLS terminator, tcpdump (the tests read
# kdiag's probe captures with it), nftables (the network lab drops SYNs
# with it), mtr and ping (the path tools whose output
# kdiag reads; fixtures/path/ was made with them), Java for Spark and Chromium with
# its driver (the tests open the HTML report in it), tmux (a terminal the
# tests read a screen from), gcc for kdiag's compiled
# scans (parsers/_scan.c; without it the parse runs their slower reference),
# clang and libbpf's headers for its BPF tracer (collectors/_bpfcalls*.c;
# without them kdiag trace falls back to bpftrace), then kdiag itself,
# then the class archive that halves a small Spark run's start. Node and npm
# for kafkajs, which the tests run beside librdkafka.
set -euo pipefail
cd "$(dirname "$0")"
need=()
for tool in node:nodejs npm:npm strace:strace bpftrace:bpftrace stunnel4:stunnel4 socat:socat openssl:openssl java:openjdk-17-jre-headless ip:iproute2 ethtool:ethtool nft:nftables traceroute:traceroute tcpdump:tcpdump mtr:mtr-tiny ping:iputils-ping chromium:chromium chromedriver:chromium-driver gcc:gcc clang:clang tmux:tmux; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
[ -f /usr/include/bpf/libbpf.h ] || need+=(libbpf-dev)
if [ "${#need[@]}" -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test,bench]'
# kafkajs, a client the tests run beside librdkafka (README: which clients
# set TCP_NODELAY), in build/ where they look for it (build/ is not the tree's).
[ -d build/clients/node_modules/kafkajs ] || npm install --silent --no-audit --no-fund --prefix build/clients kafkajs@2 >/dev/null
# A cache: kdiag runs without it, only slower to start (kdiag/analysis/class_archive.py).
python3 -m kdiag.analysis.class_archive >/dev/null || echo "setup: no Spark class archive; small analyses start slower" >&2
