"""What operators see of the gateway: Prometheus metrics (agentgate's and vLLM's names), OpenTelemetry traces and
the dashboard's numbers.
"""
