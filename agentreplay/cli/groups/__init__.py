"""The command groups of ``agentreplay``, one module each: every command belongs to one group (one help panel of
``agentreplay --help``), and each group names the module of :mod:`agentreplay.cli` that defines each of its commands
(:class:`agentreplay.cli.groups.base.Group`). The top-level application (:mod:`agentreplay.cli.app`) merges them."""
