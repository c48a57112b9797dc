"""DRA: ephemeral resources published as devices in ResourceSlices (mode dra, Kubernetes 1.37)."""
