"""The cluster (DESIGN §2): the graph's links with capacities, routes and link loads (``links``,
built by ``build``), the cluster model with its widest-path bandwidth domains (``cluster``,
``domains``, read from the graph by ``graph``) and builders of common fabrics (``builders``)."""
