"""``python -m ragym.data_prep.encoding``: encode a JSON-lines item file into shards, locally or on Ray."""

import sys

from ragym.data_prep.encoding.cli import main

sys.exit(main(sys.argv[1:]))
