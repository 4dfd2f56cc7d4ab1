"""The validation protocol: whole-cell roles and the rules every pricer is judged by
(:mod:`validation.protocol.rules`), the constants' provenance, cross-validation inside the calibration cells,
leave-one-GPU-out and leave-one-model-out, and their Markdown."""
