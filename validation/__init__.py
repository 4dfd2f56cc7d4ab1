"""Tool-gap fitting, performance-model calibration, sim-vs-measured comparison and report rendering.

``agentreplay validate`` runs :mod:`validation.validate` over the measured sources (:mod:`validation.measured`)
and one catalog (:mod:`validation.catalog`); its parts are subpackages: :mod:`validation.calibration` (the fits
behind ``agentreplay calibrate``), :mod:`validation.components` (component cells and the pricers on them),
:mod:`validation.e2e` (end-to-end replays), :mod:`validation.protocol` (roles, cross-validation, provenance),
:mod:`validation.report` (headline, figures, Markdown / HTML) and :mod:`validation.tools` (tool-gap models)."""
