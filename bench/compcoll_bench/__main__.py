"""``python -m compcoll_bench`` runs the ``compcoll`` command line."""

from .cli import main

raise SystemExit(main())
