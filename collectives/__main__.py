"""``python -m collectives`` runs the ``compcoll`` command line."""

from .cli import main

raise SystemExit(main())
