"""``python -m rankmap`` is the ``rankmap`` command."""

from rankmap.entry import main

raise SystemExit(main())
