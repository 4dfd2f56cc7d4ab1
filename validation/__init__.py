"""Tool-gap fitting, performance-model calibration, sim-vs-measured comparison and report rendering."""
