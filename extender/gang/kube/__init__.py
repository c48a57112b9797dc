"""The gang's Kubernetes side: lifting its gate, nominating reserved nodes, the admission
policy's switch and the PodGroups users declare gangs with."""
