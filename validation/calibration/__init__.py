"""Calibration: the performance model's tunables fitted to the calibration cells of the measured component profiles
(``agentreplay calibrate``, :mod:`validation.calibration.calibrate`), and the catalog files it writes."""
