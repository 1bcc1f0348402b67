"""``python -m bench`` runs the ``compcoll`` command line."""

from .cli import main

raise SystemExit(main())
