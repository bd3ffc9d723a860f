"""Raw captures in their tools' own formats -> Arrow tables.

Each parser module declares the formats it reads in ``FORMATS``
(kdiag.parsers.format): how a file is recognised, which tables it fills
and their schemas; kdiag.parsers.registry lists those modules. See each
module's docstring for its tables' columns. Parsers are pure: no file I/O,
no clock.
"""
