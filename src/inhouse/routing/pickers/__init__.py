"""Pickers: from the candidates' weighted score totals to one candidate, one per file."""
