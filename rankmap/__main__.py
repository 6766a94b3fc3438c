"""``python -m rankmap`` is the ``rankmap`` command."""

from rankmap.cli import main

raise SystemExit(main())
