"""``python -m ggml_core.cli``."""

import sys

from ggml_core.cli import main

sys.exit(main())
