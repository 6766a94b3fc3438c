"""Lower bounds on the objective (DESIGN §4–§5): per class and searched space (``analytic``), on
rates over the fabric (``rates``, ``ringrate``), split all-to-alls (``splitbound``), classes
jointly per domain and nested pair of domains (``cutbound``, ``gridcut``)."""
