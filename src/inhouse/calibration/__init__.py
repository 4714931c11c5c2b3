"""Calibration of the engine model against measured runs: the corpus, plausibility bounds,
and the replay that lets the fit evaluate many constants per simulation."""
