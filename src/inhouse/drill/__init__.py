"""`inhouse drill`: the seven failure drills, run against a live stack and judged by a real
Prometheus and Alertmanager, with the evidence kept (docs/drill.md)."""
