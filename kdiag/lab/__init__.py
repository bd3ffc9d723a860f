"""The lab: a real broker (Tansu) behind a TLS terminator, network namespaces
with a delay line, the proxies that make each cause happen, and the scenarios
that combine them (``kdiag.lab.scenarios``: one module a scenario)."""
