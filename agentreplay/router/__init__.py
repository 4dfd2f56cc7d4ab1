"""The session-aware router: which instance a released call goes to (:mod:`.policies`), and the admission hook
that decides whether a released call enters the cluster now (:mod:`.admission`)."""
