import sys

from kdiag.cli import main

sys.exit(main())
