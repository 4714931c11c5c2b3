"""inhouse: plan, run, measure and drill an on-prem LLM inference stack."""

__version__ = "0.1.0"
