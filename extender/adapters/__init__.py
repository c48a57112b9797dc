"""The only package that talks to the Kubernetes API (clients, nodes, pods, bindings)."""
