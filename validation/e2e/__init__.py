"""End-to-end cells: measured serving runs (vLLM, LLMPerf, inference-perf, agent JCT, live engines) replayed in the
simulator with the deployment each recorded, and the end-to-end fits of the engine cost."""
