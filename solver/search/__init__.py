"""The search (DESIGN §5): the orchestrator ``solve`` over one ``problem`` (the checked inputs,
the baseline, each order's groups), and one module per strategy: ``exhaustive``, ``proposals``
(per order: ``decompose`` with ``cpsat``, the assignment model, ``polish``, ``partition``,
``tiling``), ``refine``, ``localsearch``, ``anytime``, ``hostchoice``; candidates are filtered by
``constraints``, every phase stops at the solve's ``deadline``, and ``answer`` picks the result.
``evaluate`` scores a given layout."""
