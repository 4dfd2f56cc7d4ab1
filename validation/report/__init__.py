"""The validation report: the headline, the summary's numbers, the tables and figures, the error bands, rendered as
``report.md`` and ``report.html``."""
