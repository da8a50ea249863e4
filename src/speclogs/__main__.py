"""`python -m speclogs …` — same as the `speclogs` command."""

import sys

from speclogs.cli import main

sys.exit(main())
