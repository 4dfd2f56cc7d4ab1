"""Tool-gap models: per tool class duration distributions fitted to traces (``agentreplay fit-tools``)."""
