"""The ESLs' Kubernetes side: ESCHER's pure approach, ephemeral resources as node status."""
