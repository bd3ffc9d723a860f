"""Consistent pseudonyms for IP addresses and hostnames in what goes into a
bundle, so that a bundle can leave the site without naming its hosts.

The same real value always gets the same pseudonym: within a bundle (the
broker ``10.1.2.3`` is the same pseudonym in the librdkafka log, in strace's
``TCP:[...->10.1.2.3:9093]`` and ``inet_addr("10.1.2.3")``, in the
statistics, the socket samples, the probe results and the pcap), and across
runs that use the same map file. Ports are kept, so every join the analysis
makes still holds and the verdict is the same.

Pseudonyms:
- IPv4 -> ``10.a.b.c`` from a keyed HMAC of the address (never .0 or .255);
- IPv6 -> ``fdxx:...`` (the unique-local fd00::/8), 120 bits of HMAC;
  an IPv4-mapped ``::ffff:a.b.c.d`` keeps its prefix and maps the IPv4 part,
  so the two spellings of one host stay one host;
- hostnames -> ``host-<10 hex>.invalid`` (RFC 6761: never resolves); a
  name of three labels or more -> ``host-<10 hex>.domain-<10 hex>.invalid``,
  its domain (all but the first label) mapped once for every host in it.
Kept as they are: loopback (127.0.0.0/8, ::1), the unspecified address
(0.0.0.0, ::) and the limited broadcast 255.255.255.255. They are the same
on every machine, name nothing, and the loopback lab's captures stay
readable. ``keep_loopback=False`` maps loopback too.

One module per concern:
- ``mapping``: the key, the HMAC, the real -> pseudonym pairs, the map file;
- ``scanner``: addresses and hostnames found in free text and JSON values;
- ``names``: hostnames learned from free text (fully qualified names, cloud
  names, bootstrap lists, /etc/hosts reads, DNS wire names);
- ``packets``: pcap and pcapng rewritten (headers, checksums, payloads cut);
- ``staging``: ``Pseudonyms`` (the map with its scanner) applied to a
  bundle's captures, and ``pseudonymise_manifest``.
"""
from kdiag.bundle.pseudonym.mapping import MAP_FORMAT, PseudonymError, PseudonymMap
from kdiag.bundle.pseudonym.staging import Pseudonyms, file_kind, pseudonymise_manifest

__all__ = ["MAP_FORMAT", "PseudonymError", "PseudonymMap", "Pseudonyms", "file_kind", "pseudonymise_manifest"]
