"""stallscope's analyzer: trace files -> trace model -> graph -> passes -> findings -> ``Analysis``.
Pure: no torch, no plotting. Its layers, bottom to top (each imports only those below it; the contracts
are in pyproject.toml): ``core``, then ``load`` and ``graph``, ``passes``, ``evidence``, ``findings`` and
``selfcheck``, ``analysis``, ``job``, ``document``. The public names are ``stallscope``'s."""
