"""Component cells: measured operator, layer, iteration and all-reduce profiles mapped onto the performance model's
operators (:mod:`validation.components.profiles`), priced by every pricer, and what limits each on them."""
